"""Which database holds what: queues placed on other PostgreSQL servers (JOBQ["SHARDS"] and
QUEUES[name]["DATABASE"]), and job ids that say which database they belong to.

Shard 0 is JOBQ["DATABASE"]; shard n's ids start at ``n << 48`` (2.8e14 ids per shard), set on its
sequences when it is migrated (django_jobq.apps: post_migrate), so an id names its database and no two
databases ever hand out the same id. Every operation on one job (cancel, wait_for, reschedule,
requeue, a Django Tasks result) runs on the database its id names; an enqueue runs on its queue's.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import itertools
import random
import time
from collections.abc import Iterable, Iterator, Sequence

from django.db import DatabaseError, connections

from .conf import home_database, jobq_settings, on_database
from .database_context import current_database
from .exceptions import ForeignTransaction, SpansDatabases, UnknownShard

ID_BITS = 48  # an id's low bits; the bits above them are its shard number
# tables whose ids leave the database (a job's, a workflow's), each given its shard's range
ID_TABLES = ("jobq_job", "jobq_workflow")


# the next database of a spread queue for a job with no shard key and no transaction on one of them
_ROUND_ROBIN = itertools.count(random.randrange(1 << 16))  # a random start: short-lived processes spread too

# a database of a spread queue that refused a connection, until when a job with no shard key passes it
# over (_answering): so that a database that is down costs each process one connect timeout, not one
# per enqueue
UNREACHABLE_SECONDS = 5.0
_UNREACHABLE: dict[str, float] = {}

# set by idempotent(): the enqueues inside carry a key that makes a second write a no-op
_IDEMPOTENT: contextvars.ContextVar[bool] = contextvars.ContextVar("jobq_idempotent", default=False)


def shard_number(alias: str) -> int:
    """0 for JOBQ["DATABASE"], else the alias's number in JOBQ["SHARDS"] (KeyError if none)."""
    return 0 if alias == home_database() else jobq_settings().shards[alias]


def id_floor(alias: str) -> int:
    """The first id of ``alias``'s range (1 on the home database)."""
    return max(1, shard_number(alias) << ID_BITS)


def id_ceiling(alias: str) -> int:
    """The last id of ``alias``'s range."""
    return ((shard_number(alias) + 1) << ID_BITS) - 1


def every_database() -> list[str]:
    """JOBQ["DATABASE"], then each alias of JOBQ["SHARDS"] by number."""
    shards = jobq_settings().shards
    return [home_database(), *sorted(shards, key=shards.__getitem__)]


def databases_of_queue(queue: str) -> tuple[str, ...]:
    """The aliases that hold ``queue``'s jobs: its DATABASES, its DATABASE, or JOBQ["DATABASE"]."""
    options = jobq_settings().queues.get(queue)
    if options is None:
        return (home_database(),)
    return options.databases or (options.database or home_database(),)


def database_of_queue(queue: str) -> str:
    """The one alias that holds ``queue``'s jobs; SpansDatabases for a queue spread over several
    (a job's database is then database_for(queue, key))."""
    found = databases_of_queue(queue)
    if len(found) > 1:
        raise SpansDatabases(
            f"queue {queue!r} is spread over databases {', '.join(found)}: each job's database "
            "follows from its shard key (django_jobq.shards.database_for)"
        )
    return found[0]


def database_for(queue: str, key: str | None = None) -> str:
    """The alias a job of ``queue`` is written to. A spread queue (QUEUES[queue]["DATABASES"]) puts
    a job with a shard key (its dedupe key, else its concurrency key, else ``shard_key=``) on the
    database that key hashes to, always the same one (rendezvous hashing: adding a database moves
    only the keys the new one wins); a job without one on the database whose transaction is open
    (it commits with it), else on the next database in turn that can be reached."""
    return choose(databases_of_queue(queue), key)


def choose(databases: Sequence[str], key: str | None) -> str:
    """One of ``databases`` for a job with shard key ``key`` (see database_for)."""
    if len(databases) == 1:
        return databases[0]
    if key is not None:
        return max(databases, key=lambda alias: _weight(alias, key))
    for alias in databases:
        if connections[alias].in_atomic_block:
            return alias
    start = next(_ROUND_ROBIN) % len(databases)
    return _answering([*databases[start:], *databases[:start]])


def _answering(databases: Sequence[str]) -> str:
    """The first of ``databases`` this thread is connected to or can connect to, passing over one that
    refused a connection in the last UNREACHABLE_SECONDS; the first of them when none can (its error
    is then the caller's). A connection is made before anything is sent, so a job that one database
    could not be reached for is never written there: it may go to the next."""
    now = time.monotonic()
    for alias in databases:
        if _UNREACHABLE.get(alias, 0.0) > now:
            continue
        connection = connections[alias]
        if connection.connection is not None and connection.errors_occurred and not connection.is_usable():
            connection.close()  # open, but its server went away since: connect anew (or pass it over)
        try:
            connection.ensure_connection()
        except DatabaseError:
            _UNREACHABLE[alias] = time.monotonic() + UNREACHABLE_SECONDS
            continue
        return alias
    return databases[0]


