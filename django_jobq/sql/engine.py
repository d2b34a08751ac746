"""The engines: how one named statement runs on one database. An engine is the statements of its
database (the same names in each), its Capabilities, and the few things that differ in running them:
the cursor, how parameters travel, and how a multi-step statement is made atomic."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django.db.backends.base.base import BaseDatabaseWrapper

from .capabilities import Capabilities


class Result(NamedTuple):
    names: list[str]  # the columns' names; empty for a statement that returns no rows
    rows: list[tuple[Any, ...]]
    rowcount: int


class NewRow(NamedTuple):
    """One job of an enqueue_many batch, checked, in the order ENQUEUE_MANY's arrays take them."""

    task: str
    queue: str
    priority: int
    max_attempts: int
    payload: str  # JSON text
    run_at: dt.datetime | None  # None: now
    dedupe_key: str | None
    dedupe_done: float | None
    dedupe_dead: float | None
    concurrency_key: str | None
    tags: str | None  # JSON text of a list of strings; None: no tags
    trace_context: str | None  # JSON text of the enqueue's trace context (tracing.carrier()); None: none
    fairness_key: str | None = None


def _last(results: list[Result]) -> Result:
    return results[-1]


@dataclass(frozen=True)
class Script:
    """A statement an engine runs as several steps in one write transaction (SQLite has no writable
    CTEs); ``combine`` makes the steps' results the one result the PostgreSQL statement gives."""

    steps: tuple[str, ...]
    combine: Callable[[list[Result]], Result] = field(default=_last)


@dataclass(frozen=True)
class Unsupported:
    """A statement of a feature this engine does not have: running it raises ConfigurationError."""

    feature: str
    what: str


Statement = str | Script | Unsupported


class Engine:
    """Runs the statements of one database vendor."""

    def __init__(self, vendor: str, statements: Any, capabilities: Capabilities, stats: Any) -> None:
        self.vendor = vendor
        self.statements = statements
        self.capabilities = capabilities
        self.stats = stats  # the dashboard's statements

    def run(self, wrapper: BaseDatabaseWrapper, statement: Statement, params: dict[str, Any]) -> Result:
        raise NotImplementedError

    # The fewest jobs of a batch without dedupe keys worth copy_unkeyed; None: the engine has no such
    # path (the caller runs ENQUEUE_MANY).
    bulk_min_rows: int | None = None

    def copy_unkeyed(
        self,
        wrapper: BaseDatabaseWrapper,
        count: int,
        rows: Iterator[NewRow],
        queues: set[str],
        params: dict[str, Any],
    ) -> list[int]:
        """Write ``count`` jobs without dedupe keys as ``rows`` yields them (checking each: one that
        raises writes nothing at all); their ids in order. ``queues`` holds their queues once ``rows``
        is exhausted."""
        raise NotImplementedError

    def set_timeouts(self, wrapper: BaseDatabaseWrapper, statement_s: float, lock_s: float) -> None:
        """Bound every later statement on this thread's queue connection (worker and reaper only)."""
        raise NotImplementedError

    def replan_if_grown(self, wrapper: BaseDatabaseWrapper) -> bool:
        """Have this thread's queue connection plan its statements again if the job table grew much
        since they were planned; whether it did. Nothing on an engine without prepared plans."""
        return False

    def setup_problems(self, alias: str) -> tuple[list[str], list[str]]:
        """(errors, warnings) about this engine's requirements for the database ``alias``."""
        return [], []

    def wake_local(self, alias: str, queues: Sequence[str]) -> None:
        """Wake this process's workers for ``queues`` when the caller's transaction commits, where the
        database sends no notification of its own. Nothing on an engine with LISTEN/NOTIFY."""

    def text_time(self, value: Any) -> dt.datetime | None:
        """A time column as the driver returns it, as an aware datetime."""
        return value  # type: ignore[no-any-return]
