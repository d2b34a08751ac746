# A job deleted before it finished (the admin's "Delete selected", a queryset's delete(), SQL) settles
# its dependents as if it had ended CANCELLED, in the deleting transaction: those set to be cancelled
# by a failed dependency are CANCELLED, transitively (cancelled_by "deleted:<id>": a requeue of another
# job never revives them, the job they waited for is gone), the others stop waiting for it. So no
# dependent is left WAITING for a job that no longer exists.
#
# On PostgreSQL the settling moves into jobq_settle(id, status, at, cause, why), which the finishing
# trigger (migration 0009) and the new delete trigger both call. On SQLite a second trigger repeats the
# finishing trigger's steps for the deleted row (a trigger body cannot call a routine).

import importlib
from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

POSTGRES_SETTLE_0009 = importlib.import_module("django_jobq.migrations.0009_workflows").POSTGRES_SETTLE

POSTGRES = """
CREATE FUNCTION jobq_settle(settled bigint, ended smallint, settled_at timestamptz, cause text, why text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    channel text := coalesce(current_setting('jobq.channel', true), 'jobq');
    done_channel text := coalesce(nullif(current_setting('jobq.done_channel', true), ''), 'jobq_done');
    waiters bigint[];
    woken int;
BEGIN
    IF ended <> 2 THEN
        WITH RECURSIVE doomed(id) AS (
            SELECT e.dependent_id FROM jobq_dependency AS e JOIN jobq_job AS w ON w.id = e.dependent_id
            WHERE e.dependency_id = settled AND NOT e.resolved
              AND w.status = 5 AND w.dependency_failure = 'cancel'
            UNION
            SELECT e.dependent_id FROM doomed AS d
            JOIN jobq_dependency AS e ON e.dependency_id = d.id AND NOT e.resolved
            JOIN jobq_job AS w ON w.id = e.dependent_id
            WHERE w.status = 5 AND w.dependency_failure = 'cancel'
        ), cancelled AS (
            UPDATE jobq_job
            SET status = 4, finished_at = settled_at, key_released = true, cancelled_by = cause || ':' || settled,
                last_error = format('cancelled: job %s, which it depends on, %s', settled, why)
            WHERE id = ANY(ARRAY(SELECT id FROM doomed)) AND status = 5
            RETURNING id, awaited
        )
        SELECT array_agg(id) FILTER (WHERE awaited) INTO waiters FROM cancelled;
        PERFORM pg_notify(done_channel, w::text) FROM unnest(waiters) AS w;
        -- each cancelled job with dependents of its own has just been settled by its own trigger
    END IF;
    WITH resolved AS (
        UPDATE jobq_dependency SET resolved = true
        WHERE dependency_id = settled AND NOT resolved
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
END
$$;
CREATE OR REPLACE FUNCTION jobq_settle_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- the finishing job's own time: what it cancels ends with it, what it releases is due against it
    PERFORM jobq_settle(NEW.id, NEW.status, coalesce(NEW.finished_at, statement_timestamp()), 'dependency',
                        CASE NEW.status WHEN 2 THEN 'ended DONE' WHEN 3 THEN 'ended DEAD' ELSE 'ended CANCELLED' END);
    RETURN NULL;
END
$$;
CREATE FUNCTION jobq_settle_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobq_settle(OLD.id, 4::smallint, statement_timestamp(), 'deleted', 'was deleted');
    RETURN NULL;
END
$$;
CREATE TRIGGER jobq_job_settle_deleted AFTER DELETE ON jobq_job FOR EACH ROW
WHEN (OLD.has_dependents AND OLD.status NOT IN (2, 3, 4))
EXECUTE FUNCTION jobq_settle_deleted();
"""
POSTGRES_UNDO = (
    "DROP TRIGGER IF EXISTS jobq_job_settle_deleted ON jobq_job;\n"
    "DROP FUNCTION IF EXISTS jobq_settle_deleted();\n"
    "DROP TRIGGER IF EXISTS jobq_job_settle ON jobq_job;\n"
    "DROP FUNCTION IF EXISTS jobq_settle_dependents();\n"
    "DROP FUNCTION IF EXISTS jobq_settle(bigint, smallint, timestamptz, text, text);\n"
    + POSTGRES_SETTLE_0009
)

SQLITE = """CREATE TRIGGER jobq_job_settle_deleted AFTER DELETE ON jobq_job
WHEN OLD.has_dependents AND OLD.status NOT IN (2, 3, 4) AND NOT EXISTS (SELECT 1 FROM jobq_settling)
BEGIN
    INSERT INTO jobq_settling (id) VALUES (OLD.id);
    INSERT INTO jobq_settling (id) SELECT id FROM jobq_doomed;
    UPDATE jobq_job
    SET status = 4, finished_at = strftime('%Y-%m-%d %H:%M:%f000', 'now'), key_released = 1,
        cancelled_by = 'deleted:' || OLD.id,
        last_error = 'cancelled: job ' || OLD.id || ', which it depends on, was deleted'
    WHERE status = 5 AND id IN (SELECT id FROM jobq_settling WHERE id <> OLD.id);
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
END"""
SQLITE_UNDO = "DROP TRIGGER IF EXISTS jobq_job_settle_deleted"


def create(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    statement = {"postgresql": POSTGRES, "sqlite": SQLITE}.get(schema_editor.connection.vendor)
    if statement:
        schema_editor.execute(statement, params=None)


def drop(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    statement = {"postgresql": POSTGRES_UNDO, "sqlite": SQLITE_UNDO}.get(schema_editor.connection.vendor)
    if statement:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobq", "0010_worker_supervisor"),
    ]

    operations = [
        migrations.RunPython(create, drop, elidable=False),
    ]