def _weight(alias: str, key: str) -> bytes:
    """``key``'s weight on ``alias``: from its shard number, so renaming an alias moves no key."""
    text = f"{shard_number(alias)}\x00{key}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=8).digest()


def placement_key(dedupe_key: str | None, concurrency_key: str | None, explicit: str | None) -> str | None:
    """The key a job of a spread queue is placed by: its dedupe key (a key's uniqueness is then
    decided on one database), else its concurrency key (a key's cap counts on one database), else
    the caller's ``shard_key``."""
    return (
        dedupe_key if dedupe_key is not None else concurrency_key if concurrency_key is not None else explicit
    )


def shared_databases(queues: Iterable[str]) -> list[str]:
    """The aliases that hold every one of ``queues`` (SpansDatabases when there is none)."""
    queues = sorted(set(queues))
    shared: list[str] | None = None
    for queue in queues:
        found = databases_of_queue(queue)
        shared = list(found) if shared is None else [alias for alias in shared if alias in found]
    if shared is None:
        return [home_database()]
    if not shared:
        raise SpansDatabases(
            f"these jobs' queues share no database ({', '.join(queues)}); one enqueue writes one "
            "database: enqueue each database's jobs on their own"
        )
    return shared


def database_of_job(job_id: int) -> str:
    """The alias whose server holds job (or workflow) ``job_id``, read from the id's shard number."""
    number = int(job_id) >> ID_BITS
    if number == 0 or not jobq_settings().shards:  # unsharded: every id is the home database's
        return home_database()
    for alias, n in jobq_settings().shards.items():
        if n == number:
            return alias
    raise UnknownShard(f"id {job_id} belongs to shard {number}, which JOBQ['SHARDS'] does not name")


def working_database() -> str:
    """The alias jobq's statements go to in this context."""
    return current_database() or home_database()


@contextlib.contextmanager
def on_shard(alias: str, *, writes_jobs: bool = False) -> Iterator[None]:
    """Run the block on ``alias`` (at no cost when the context is on it already). ``writes_jobs``: the
    block enqueues, so ForeignTransaction when it could not commit with the caller's transaction."""
    if writes_jobs and jobq_settings().shards and not _IDEMPOTENT.get():
        refuse_foreign_transaction(alias)
    if alias == working_database():
        yield
    else:
        with on_database(alias):
            yield


def outbox_source(alias: str) -> str | None:
    """The jobq database whose open transaction an enqueue to ``alias`` joins through its outbox
    (django_jobq.managers.outbox): None when no transaction is open on another database, or one is
    open on ``alias`` itself (the job joins that one). ForeignTransaction when the transaction is on
    a database that holds no outbox (not JOBQ["DATABASE"] nor a shard), or on several."""
    if _IDEMPOTENT.get() or connections[alias].in_atomic_block:
        return None
    open_on = [
        c.alias for c in connections.all(initialized_only=True) if c.alias != alias and c.in_atomic_block
    ]
    if len(open_on) == 1 and open_on[0] in every_database():
        return open_on[0]
    if open_on:
        refuse_foreign_transaction(alias)
    return None


def refuse_foreign_transaction(alias: str) -> None:
    """ForeignTransaction when a transaction is open on another database than ``alias`` and none on
    ``alias``: jobs written on ``alias`` would commit on their own, whatever the caller's
    transaction did (a job of a rolled-back order would run). A queue of the home database is left as
    it was before shards (docs/operations/separate-database.md: its job commits on its own)."""
    if alias == home_database() or connections[alias].in_atomic_block:
        return
    for connection in connections.all(initialized_only=True):
        if connection.alias != alias and connection.in_atomic_block:
            raise ForeignTransaction(
                f"this enqueue writes database {alias!r} from inside a transaction on "
                f"{connection.alias!r}: the job could not commit or roll back with it. Enqueue after "
                f"the commit, or open the transaction on {alias!r} (docs/operations/shards.md)"
            )


@contextlib.contextmanager
def idempotent() -> Iterator[None]:
    """Allow the enqueues inside to commit on their own database, outside the caller's transaction:
    for jobs whose dedupe key makes a second write of them a no-op, so that a caller whose transaction
    rolled back and tries again never doubles them (the scheduler's ticks)."""
    token = _IDEMPOTENT.set(True)
    try:
        yield
    finally:
        _IDEMPOTENT.reset(token)
