# The seats of capped queues (JOBQ["QUEUES"][q]["MAX_RUNNING"]): a worker starts a job of a capped
# queue only in a seat it holds (django_jobq.worker.seats). Tiny: one row per seat, the cap's number per
# capped queue, written by the holders' takes, renewals and releases.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobq", "0014_console_bulk_actions"),
    ]

    operations = [
        migrations.CreateModel(
            name="CapSeat",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "queue", "seat", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("queue", models.TextField()),
                (
                    "seat",
                    models.IntegerField(
                        help_text="0 .. the cap - 1 (seats at or past a lowered cap are never taken)"
                    ),
                ),
                (
                    "holder",
                    models.TextField(blank=True, help_text="The worker holding it (none: free).", null=True),
                ),
                (
                    "fence",
                    models.BigIntegerField(
                        db_default=0, help_text="Taken this many times: a holder's writes name it."
                    ),
                ),
                (
                    "lease_until",
                    models.DateTimeField(blank=True, help_text="Free again after this.", null=True),
                ),
            ],
            options={
                "db_table": "jobq_cap_seat",
            },
        ),
    ]
