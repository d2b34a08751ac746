# Autovacuum for jobq_job at a queue's pace (PostgreSQL only; SQLite has no such settings).
#
# Every job leaves about three dead row versions behind (its claim and its completion each write a new
# version, the prune deletes the last), and none of those updates can be HOT: each changes the status,
# which every partial index names in its predicate. PostgreSQL's defaults vacuum a table once a fifth
# of it is dead, which for a table holding a long finished history means hundreds of thousands of dead
# versions between passes, a table that keeps growing and index scans that keep stepping over them.
# These settings vacuum and analyse once 2% of the table (at least 1,000 rows) changed, inserts
# included (so the visibility map stays current for the index-only scans of the dashboard and the
# metrics). The fillfactor stays at 100: with no HOT update to make room for, a lower one only made
# the table larger (measured: 15% larger at 80 for the same drain).
#
# ALTER TABLE ... SET (storage parameters) takes a SHARE UPDATE EXCLUSIVE lock: reads and writes go on
# while it runs. To choose other values, run your own ALTER TABLE jobq_job SET (...) (or RESET (...)):
# this migration runs once and never overwrites them afterwards.

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.02",
    "autovacuum_vacuum_insert_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_analyze_threshold": "1000",
}


def set_storage(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    values = ", ".join(f"{name} = {value}" for name, value in SETTINGS.items())
    schema_editor.execute(f"ALTER TABLE jobq_job SET ({values})")


def reset_storage(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"ALTER TABLE jobq_job RESET ({', '.join(SETTINGS)})")


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobq", "0007_trace_context"),
    ]

    operations = [
        migrations.RunPython(set_storage, reset_storage, elidable=False),
    ]
