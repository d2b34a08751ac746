"""A Hypothesis state machine over every transition: the table never reaches an illegal state, always
agrees with a simple model of what each operation must do, and no run of a job ever gets a fencing
token an earlier run of it held (across claims, reaps, releases and requeues)."""

import datetime as dt

import pytest
import time_machine
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from django_jobq.models import Job, JobStatus

pytestmark = [pytest.mark.contract, pytest.mark.p0, pytest.mark.django_db]

WORKERS = st.sampled_from(["w1", "w2", "w3"])
LEASE = 10
FREE_RELEASES = 3  # JOBQ["FREE_RELEASES"]'s default


class QueueMachine(RuleBasedStateMachine):
    """model[id] = [status, owner, attempts, max_attempts, fence, releases]; tokens[id] = fences handed out"""

    @initialize()
    def start(self):
        Job.objects.all().delete()
        self.model: dict[int, list] = {}
        self.tokens: dict[int, set[int]] = {}
        self.traveller = time_machine.travel(dt.datetime(2026, 5, 1, tzinfo=dt.UTC), tick=False)
        self.clock = self.traveller.start()

    def teardown(self):
        if hasattr(self, "traveller"):
            self.traveller.stop()

    def _running(self):
        return [(i, m) for i, m in self.model.items() if m[0] == JobStatus.RUNNING]

    @rule(max_attempts=st.integers(1, 3))
    def enqueue(self, max_attempts):
        jid = Job.objects.enqueue("test.noop", max_attempts=max_attempts)
        self.model[jid] = [JobStatus.PENDING, None, 0, max_attempts, 0, 0]
        self.tokens[jid] = set()

    @rule(worker=WORKERS, limit=st.integers(1, 3))
    def claim(self, worker, limit):
        jobs = Job.objects.claim_batch(worker, limit, lease_seconds=LEASE)
        pending = [i for i, m in self.model.items() if m[0] == JobStatus.PENDING]
        assert len(jobs) == min(limit, len(pending))
        for job in jobs:
            m = self.model[job.id]
            assert m[0] == JobStatus.PENDING
            m[0], m[1], m[2], m[4] = JobStatus.RUNNING, worker, m[2] + 1, m[4] + 1
            assert job.attempts == m[2] and job.fence == m[4]
            assert job.fence not in self.tokens[job.id]  # a token never repeats
            self.tokens[job.id].add(job.fence)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), worker=WORKERS, stale=st.booleans())
    def complete(self, data, worker, stale):
        jid = data.draw(st.sampled_from(sorted(self.model)))
        m = self.model[jid]
        stale = stale and m[4] > 0
        fence = m[4] - 1 if stale else m[4]
        ok = Job.objects.complete(jid, worker, fence=fence)
        should = m[0] == JobStatus.RUNNING and m[1] == worker and not stale
        assert ok == should
        if ok:
            m[0] = JobStatus.DONE

    @precondition(lambda self: self.model)
    @rule(data=st.data(), worker=WORKERS, permanent=st.booleans())
    def fail(self, data, worker, permanent):
        jid = data.draw(st.sampled_from(sorted(self.model)))
        m = self.model[jid]
        result = Job.objects.fail(jid, worker, "boom", backoff_seconds=0, permanent=permanent, fence=m[4])
        if m[0] == JobStatus.RUNNING and m[1] == worker:
            expected = JobStatus.DEAD if permanent or m[2] >= m[3] else JobStatus.PENDING
            assert result == expected
            m[0], m[1] = expected, None
        else:
            assert result is None

    @precondition(lambda self: self.model)
    @rule(data=st.data(), worker=WORKERS)
    def renew(self, data, worker):
        jid = data.draw(st.sampled_from(sorted(self.model)))
        m = self.model[jid]
        ok = Job.objects.renew_lease(jid, worker, LEASE, fence=m[4])
        assert ok == (m[0] == JobStatus.RUNNING and m[1] == worker)

    @rule(seconds=st.sampled_from([1, 6, 11]))
    def advance_time(self, seconds):
        self.clock.shift(seconds)

    @rule()
    def reap(self):
        now = timezone.now()
        expired = set(
            Job.objects.filter(status=JobStatus.RUNNING, lease_until__lt=now).values_list("id", flat=True)
        )
        reaped = set(Job.objects.reap())
        assert reaped == expired
        for jid in reaped:
            m = self.model[jid]
            assert m[0] == JobStatus.RUNNING
            m[0], m[1] = (JobStatus.DEAD if m[2] >= m[3] else JobStatus.PENDING), None

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def requeue(self, data):
        jid = data.draw(st.sampled_from(sorted(self.model)))
        m = self.model[jid]
        assert Job.objects.requeue(jid) == (m[0] == JobStatus.DEAD)
        if m[0] == JobStatus.DEAD:
            m[0], m[2], m[5] = JobStatus.PENDING, 0, 0

    @rule(worker=WORKERS)
    def release(self, worker):
        held = {i for i, m in self._running() if m[1] == worker}
        assert set(Job.objects.release(worker)) == held
        for jid in held:
            m = self.model[jid]
            free = m[5] < FREE_RELEASES
            m[2] -= 1 if free else 0
            m[0] = JobStatus.DEAD if not free and m[2] >= m[3] else JobStatus.PENDING
            m[1], m[5] = None, m[5] + 1

    @invariant()
    def table_is_legal_and_matches_the_model(self):
        if not hasattr(self, "model"):
            return
        rows = {j.id: j for j in Job.objects.all()}
        assert set(rows) == set(self.model)
        for jid, job in rows.items():
            status, owner, attempts, _, fence, releases = self.model[jid]
            assert job.status == status and job.attempts == attempts
            assert (job.fence, job.releases) == (fence, releases)
            assert 0 <= job.attempts <= job.max_attempts
            if job.status == JobStatus.RUNNING:
                assert job.worker_id == owner and job.lease_until is not None
            else:
                assert job.lease_until is None
            if job.status == JobStatus.PENDING:
                assert job.worker_id is None and job.finished_at is None
            if job.status in (JobStatus.DONE, JobStatus.DEAD):
                assert job.finished_at is not None


def test_queue_state_machine(python_clock):
    machine = QueueMachine.TestCase
    machine.settings = settings(
        max_examples=40,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    machine().runTest()
