"""Fair queues (JOBQ["QUEUES"][q]["FAIR"]): their options, and the weights a claim serves keys by.

A fair queue's claim serves the keys with due jobs in weighted round-robin (sql/postgres/pick.py,
_fair): each key's virtual time grows by 1 / weight per job started, and the claim takes from the keys
with the lowest. A key of weight 2 starts twice as many jobs as one of weight 1 while both have work.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

from .exceptions import ConfigurationError

FAIR_OPTIONS = ("WEIGHTS", "DEFAULT_WEIGHT", "WEIGHTS_FROM")
MIN_WEIGHT, MAX_WEIGHT = 0.001, 1000.0
MAX_WEIGHTED_KEYS = 10_000  # keys with a weight of their own, per queue (sent with each claim)
WEIGHTS_FROM_SECONDS = 30.0  # a WEIGHTS_FROM callable is asked again at most this often per process
# The key of the jobs enqueued into a fair queue without one: they share one turn of the round. Blank,
# so no job's own key (validation.fairness_key refuses blank ones) is ever it.
UNKEYED = ""
TOP_KEYS = 10  # the busiest keys per fair queue shown (dashboard, jobq_stats) and exported (metrics)
SCAN_LIMIT = 100_000  # due jobs read per fair queue for those figures; beyond, the counts are lower bounds


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FairOptions:
    """One queue's FAIR option: True, or a dict of WEIGHTS (key -> weight), DEFAULT_WEIGHT (1) and
    WEIGHTS_FROM (the dotted path of a callable taking the queue's name and answering a mapping of
    key -> weight, merged over WEIGHTS)."""

    weights: Mapping[str, float] = dataclasses.field(default_factory=dict)
    default_weight: float = 1.0
    weights_from: str | None = None

    @classmethod
    def parse(cls, raw: Any, where: str) -> FairOptions | None:
        if raw is None or raw is False:
            return None
        if raw is True:
            return cls()
        if not isinstance(raw, dict):
            raise ConfigurationError(f"{where} must be True or a dict of {', '.join(FAIR_OPTIONS)}")
        unknown = sorted(str(key) for key in raw if key not in FAIR_OPTIONS)
        if unknown:
            raise ConfigurationError(f"{where}: unknown option(s) {', '.join(unknown)}")
        source = raw.get("WEIGHTS_FROM")
        if source is not None and (not isinstance(source, str) or "." not in source or "\x00" in source):
            raise ConfigurationError(f'{where}["WEIGHTS_FROM"] must be a dotted path, not {source!r:.100}')
        return cls(
            weights=weights(raw.get("WEIGHTS", {}), f'{where}["WEIGHTS"]'),
            default_weight=weight(raw.get("DEFAULT_WEIGHT", 1.0), f'{where}["DEFAULT_WEIGHT"]'),
            weights_from=source,
        )


def key_for(queue: str, key: str | None, fair: Mapping[str, FairOptions]) -> str | None:
    """The fairness key a job of ``queue`` is stored with: its own; UNKEYED in a fair queue; else none."""
    return UNKEYED if key is None and queue in fair else key


def weight(value: Any, where: str) -> float:
    """A weight: a finite number in [MIN_WEIGHT, MAX_WEIGHT]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{where} must be a number, not {value!r:.100}")
    if not MIN_WEIGHT <= value <= MAX_WEIGHT:
        raise ConfigurationError(f"{where} must be in [{MIN_WEIGHT}, {MAX_WEIGHT:g}], not {value!r:.100}")
    return float(value)


def weights(value: Any, where: str) -> dict[str, float]:
    """A mapping of fairness key -> weight, each key valid as a job's fairness key."""
    from .exceptions import InvalidJob
    from .validation import fairness_key

    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where} must be a dict of fairness key -> weight")
    if len(value) > MAX_WEIGHTED_KEYS:
        raise ConfigurationError(f"{where}: at most {MAX_WEIGHTED_KEYS} keys, not {len(value)}")
    checked = {}
    for key, number in value.items():
        try:
            checked[str(fairness_key(key))] = weight(number, f"{where}[{key!r:.100}]")
        except InvalidJob as exc:
            raise ConfigurationError(f"{where}: {exc}") from None
    return checked


class Weights:
    """A fair queue's weights for its claims, with WEIGHTS_FROM asked at most every
    WEIGHTS_FROM_SECONDS (a failing callable keeps the last answer, logged, and is asked again later)."""

    def __init__(self, queue: str, options: FairOptions) -> None:
        self.queue, self.options = queue, options
        self._lock = threading.Lock()
        self._asked_at = -math.inf
        self._merged: tuple[list[str], list[float]] = _arrays(options.weights)

    def params(self) -> dict[str, Any]:
        """The claim statement's fair_keys, fair_weights and fair_weight."""
        if self.options.weights_from is not None:
            self._refresh()
        keys, values = self._merged
        return {"fair_keys": keys, "fair_weights": values, "fair_weight": self.options.default_weight}

    def _refresh(self) -> None:
        import logging

        from django.utils.module_loading import import_string

        with self._lock:
            if time.monotonic() - self._asked_at < WEIGHTS_FROM_SECONDS:
                return
            self._asked_at = time.monotonic()
            where = f'JOBQ["QUEUES"][{self.queue!r}]["FAIR"]["WEIGHTS_FROM"]'
            try:
                found = weights(import_string(str(self.options.weights_from))(self.queue), f"{where}()")
            except Exception:
                logging.getLogger("django_jobq.fairness").exception("%s failed; weights unchanged", where)
                return
            self._merged = _arrays({**self.options.weights, **found})


def _arrays(mapping: Mapping[str, float]) -> tuple[list[str], list[float]]:
    keys = sorted(mapping)
    return keys, [mapping[k] for k in keys]


_WEIGHTS: dict[str, Weights] = {}


def claim_params(queue: str, options: FairOptions) -> dict[str, Any]:
    """A fair queue's claim parameters (fair_keys, fair_weights, fair_weight): its weights, kept per
    process (a changed setting starts afresh)."""
    found = _WEIGHTS.get(queue)
    if found is None or found.options is not options:
        found = _WEIGHTS[queue] = Weights(queue, options)
    return found.params()
