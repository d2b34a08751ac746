"""Rate limits (JOBQ["QUEUES"][q]["RATE_LIMIT"], @task(rate_limit=...)): a lane takes the permits
before it claims, and claims no more of a rate-limited queue, or task, than the permits it took. So a
worker never holds a job it may not start: no claim is spent on a job only to put it back, and no claim
is made of it while its bucket is empty (the lane waits until the bucket says its next permit comes).

A queue's permits bound how many jobs the lane's claim takes from that queue. A task's bound how many
of its jobs the claim takes, wherever they are queued (the pick keeps to them as it keeps to task caps,
sql/postgres/pick.py); a lane does this for each rate-limited task whose jobs it has claimed, from the
claim after the first one that brought such a job, until a claim finds fewer of its jobs than permits
with room to spare: then the task has no more due jobs, and its next job found is taken the first way
again. The jobs of that first claim get their permits from the lane too, in one take per task before
they are handed out (a job left without one is refused by its slot): were each slot to ask as it
starts, the lane's next claim could take a permit meanwhile, find nothing to use it for and give it
back, while a slot's job, refused, waited a whole permit interval with the permit in the bucket.

Each claimed job carries its permits to its slot, which starts it without taking others (a retry in
the slot takes its own). A permit no job was found for goes back to the bucket at once, and so does the
permit of a job given back unstarted (a stopping worker, claimed-ahead jobs behind a long run). A
worker that dies holding claimed jobs spends their permits (its jobs come back with their leases and
take new ones); the bucket refills at its rate. Permits are taken by TokenBucket.take, one statement
under the key's row lock: across every worker, never more than the bucket holds."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from typing import TYPE_CHECKING

from ..conf import jobq_settings
from ..exceptions import RateLimitUnavailable
from ..ratelimit import TokenBucket
from ..registry import resolve_task
from .base import WorkerBase
from .lanes import Lane, Running

if TYPE_CHECKING:
    from ..models import Job

logger = logging.getLogger("django_jobq")


def queue_bucket(queue: str, rate: tuple[int, float]) -> TokenBucket:
    """The bucket of a queue's RATE_LIMIT (burst: its count), shared by every worker (the key and
    size runner.permit_wait uses for a retry in the slot)."""
    count, seconds = rate
    return TokenBucket(f"jobq:queue:{queue}", count, seconds, count)


def task_bucket(task: str, rate: tuple[int, float]) -> TokenBucket:
    """The bucket of a task's rate_limit (burst: its count), shared by every worker (the key and size
    runner.permit_wait uses for a start without a permit in hand)."""
    count, seconds = rate
    return TokenBucket(f"jobq:task:{task}", count, seconds, count)


def _task_rate(name: str) -> tuple[int, float] | None:
    task = resolve_task(name)
    return None if task is None else task.rate_limit


class RationMixin(WorkerBase):
    def _limited(self, lane: Lane) -> dict[str, tuple[int, float]]:
        """The rate-limited queues ``lane`` claims from, with their rates (held queues left out)."""
        queues = jobq_settings().queues
        if lane.claims is not None:
            options = queues.get(lane.claims)
            rate = options.rate_limit if options is not None else None
            return {} if rate is None else {lane.claims: rate}
        skip = {*lane.exclude, *lane.held}
        return {name: o.rate_limit for name, o in queues.items() if o.rate_limit and name not in skip}

    def _rations(self, lane: Lane, free: int, seat_room: Mapping[str, int] | None = None) -> dict[str, int]:
        """Take the permits of this cycle's claim: per rate-limited queue the lane claims from, the
        permits taken (at most ``free`` in all). A queue whose bucket is empty, or which had no due
        job at the lane's last look, is not asked until then (0: left out of the claim). Without the
        database the limit fails closed: nothing of the queue is claimed for a poll interval."""
        limited = self._limited(lane) if free else {}
        rations: dict[str, int] = {}
        now = time.monotonic()
        for queue, rate in sorted(limited.items()):
            left = free - sum(rations.values())
            if left <= 0 or now < max(lane.permit_at.get(queue, 0.0), lane.dry.get(queue, 0.0)):
                rations[queue] = 0
                continue
            lane.permit_at.pop(queue, None)
            lane.dry.pop(queue, None)
            try:
                taken, wait = queue_bucket(queue, rate).take(left)
            except RateLimitUnavailable as exc:
                logger.warning("rate limit of queue %s unavailable (%s): its jobs wait", queue, exc)
                taken, wait = 0, self.poll_interval
            if wait > 0:
                lane.permit_at[queue] = now + wait
            rations[queue] = taken
        self._ration_tasks(lane, self._asked(lane, free, rations), now, seat_room or {})
        return rations

    def _ration_tasks(self, lane: Lane, most: int, now: float, seat_room: Mapping[str, int]) -> None:
        """Take the permits of this cycle's claim for the rate-limited tasks the lane rations, at most
        ``most`` each, and for a capped task no more than its ``seat_room`` (its jobs the lane's seats
        leave room for: worker/seats.py), into lane.task_rations (0: none; the claim leaves the task's
        jobs out)."""
        for task in sorted(lane.task_rations):
            rate = _task_rate(task)
            want = min(most, seat_room.get(task, most))
            if want <= 0 or rate is None or now < lane.task_permit_at.get(task, 0.0):
                lane.task_rations[task] = 0
                continue
            lane.task_permit_at.pop(task, None)
            try:
                taken, wait = task_bucket(task, rate).take(want)
            except RateLimitUnavailable as exc:
                logger.warning("rate limit of task %s unavailable (%s): its jobs wait", task, exc)
                taken, wait = 0, self.poll_interval
            if wait > 0:
                lane.task_permit_at[task] = now + wait
            lane.task_rations[task] = taken

    @staticmethod
    def _asked(lane: Lane, free: int, rations: dict[str, int]) -> int:
        """The jobs this cycle's claim asks for: a named lane of a rate-limited queue, its permits."""
        return free if lane.claims is None else min(free, rations.get(lane.claims, free))

    def _settle_rations(self, lane: Lane, rations: dict[str, int], jobs: list[Job], asked: int) -> None:
        """Give back the permits the claim found no job for: such a queue had no more due jobs, and
        is not asked for permits again before the poll interval or a wake-up (Lane.dry). A task
        whose permits the claim did not use up although it had room (fewer jobs than ``asked``) had no
        more due jobs: the lane stops rationing it. A rate-limited task found in the claim without
        permits is rationed from the next claim on. Called once the claim's jobs are handed out (they
        carry the permits of the rations they were claimed with)."""
        claimed = Counter(job.queue for job in jobs)
        for queue, taken in rations.items():
            if taken > claimed[queue]:
                self._give_back_permits(queue, taken - claimed[queue])
                lane.permit_at.pop(queue, None)
                lane.dry[queue] = time.monotonic() + self.poll_interval
        of_task = Counter(job.task for job in jobs)
        for task, taken in list(lane.task_rations.items()):
            if taken > of_task[task]:
                self._give_back_task_permits(task, taken - of_task[task])
                if len(jobs) < asked:
                    del lane.task_rations[task]
                    lane.task_permit_at.pop(task, None)
        for task in of_task.keys() - lane.task_rations.keys():
            if _task_rate(task) is not None:
                lane.task_rations[task] = 0  # its jobs in this claim take their permits as they start

    def _return_permits(self, entries: Iterable[Running]) -> None:
        """Give back the permits of claimed jobs that go back unstarted."""
        entries = list(entries)
        for queue, n in Counter(e.job.queue for e in entries if e.permitted).items():
            self._give_back_permits(queue, n)
        for task, n in Counter(e.job.task for e in entries if e.task_permitted).items():
            self._give_back_task_permits(task, n)

    def _return_claim_permits(self, lane: Lane, jobs: list[Job], permitted: Container[str]) -> None:
        """Give back the permits of a claim none of whose jobs starts (``permitted``: the queues it
        claimed with permits)."""
        for queue, n in Counter(job.queue for job in jobs if job.queue in permitted).items():
            self._give_back_permits(queue, n)
        for task, n in Counter(job.task for job in jobs if lane.task_rations.get(job.task, 0) > 0).items():
            self._give_back_task_permits(task, n)

    def _take_unrationed_permits(self, lane: Lane, limited: list[Running]) -> None:
        """Take the permits of the claimed jobs of rate-limited tasks (``limited``: claimed without
        their task's permit) that the lane does not ration yet: per task, one take for as many as it
        has jobs here; the first of them in claim order carry the permits granted (fewer when the
        bucket holds fewer; none without the database: their slots ask, and fail closed)."""
        wanting: dict[str, list[Running]] = {}
        for entry in limited:
            if entry.job.task not in lane.task_rations:
                wanting.setdefault(entry.job.task, []).append(entry)
        for task, waiting in sorted(wanting.items()):
            rate = _task_rate(task)
            if rate is None:
                continue
            try:
                granted = task_bucket(task, rate).take(len(waiting))[0]
            except RateLimitUnavailable as exc:
                logger.warning(
                    "rate limit of task %s unavailable (%s): its jobs ask as they start", task, exc
                )
                continue
            for entry in waiting[:granted]:
                entry.task_permitted = True

    @staticmethod
    def _permits(lane: Lane, job: Job, permitted: Container[str]) -> tuple[bool, bool]:
        """Whether a job of this cycle's claim carries its queue's and its task's permit to its slot
        (``permitted``: the queues claimed with permits)."""
        return job.queue in permitted, lane.task_rations.get(job.task, 0) > 0

    def _give_back_task_permits(self, task: str, n: int) -> None:
        rate = _task_rate(task)
        if rate is None:
            return
        try:
            task_bucket(task, rate).give_back(n)
        except RateLimitUnavailable as exc:  # spent: the bucket refills at its rate
            logger.warning("could not give back %d permit(s) of task %s (%s)", n, task, exc)

    def _give_back_permits(self, queue: str, n: int) -> None:
        options = jobq_settings().queues.get(queue)
        if options is None or options.rate_limit is None:
            return
        try:
            queue_bucket(queue, options.rate_limit).give_back(n)
        except RateLimitUnavailable as exc:  # spent: the bucket refills at its rate
            logger.warning("could not give back %d permit(s) of queue %s (%s)", n, queue, exc)
