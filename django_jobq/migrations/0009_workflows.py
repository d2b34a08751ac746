# Workflows: jobs that wait for other jobs (django_jobq.workflows).
#
# A job enqueued with dependencies is WAITING (status 5, never claimed) with waiting_on = its
# unresolved edges in jobq_dependency. When a job that has dependents (has_dependents) first reaches
# DONE, DEAD or CANCELLED, a trigger settles them in the same transaction, whichever statement
# finished it (a worker's completion, a failure, the reaper, a cancel, a release):
#   - it ended DEAD or CANCELLED: every WAITING dependent whose policy is "cancel" is CANCELLED, and
#     transitively theirs (cancelled_by "dependency:<id>", so a requeue of that job can revive them);
#   - its unresolved out-edges are resolved and each dependent's waiting_on drops by as many; a
#     dependent at 0 becomes PENDING, and its queue is notified when it is due.
# Edges are resolved exactly once: the UPDATE that resolves an edge re-checks "NOT resolved" on the
# row it locked, and the count falls by the edges resolved. A dependent added to a job while it
# finishes is safe too: the enqueue flags the dependency (UPDATE ... has_dependents, a row lock) in
# the enqueuer's transaction, so the finishing statement either waits for that commit, and the
# trigger's statements (each with a snapshot of its own: the function is VOLATILE) see the new edges
# and rows, or finishes first, and the enqueue sees the job finished and writes its edge resolved.
#
# The trigger's notification goes to the session's jobq.channel setting (a worker sets it), else to
# the default channel "jobq"; an empty setting sends none (JOBQ["NOTIFY"] off). Waiters of wait_for()
# hear of a cascaded cancel on jobq.done_channel, else "jobq_done".
#
# SQLite has no statement-level CTE in a trigger body: the transitive cascade is a view with a
# recursive CTE (jobq_doomed), rooted at the jobs being settled (jobq_settling, a scratch table the
# trigger fills and empties). A trigger does not fire for the rows it changes itself (SQLite's
# recursive_triggers is off by default; the WHEN clause refuses a nested run anyway), so the trigger
# settles the cascaded jobs' own edges in the same pass.


from typing import Any

import django.db.models.functions.datetime
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

POSTGRES_SETTLE = """
CREATE FUNCTION jobq_settle_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    channel text := coalesce(current_setting('jobq.channel', true), 'jobq');
    done_channel text := coalesce(nullif(current_setting('jobq.done_channel', true), ''), 'jobq_done');
    waiters bigint[];
    woken int;
    -- the finishing job's own time: what it cancels ends with it, what it releases is due against it
    settled_at timestamptz := coalesce(NEW.finished_at, statement_timestamp());
BEGIN
    IF NEW.status <> 2 THEN
        WITH RECURSIVE doomed(id) AS (
            SELECT e.dependent_id FROM jobq_dependency AS e JOIN jobq_job AS w ON w.id = e.dependent_id
            WHERE e.dependency_id = NEW.id AND NOT e.resolved
              AND w.status = 5 AND w.dependency_failure = 'cancel'
            UNION
            SELECT e.dependent_id FROM doomed AS d
            JOIN jobq_dependency AS e ON e.dependency_id = d.id AND NOT e.resolved
            JOIN jobq_job AS w ON w.id = e.dependent_id
            WHERE w.status = 5 AND w.dependency_failure = 'cancel'
        ), cancelled AS (
            UPDATE jobq_job
            SET status = 4, finished_at = settled_at, key_released = true, cancelled_by = 'dependency:' || NEW.id,
                last_error = format('cancelled: job %s, which it depends on, ended %s', NEW.id,
                                    CASE NEW.status WHEN 3 THEN 'DEAD' ELSE 'CANCELLED' END)
            WHERE id = ANY(ARRAY(SELECT id FROM doomed)) AND status = 5
            RETURNING id, awaited
        )
        SELECT array_agg(id) FILTER (WHERE awaited) INTO waiters FROM cancelled;
        PERFORM pg_notify(done_channel, w::text) FROM unnest(waiters) AS w;
        -- each cancelled job with dependents of its own has just been settled by its own trigger
    END IF;
    WITH resolved AS (
        UPDATE jobq_dependency SET resolved = true
        WHERE dependency_id = NEW.id AND NOT resolved
        RETURNING dependent_id
    ), released AS (
        UPDATE jobq_job AS w
        SET waiting_on = w.waiting_on - r.n, status = CASE WHEN w.waiting_on - r.n <= 0 THEN 0 ELSE 5 END
        FROM (SELECT dependent_id, count(*) AS n FROM resolved GROUP BY dependent_id) AS r
        WHERE w.id = r.dependent_id AND w.status = 5
        RETURNING w.queue, w.status, w.run_at
    )
    SELECT count(pg_notify(channel, q.queue)::text) INTO woken
    FROM (SELECT DISTINCT queue FROM released WHERE status = 0 AND run_at <= settled_at) AS q
    WHERE channel <> '';
    RETURN NULL;
END
$$;
CREATE TRIGGER jobq_job_settle AFTER UPDATE OF status ON jobq_job FOR EACH ROW
WHEN (NEW.has_dependents AND NEW.status IN (2, 3, 4) AND OLD.status NOT IN (2, 3, 4))
EXECUTE FUNCTION jobq_settle_dependents();
"""
POSTGRES_UNSETTLE = """
DROP TRIGGER IF EXISTS jobq_job_settle ON jobq_job;
DROP FUNCTION IF EXISTS jobq_settle_dependents();
"""

