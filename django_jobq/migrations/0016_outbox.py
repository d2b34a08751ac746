# The outbox (django_jobq.managers.outbox): jobs for a queue on another database (JOBQ["SHARDS"]),
# written in the caller's transaction and relayed to the queue's database once it commits. Tiny: a
# row lives from the enqueue's commit until its relay, milliseconds normally.

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobq", "0015_cap_seats"),
    ]

    operations = [
        migrations.CreateModel(
            name="OutboxEntry",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("job_id", models.BigIntegerField(help_text="the id reserved for the job on its database")),
                ("database", models.TextField(help_text="the alias of the job's queue's database")),
                ("job", models.JSONField(help_text="the job's checked columns, as enqueue wrote them")),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "verbose_name": "outbox entry",
                "verbose_name_plural": "outbox",
                "db_table": "jobq_outbox",
            },
        ),
    ]
