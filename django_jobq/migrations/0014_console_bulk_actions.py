# The console's bulk actions: one row per "select all matching" action (django_jobq.console.bulk), with
# its selection, its progress (done, skipped, the cursor its batches went through) and its state. Small:
# one row per action an operator confirmed.
#
# jobq_job_dead gains finished_at (INCLUDE): the dead letters' groups (task, exception, jobs, last died)
# are read from the index alone instead of fetching every dead job's row for its finished_at.

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobq", "0013_fair_queueing"),
    ]

    operations = [
        migrations.CreateModel(
            name="BulkAction",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "action",
                    models.CharField(
                        choices=[("requeue", "requeue"), ("cancel", "cancel"), ("delete", "delete")],
                        max_length=16,
                    ),
                ),
                (
                    "selection",
                    models.JSONField(help_text="The jobs it acts on (console.selection.Selection)."),
                ),
                (
                    "options",
                    models.JSONField(
                        blank=True, default=dict, help_text="requeue: run_at, priority, spread."
                    ),
                ),
                (
                    "query",
                    models.TextField(
                        blank=True, help_text="The list's filter (its query string) it was started from."
                    ),
                ),
                (
                    "total",
                    models.BigIntegerField(help_text="Jobs the selection held when the operator confirmed."),
                ),
                ("done", models.BigIntegerField(default=0, help_text="Jobs acted on so far.")),
                (
                    "skipped",
                    models.BigIntegerField(
                        default=0,
                        help_text="Jobs of the selection left as they were (changed meanwhile, locked or gone).",
                    ),
                ),
                (
                    "cursor",
                    models.BigIntegerField(
                        default=0, help_text="The highest job id a committed batch went through."
                    ),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[("running", "running"), ("done", "done"), ("cancelled", "cancelled")],
                        default="running",
                        max_length=16,
                    ),
                ),
                ("cancel_requested_at", models.DateTimeField(blank=True, null=True)),
                ("requested_by", models.TextField()),
                ("job_id", models.BigIntegerField(blank=True, help_text="The job that runs it.", null=True)),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "db_table": "jobq_bulk_action",
                "ordering": ["-id"],
            },
        ),
        migrations.RemoveIndex(model_name="job", name="jobq_job_dead"),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status", 3)),
                fields=["queue", "task", "exception"],
                include=["finished_at"],
                name="jobq_job_dead",
            ),
        ),
    ]
