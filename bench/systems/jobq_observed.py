"""django-jobq observed: the jobq column's worker with its metrics endpoint on (--metrics-port: every
run counted, the run and wait histograms, the lanes' gauges) and the tracing middleware in
JOBQ["MIDDLEWARE"] (with the OpenTelemetry API's own no-op provider: what the queue adds, not an SDK's
export). Measured on W2 only, held against the jobq column on the same row."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import ClassVar

from bench.systems.base import setup_django
from bench.systems.jobq import Jobq


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class JobqObserved(Jobq):
    name = "jobq_observed"
    label = "django-jobq, observed"
    worker_note = "jobq_worker --metrics-port, with JOBQ MIDDLEWARE django_jobq.tracing.middleware"
    measures: ClassVar[tuple[str, ...] | None] = ("W2 c4", "W2 c16")

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        from django.core.management import call_command

        setup_django(self.name, self.db_url)
        ready()
        call_command(
            "jobq_worker", "--queues", f"default:{slots}", "--metrics-port", str(_free_port()),
            "--metrics-addr", "127.0.0.1",
        )  # fmt: skip
