# Fair queueing (JOBQ["QUEUES"][q]["FAIR"]): a job's fairness_key, the index a fair claim walks per key,
# and the per-key state the claim reads instead of the backlog.
#
# jobq_fair_key: one row per (queue, priority, key) that may have PENDING jobs, with the key's virtual
# time (vtime: jobs started / weight, advanced by each claim that takes the key's jobs). A fair claim
# walks a lane's keys by vtime, so its cost follows the keys it serves, never the jobs queued.
#
# Kept in step by the triggers below: every job that becomes PENDING with a fairness key (an insert,
# a retry, a requeue, a lease expiry, a release of a workflow's dependent) makes sure its key's row
# exists and holds a FOR KEY SHARE lock on it until its transaction ends. A new key starts at the
# lane's lowest vtime, so a newcomer joins the round instead of owning it. The reaper deletes the
# rows of keys left with no PENDING job (sql/postgres/fairness.py: PRUNE_LOCK then PRUNE): it locks
# them FOR UPDATE SKIP LOCKED first, so it never deletes a row an uncommitted job holds (KEY SHARE
# conflicts with FOR UPDATE), and checks for PENDING jobs in a later statement, whose snapshot sees
# every job committed before it held the lock. A claim updates vtime (FOR NO KEY UPDATE), which never
# conflicts with KEY SHARE: an application's open transaction that enqueued a job never blocks a claim.
# So: every PENDING job with a fairness key has its key's row (the invariant tests check after chaos).
#
# The trigger's loop is the standard insert-or-lock: the lock finds the row, or the insert creates
# it, or (a concurrent insert committed, or a prune deleted it) the next turn does.
#
# On SQLite the same table and two triggers of the same conditions, each inserting the key's row
# unless it exists. No lock protocol is needed: SQLite has one writer at a time (a write statement
# holds the database's write lock, the queue's multi-step statements run under BEGIN IMMEDIATE), so
# no claim, prune or enqueue runs between a trigger's check and its insert. A migration that later
# rebuilds jobq_job on SQLite (Django copies the table to alter it) drops these triggers and must
# create them again.

from typing import Any

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

PENDING = 0

POSTGRES = f"""
CREATE TABLE jobq_fair_key (
    queue text NOT NULL,
    priority smallint NOT NULL,
    key text NOT NULL,
    vtime double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, key, priority)
);
CREATE INDEX jobq_fair_key_round ON jobq_fair_key (queue, priority, vtime, key);
ALTER TABLE jobq_fair_key SET (autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);

CREATE FUNCTION jobq_fair_enter() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    LOOP
        PERFORM 1 FROM jobq_fair_key
        WHERE queue = NEW.queue AND priority = NEW.priority AND key = NEW.fairness_key FOR KEY SHARE;
        EXIT WHEN FOUND;
        INSERT INTO jobq_fair_key (queue, priority, key, vtime)
        SELECT NEW.queue, NEW.priority, NEW.fairness_key, COALESCE(min(f.vtime), 0)
        FROM jobq_fair_key AS f WHERE f.queue = NEW.queue AND f.priority = NEW.priority
        ON CONFLICT DO NOTHING;
        EXIT WHEN FOUND;
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER jobq_job_fair_insert AFTER INSERT ON jobq_job FOR EACH ROW
WHEN (NEW.fairness_key IS NOT NULL AND NEW.status = {PENDING})
EXECUTE FUNCTION jobq_fair_enter();

CREATE TRIGGER jobq_job_fair_update AFTER UPDATE OF status, queue, priority, fairness_key ON jobq_job FOR EACH ROW
WHEN (NEW.fairness_key IS NOT NULL AND NEW.status = {PENDING} AND (
    OLD.status <> {PENDING} OR OLD.queue <> NEW.queue OR OLD.priority <> NEW.priority
    OR OLD.fairness_key IS DISTINCT FROM NEW.fairness_key))
EXECUTE FUNCTION jobq_fair_enter();
"""
_SQLITE_ENTER = f"""
BEGIN
    INSERT INTO jobq_fair_key (queue, priority, key, vtime)
    SELECT NEW.queue, NEW.priority, NEW.fairness_key, COALESCE((
        SELECT min(f.vtime) FROM jobq_fair_key AS f WHERE f.queue = NEW.queue AND f.priority = NEW.priority), 0)
    WHERE NOT EXISTS (
        SELECT 1 FROM jobq_fair_key AS f
        WHERE f.queue = NEW.queue AND f.priority = NEW.priority AND f.key = NEW.fairness_key);
END"""
SQLITE = (
    """CREATE TABLE jobq_fair_key (
    queue text NOT NULL,
    priority smallint NOT NULL,
    key text NOT NULL,
    vtime real NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, key, priority)
) WITHOUT ROWID""",
    "CREATE INDEX jobq_fair_key_round ON jobq_fair_key (queue, priority, vtime, key)",
    f"""CREATE TRIGGER jobq_job_fair_insert AFTER INSERT ON jobq_job FOR EACH ROW
WHEN NEW.fairness_key IS NOT NULL AND NEW.status = {PENDING}
{_SQLITE_ENTER}""",
    f"""CREATE TRIGGER jobq_job_fair_update AFTER UPDATE OF status, queue, priority, fairness_key ON jobq_job
FOR EACH ROW
WHEN NEW.fairness_key IS NOT NULL AND NEW.status = {PENDING} AND (
    OLD.status <> {PENDING} OR OLD.queue <> NEW.queue OR OLD.priority <> NEW.priority
    OR OLD.fairness_key IS NOT NEW.fairness_key)
{_SQLITE_ENTER}""",
)
SQLITE_UNDO = (
    "DROP TRIGGER IF EXISTS jobq_job_fair_update",
    "DROP TRIGGER IF EXISTS jobq_job_fair_insert",
    "DROP TABLE IF EXISTS jobq_fair_key",
)
POSTGRES_UNDO = """
DROP TRIGGER IF EXISTS jobq_job_fair_update ON jobq_job;
DROP TRIGGER IF EXISTS jobq_job_fair_insert ON jobq_job;
DROP FUNCTION IF EXISTS jobq_fair_enter();
DROP TABLE IF EXISTS jobq_fair_key;
"""


def create(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for statement in {"postgresql": (POSTGRES,), "sqlite": SQLITE}.get(schema_editor.connection.vendor, ()):
        schema_editor.execute(statement, params=None)


def drop(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    for statement in {"postgresql": (POSTGRES_UNDO,), "sqlite": SQLITE_UNDO}.get(
        schema_editor.connection.vendor, ()
    ):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("django_jobq", "0012_console_dead_exception")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="fairness_key",
            field=models.TextField(
                blank=True,
                help_text='In a fair queue (JOBQ["QUEUES"][q]["FAIR"]), jobs are served round-robin by this key.',
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("fairness_key__isnull", False), ("status", PENDING)),
                fields=["queue", "fairness_key", "priority", "run_at", "id"],
                name="jobq_job_fair",
            ),
        ),
        migrations.RunPython(create, drop, elidable=False),
    ]
