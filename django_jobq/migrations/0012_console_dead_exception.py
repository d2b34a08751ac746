# The operator console at volume.
#
# exception: what killed a DEAD job (its exception's class, "lease expired", ...), written once by the
# statement that makes it DEAD (FAIL, REAP, RELEASE on both engines), so that the dead letters are
# grouped and filtered by a column instead of parsing every dead job's last_error on each page. The
# jobs already DEAD are filled here: the class of their last failed attempt (errors[-1].class, without
# "builtins."), else the class their last_error names. It joins the dead-letter index jobq_job_dead
# (partial on DEAD), so the groups and the exception filter read that index only.
#
# jobq_job_cancelled: the CANCELLED jobs, newest first, with their queue (partial: written only when a
# job ends CANCELLED), for the job list filtered to them, which read the table backwards through the
# primary key, and for their counts (which read the whole DONE history of jobq_job_finished).

from typing import Any

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

from django_jobq.sql.postgres.stats import EXCEPTION_CLASS

DEAD, CANCELLED = 3, 4

POSTGRES_BACKFILL = f"""
UPDATE jobq_job
SET exception = COALESCE(
    left(regexp_replace(errors -> -1 ->> 'class', '^builtins[.]', ''), 200),
    {EXCEPTION_CLASS.replace("%(expressions)s", "last_error")})
WHERE status = {DEAD} AND exception IS NULL
"""


def backfill(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(POSTGRES_BACKFILL)
        return
    from django_jobq.sql.sqlite.setup import exception_class  # the same rule, in Python

    job = apps.get_model("django_jobq", "Job")
    dead = job.objects.using(connection.alias).filter(status=DEAD, exception__isnull=True)
    for pk, errors, last_error in dead.values_list("id", "errors", "last_error").iterator():
        last = errors[-1] if isinstance(errors, list) and errors and isinstance(errors[-1], dict) else {}
        kind = last.get("class") if isinstance(last.get("class"), str) else None
        died_of = kind.removeprefix("builtins.")[:200] if kind else exception_class(last_error)
        job.objects.using(connection.alias).filter(pk=pk).update(exception=died_of)


class Migration(migrations.Migration):
    dependencies = [("django_jobq", "0011_settle_on_delete")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="exception",
            field=models.TextField(
                blank=True,
                help_text="What killed a DEAD job: its exception's class (or 'lease expired'), written when it died.",
                null=True,
            ),
        ),
        # Filled while the old jobq_job_dead finds the DEAD rows, and before the new one indexes them.
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
        migrations.RemoveIndex(model_name="job", name="jobq_job_dead"),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status", DEAD)),
                fields=["queue", "task", "exception"],
                name="jobq_job_dead",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status", CANCELLED)),
                fields=["id"],
                include=["queue"],
                name="jobq_job_cancelled",
            ),
        ),
    ]
