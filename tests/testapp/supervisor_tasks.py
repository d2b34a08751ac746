"""Tasks of the supervisor tests (tests/integration/test_supervisor.py), imported as the test app
starts, so every worker process knows them."""

import os
import time

import django_jobq
from django_jobq.supervisor.link import FD_ENV

from .models import Ledger

LEAK_MIB = 5
_kept: list[bytes] = []

if os.environ.get("JOBQ_TEST_SUPERVISED_FAILS") and FD_ENV in os.environ:
    # A worker process a supervisor starts fails as it starts, as one with a broken deploy would.
    raise RuntimeError("supervisor tests: this worker process refuses to start")


@django_jobq.task(name="test.leak", takes_context=True, max_attempts=100)
def leak(context, pause: float = 0.0):
    """Write the ledger row of this run, keep LEAK_MIB more MiB of resident memory for good, then
    work ``pause`` seconds."""
    Ledger.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id
    )
    _kept.append(b"\x01" * (LEAK_MIB << 20))  # written, so resident
    time.sleep(pause)