SQLITE_SETTLE = (
    "CREATE TABLE jobq_settling (id integer NOT NULL PRIMARY KEY)",
    """CREATE VIEW jobq_doomed AS
WITH RECURSIVE doomed(id) AS (
    SELECT e.dependent_id FROM jobq_settling AS s
    JOIN jobq_dependency AS e ON e.dependency_id = s.id AND NOT e.resolved
    JOIN jobq_job AS w ON w.id = e.dependent_id
    WHERE w.status = 5 AND w.dependency_failure = 'cancel'
    UNION
    SELECT e.dependent_id FROM doomed AS d
    JOIN jobq_dependency AS e ON e.dependency_id = d.id AND NOT e.resolved
    JOIN jobq_job AS w ON w.id = e.dependent_id
    WHERE w.status = 5 AND w.dependency_failure = 'cancel'
)
SELECT id FROM doomed""",
    """CREATE TRIGGER jobq_job_settle AFTER UPDATE OF status ON jobq_job
WHEN NEW.has_dependents AND NEW.status IN (2, 3, 4) AND OLD.status NOT IN (2, 3, 4)
     AND NOT EXISTS (SELECT 1 FROM jobq_settling)
BEGIN
    INSERT INTO jobq_settling (id) VALUES (NEW.id);
    INSERT INTO jobq_settling (id) SELECT id FROM jobq_doomed WHERE NEW.status IN (3, 4);
    UPDATE jobq_job
    SET status = 4, finished_at = coalesce(NEW.finished_at, strftime('%Y-%m-%d %H:%M:%f000', 'now')),
        key_released = 1,
        cancelled_by = 'dependency:' || NEW.id,
        last_error = 'cancelled: job ' || NEW.id || ', which it depends on, ended '
                     || CASE NEW.status WHEN 3 THEN 'DEAD' ELSE 'CANCELLED' END
    WHERE status = 5 AND id IN (SELECT id FROM jobq_settling WHERE id <> NEW.id);
    UPDATE jobq_job
    SET waiting_on = waiting_on - (
            SELECT count(*) FROM jobq_dependency AS e JOIN jobq_settling AS s ON s.id = e.dependency_id
            WHERE e.dependent_id = jobq_job.id AND NOT e.resolved),
        status = CASE WHEN waiting_on - (
            SELECT count(*) FROM jobq_dependency AS e JOIN jobq_settling AS s ON s.id = e.dependency_id
            WHERE e.dependent_id = jobq_job.id AND NOT e.resolved) <= 0 THEN 0 ELSE 5 END
    WHERE status = 5 AND id IN (
        SELECT e.dependent_id FROM jobq_dependency AS e JOIN jobq_settling AS s ON s.id = e.dependency_id
        WHERE NOT e.resolved);
    UPDATE jobq_dependency SET resolved = 1
    WHERE NOT resolved AND dependency_id IN (SELECT id FROM jobq_settling);
    DELETE FROM jobq_settling;
END""",
)
SQLITE_UNSETTLE = (
    "DROP TRIGGER IF EXISTS jobq_job_settle",
    "DROP VIEW IF EXISTS jobq_doomed",
    "DROP TABLE IF EXISTS jobq_settling",
)


def create_settle(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_SETTLE, params=None)
    elif vendor == "sqlite":
        for statement in SQLITE_SETTLE:
            schema_editor.execute(statement, params=None)


def drop_settle(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    vendor = schema_editor.connection.vendor
    for statement in {"postgresql": (POSTGRES_UNSETTLE,), "sqlite": SQLITE_UNSETTLE}.get(vendor, ()):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobq", "0008_job_table_autovacuum"),
    ]

    operations = [
        migrations.CreateModel(
            name="Dependency",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "dependent_id",
                        "dependency_id",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("dependent_id", models.BigIntegerField()),
                ("dependency_id", models.BigIntegerField()),
                ("resolved", models.BooleanField(db_default=False)),
            ],
            options={
                "db_table": "jobq_dependency",
            },
        ),
        migrations.CreateModel(
            name="Workflow",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.TextField(blank=True, default="")),
                ("created_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                "db_table": "jobq_workflow",
                "ordering": ["-id"],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="dependency_failure",
            field=models.TextField(
                blank=True,
                help_text='A job with dependencies: "cancel" (when one ends DEAD or CANCELLED) or "run" (anyway).',
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="has_dependents",
            field=models.BooleanField(
                db_default=False, help_text="Other jobs depend on this one (its end settles them)."
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="waiting_on",
            field=models.IntegerField(
                db_default=0, help_text="Dependencies not finished yet (a WAITING job becomes PENDING at 0)."
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="workflow_id",
            field=models.BigIntegerField(
                blank=True, help_text="The workflow (chain or group) the job belongs to.", null=True
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.SmallIntegerField(
                choices=[
                    (0, "Pending"),
                    (1, "Running"),
                    (2, "Done"),
                    (3, "Dead"),
                    (4, "Cancelled"),
                    (5, "Waiting"),
                ],
                default=0,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(condition=models.Q(("status", 5)), fields=["queue"], name="jobq_job_waiting"),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("workflow_id__isnull", False)),
                fields=["workflow_id", "status"],
                name="jobq_job_workflow",
            ),
        ),
        migrations.AddIndex(
            model_name="dependency",
            index=models.Index(fields=["dependency_id"], name="jobq_dependency_of"),
        ),
        migrations.AddIndex(
            model_name="dependency",
            index=models.Index(
                condition=models.Q(("resolved", False)), fields=["dependency_id"], name="jobq_dependency_open"
            ),
        ),
        migrations.AddIndex(
            model_name="workflow",
            index=models.Index(fields=["created_at"], name="jobq_workflow_created"),
        ),
        migrations.RunPython(create_settle, drop_settle, elidable=False),
    ]
