# Where moved jobs went (django_jobq.managers.moving): a row per job `jobq_queue move` took off this
# database, its old id and its new one, so that calls by the old id find it. Written in the move's
# transaction; one row per moved job, and moves are rare.

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobq", "0016_outbox"),
    ]

    operations = [
        migrations.CreateModel(
            name="MovedJob",
            fields=[
                (
                    "old_id",
                    models.BigIntegerField(
                        help_text="the job's id on this database", primary_key=True, serialize=False
                    ),
                ),
                ("new_id", models.BigIntegerField(help_text="its id on the database it was moved to")),
                ("moved_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "verbose_name": "moved job",
                "db_table": "jobq_moved",
            },
        ),
    ]
