"""The bench task bodies as oban workers (imported only where oban is installed: a worker process
resolves each job's worker by this module's import path)."""

from __future__ import annotations

from typing import Any

from oban import worker

from bench import work


@worker(queue="default")
class Noop:
    async def process(self, job: Any) -> None:
        work.noop()


@worker(queue="default")
class Sleep:
    async def process(self, job: Any) -> None:
        await work.asleep()


@worker(queue="default")
class Latency:
    async def process(self, job: Any) -> None:
        work.record_start(int(job.args["key"]))


BY_KIND = {"noop": Noop, "sleep": Sleep, "latency": Latency}
