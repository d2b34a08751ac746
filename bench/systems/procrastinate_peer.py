"""procrastinate: task.defer / batch_defer through its sync connector; its async worker runs the
sync task bodies in threads, woken by LISTEN/NOTIFY."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import common, work
from bench.systems.base import System


def make_app(db_url: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=common.conninfo(db_url)))
    app.task(name="bench.noop")(work.noop)
    app.task(name="bench.sleep")(work.sleep)
    app.task(name="bench.latency")(work.record_start)
    return app


class Procrastinate(System):
    name = "procrastinate"
    label = "procrastinate"
    distribution = "procrastinate"
    modules = ("procrastinate",)
    bulk_api = "Task.batch_defer"
    remaining_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
    worker_note = "async worker, sync tasks in threads; LISTEN/NOTIFY"

    app: Any = None

    def open(self) -> None:
        self.app = make_app(self.db_url)
        self.app.open()

    def close(self) -> None:
        if self.app is not None:
            self.app.close()

    def install(self) -> None:
        self.open()
        self.app.schema_manager.apply_schema()

    def _task(self, kind: str) -> Any:
        return self.app.tasks[f"bench.{kind}"]

    def enqueue(self, kind: str = "noop", key: int = 0) -> None:
        if kind == "latency":
            self._task(kind).defer(key=key)
        else:
            self._task(kind).defer()

    def enqueue_bulk(self, n: int, kind: str = "noop") -> None:
        self._task(kind).batch_defer(*({} for _ in range(n)))

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        app = make_app(self.db_url)
        ready()
        app.run_worker(concurrency=slots, wait=True, delete_jobs="never", install_signal_handlers=True)
