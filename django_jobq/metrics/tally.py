"""Counters and histograms by queue and task, kept without a lock on the job path: each thread adds to
plain dicts of its own, and the collector sums every thread's at scrape time.

A job's run updates four of them (started, the wait, succeeded, the run time); prometheus-client's
labelled metrics take a lock and check their labels on each update, which costs the worker's threads
little CPU but, under the GIL, delays the lane's dispatcher thread behind them."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

Key = tuple[str, str, str, str]  # (metric name, database, queue, task)


class _ThreadTally:
    """One thread's figures; only that thread writes them."""

    __slots__ = ("counts", "histograms")

    def __init__(self) -> None:
        self.counts: dict[Key, float] = {}
        # per key: one count per bucket (the last one +Inf), then the sum of the values
        self.histograms: dict[Key, list[float]] = {}


class Tally(Collector):
    """Named counters and histograms labelled (queue, task); ``count()`` and ``observe()`` from any
    thread, ``collect()`` (a registry's scrape) from any other."""

    def __init__(
        self,
        counters: dict[str, str],
        histograms: dict[str, str],
        buckets: Sequence[float],
        labels: tuple[str, str] = ("queue", "task"),
    ) -> None:
        self.counters, self.histograms_help = counters, histograms
        self.buckets = tuple(buckets)
        self.labels = labels
        self._local = threading.local()
        self._tallies: list[_ThreadTally] = []  # every thread's, kept after the thread ends
        self._lock = threading.Lock()  # taken once per thread, to add its tally

    def _mine(self) -> _ThreadTally:
        try:
            tally: _ThreadTally = self._local.tally
        except AttributeError:
            tally = self._local.tally = _ThreadTally()
            with self._lock:
                self._tallies.append(tally)
        return tally

    def count(self, name: str, queue: str, task: str, amount: float = 1, database: str = "") -> None:
        counts = self._mine().counts
        key = (name, database, queue, task)
        counts[key] = counts.get(key, 0) + amount

    def observe(self, name: str, queue: str, task: str, value: float, database: str = "") -> None:
        histograms = self._mine().histograms
        key = (name, database, queue, task)
        row = histograms.get(key)
        if row is None:
            row = histograms[key] = [0.0] * (len(self.buckets) + 2)
        row[bisect_left(self.buckets, value)] += 1  # the first bucket whose bound is >= value
        row[-1] += value

    def describe(self) -> list[Any]:
        return []

    def _summed(self) -> tuple[dict[Key, float], dict[Key, list[float]]]:
        counts: dict[Key, float] = {}
        histograms: dict[Key, list[float]] = {}
        with self._lock:
            tallies = list(self._tallies)
        for tally in tallies:
            for key, value in list(tally.counts.items()):  # a copy taken at once, under the GIL
                counts[key] = counts.get(key, 0) + value
            for key, row in list(tally.histograms.items()):
                total = histograms.setdefault(key, [0.0] * len(row))
                for i, value in enumerate(list(row)):
                    total[i] += value
        return counts, histograms

    def collect(self) -> Iterator[Any]:
        """Every counter has every (queue, task) pair any of them counted, 0 included: a rate or an
        increase sees a pair's first event only when the pair was there at 0 before it. A figure
        counted with a database (JOBQ["SHARDS"]: metrics/worker.py) has a ``database`` label first."""
        counts, histograms = self._summed()
        keys = sorted({key[1:] for key in counts})
        for name, documentation in self.counters.items():
            plain, labelled = (
                CounterMetricFamily(name, documentation, labels=ls) for ls in self._label_sets()
            )
            for database, queue, task in keys:
                value = counts.get((name, database, queue, task), 0)
                if database:
                    labelled.add_metric([database, queue, task], value)
                else:
                    plain.add_metric([queue, task], value)
            plain.samples += labelled.samples
            yield plain
        bounds = [floatToGoString(b) for b in self.buckets] + ["+Inf"]  # type: ignore[no-untyped-call]
        for name, documentation in self.histograms_help.items():
            bare, sharded = (
                HistogramMetricFamily(name, documentation, labels=ls) for ls in self._label_sets()
            )
            for (metric, database, queue, task), row in sorted(histograms.items()):
                if metric != name:
                    continue
                cumulative, running = [], 0.0
                for bound, value in zip(bounds, row[:-1], strict=True):
                    running += value
                    cumulative.append((bound, running))
                if database:
                    sharded.add_metric([database, queue, task], cumulative, sum_value=row[-1])
                else:
                    bare.add_metric([queue, task], cumulative, sum_value=row[-1])
            bare.samples += sharded.samples
            yield bare

    def _label_sets(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self.labels, ("database", *self.labels)
