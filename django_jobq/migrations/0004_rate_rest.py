# rest_at on the rate-limit tables and its index: the prune reads the rows at rest only.

import datetime

from django.db import migrations, models

# Rows written before this migration get the epoch: the prune reads them (and deletes those at rest)
# until an acquire of their key sets rest_at, which every acquire does.
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobq", "0003_round_two"),
    ]

    operations = [
        migrations.AddField(
            model_name="ratebucket",
            name="rest_at",
            field=models.DateTimeField(
                default=EPOCH, help_text="idle_at rounded up to a whole step: pruned from then on"
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="ratewindow",
            name="rest_at",
            field=models.DateTimeField(
                default=EPOCH, help_text="idle_at rounded up to a whole step: pruned from then on"
            ),
            preserve_default=False,
        ),
        migrations.AddIndex(
            model_name="ratebucket",
            index=models.Index(fields=["rest_at"], name="jobq_rate_bucket_rest"),
        ),
        migrations.AddIndex(
            model_name="ratewindow",
            index=models.Index(fields=["rest_at"], name="jobq_rate_window_rest"),
        ),
    ]
