"""A worker for queues on several databases (django_jobq.shards): one Worker per database, each on
threads of its own and bound to its database, in one process and under one worker id.

Each database's Worker claims, renews, listens and recovers on its own: a database that goes away
stops only its Worker's lanes (logged once, retried, as for a single database) while the others drain.
A lane's concurrency is per database; ``max_jobs`` counts each database's jobs on its own, and the
first worker to reach it stops them all (the process is replaced: no database is left unserved).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..conf import on_database
from ..database_context import carrying_database
from ..exceptions import ConfigurationError
from . import startup
from .core import Worker


class WorkerGroup:
    """Workers for several databases that run, stop and end together (the interface of a Worker
    that jobq_worker, the supervisor's link and the metrics use)."""

    def __init__(
        self, lanes: dict[str, dict[str, int]], make: Callable[[dict[str, int], str | None], Worker]
    ) -> None:
        """``make(lanes, worker_id)``: a Worker, called on each database (inside on_database); the
        first is given None (its own id), the others the first's id."""
        self.workers: dict[str, Worker] = {}
        worker_id: str | None = None
        for alias, its_lanes in lanes.items():
            with on_database(alias):
                worker = self.workers[alias] = make(its_lanes, worker_id)
            worker_id = worker.worker_id
        if worker_id is None:
            raise ConfigurationError("a worker group needs lanes on at least one database")
        self.worker_id = worker_id
        self.started = threading.Event()
        self.finished = threading.Event()
        self.stopping = threading.Event()

    @property
    def processed(self) -> int:
        return sum(worker.processed for worker in self.workers.values())

    @property
    def exit_code(self) -> int:
        return max(worker.exit_code for worker in self.workers.values())

    @property
    def lanes(self) -> dict[str, Any]:
        """Every database's lanes, named ``lane@alias`` but on the first database."""
        found: dict[str, Any] = {}
        for index, (alias, worker) in enumerate(self.workers.items()):
            for name, lane in worker.lanes.items():
                found[name if index == 0 else f"{name}@{alias}"] = lane
        return found

    @property
    def supervision(self) -> dict[str, Any] | None:
        return next(iter(self.workers.values())).supervision

    @supervision.setter
    def supervision(self, state: dict[str, Any] | None) -> None:
        for worker in self.workers.values():
            worker.supervision = state

    def banner(self) -> str:
        """Each database's worker's banner (worker/startup.py), a line each."""
        lines = []
        for alias, worker in self.workers.items():
            with on_database(alias):
                lines.append(startup.banner(worker))
        return "\n".join(lines)

    def stop(self) -> None:
        """As Worker.stop, for every database's worker."""
        self.stopping.set()
        for worker in self.workers.values():
            worker.stop()

    def run(self) -> None:
        """Run every database's worker until each has stopped (stop(), burst, max_jobs); an error
        of one (its worker id taken there) stops the others and is raised."""
        errors: list[BaseException] = []

        def run_one(worker: Worker) -> None:
            try:
                worker.run()
            except BaseException as exc:
                errors.append(exc)
                self.stop()
                return
            if worker.max_jobs is not None and worker.processed >= worker.max_jobs:
                self.stop()  # the process is to be replaced: none of its databases is left unserved

        threads = []
        for alias, worker in self.workers.items():
            with on_database(alias):
                target = carrying_database(run_one)
            thread = threading.Thread(target=target, args=(worker,), name=f"jobq-worker-{alias}", daemon=True)
            thread.start()
            threads.append(thread)
        watcher = threading.Thread(target=self._watch_started, daemon=True, name="jobq-worker-group")
        watcher.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.5)
        finally:
            self.finished.set()
        if errors:
            raise errors[0]

    def _watch_started(self) -> None:
        for worker in self.workers.values():
            while not worker.started.wait(0.5):
                if self.finished.is_set():
                    return
        self.started.set()
