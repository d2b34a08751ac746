"""Batch tasks: ``@task(batch=Batch(size=100, wait=1.0, key="provider"))`` receives a list of jobs claimed
together and answers for each of them (docs/guide/batches.md)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .exceptions import ConfigurationError

if TYPE_CHECKING:
    from .context import JobContext

MAX_BATCH_SIZE = 10_000  # jobs in one call
MAX_BATCH_WAIT = 300.0  # seconds a batch may wait to fill once its first job is due
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


@dataclass(frozen=True, slots=True)
class Batch:
    """How a batch task's jobs are gathered: up to ``size`` jobs per call; once the first is due, at
    most ``wait`` seconds more for the batch to fill; with ``key`` (the name of a payload field), only
    jobs whose payloads hold the same value there share a call (a missing field counts as null)."""

    size: int = 100
    wait: float = 1.0
    key: str | None = None

    def __post_init__(self) -> None:
        if (
            not isinstance(self.size, int)
            or isinstance(self.size, bool)
            or not 1 <= self.size <= MAX_BATCH_SIZE
        ):
            raise ConfigurationError(
                f"Batch size must be an integer in [1, {MAX_BATCH_SIZE}], not {self.size!r:.100}"
            )
        wait = self.wait
        if (
            not isinstance(wait, (int, float)) or isinstance(wait, bool)
            or not math.isfinite(wait) or not 0 <= wait <= MAX_BATCH_WAIT
        ):  # fmt: skip
            raise ConfigurationError(
                f"Batch wait must be seconds in [0, {MAX_BATCH_WAIT:g}], not {wait!r:.100}"
            )
        if self.key is not None and (not isinstance(self.key, str) or not _FIELD.fullmatch(self.key)):
            raise ConfigurationError(
                f"Batch key must be the name of a payload field (letters, digits, _; at most 63), "
                f"not {self.key!r:.100}"
            )

    def key_of(self, payload: Any) -> Any:
        """The batch key's value in ``payload`` (None: no key, or the field is missing or null)."""
        if self.key is None or not isinstance(payload, Mapping):
            return None
        return payload.get(self.key)


@dataclass(frozen=True, slots=True)
class BatchJob:
    """One job of a batch, as the batch task receives it. Return ``{job.id: result}`` for the jobs
    that succeeded and ``{job.id: exception}`` for those that failed (retried, snoozed, discarded or
    sent to the dead letters each on its own); None: every job succeeded with result None."""

    id: int
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    context: JobContext  # progress, lease, and the cancel of this one job

    @property
    def cancelled(self) -> bool:
        """A cancel was asked of this job while the batch ran: its result is discarded, whatever it is."""
        return self.context.cancelled.is_set()
