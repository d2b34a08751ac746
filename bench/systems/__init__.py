"""The systems under test, by command-line name: django-jobq, its peers and the plain-psycopg ceiling."""

from __future__ import annotations

from bench.systems.base import System
from bench.systems.chancy_peer import ChancyPeer
from bench.systems.jobq import Jobq
from bench.systems.jobq_observed import JobqObserved
from bench.systems.jobq_pgbouncer import JobqPgbouncer
from bench.systems.jobq_tasks import JobqTasks
from bench.systems.oban_peer import Oban
from bench.systems.ox_peer import Ox
from bench.systems.pgqueuer_defaults import PgqueuerDefaults
from bench.systems.pgqueuer_peer import Pgqueuer
from bench.systems.procrastinate_peer import Procrastinate
from bench.systems.psycopg_ceiling import Psycopg
from bench.systems.q2_peer import Q2
from bench.systems.tasks_db_peer import TasksDb

SYSTEMS: dict[str, type[System]] = {
    cls.name: cls
    for cls in (
        Jobq,
        JobqPgbouncer,
        JobqObserved,
        JobqTasks,
        Procrastinate,
        Pgqueuer,
        PgqueuerDefaults,
        TasksDb,
        Ox,
        Q2,
        Oban,
        ChancyPeer,
        Psycopg,
    )
}
PEERS = [name for name, cls in SYSTEMS.items() if cls.peer]

__all__ = ["PEERS", "SYSTEMS", "System"]
