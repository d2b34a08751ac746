"""Rate-limited queues (JOBQ["QUEUES"][q]["RATE_LIMIT"]): a lane takes the permits before it claims,
and claims no more of such a queue than the permits it took. So a worker never holds a job of a
rate-limited queue it may not start: no claim is spent on a job only to put it back, and no claim is
made of it while its bucket is empty (the lane waits until the bucket says its next permit comes).

Each claimed job carries its permit to its slot, which starts it without taking another (a retry in the
slot takes its own). A permit no job was found for goes back to the bucket at once, and so does the
permit of a job given back unstarted (a stopping worker, claimed-ahead jobs behind a long run). A
worker that dies holding claimed jobs spends their permits (its jobs come back with their leases and
take new ones); the bucket refills at its rate. Permits are taken by TokenBucket.take, one statement
under the key's row lock: across every worker, never more than the bucket holds."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..conf import jobq_settings
from ..exceptions import RateLimitUnavailable
from ..ratelimit import TokenBucket
from .base import WorkerBase
from .lanes import Lane

if TYPE_CHECKING:
    from ..models import Job

logger = logging.getLogger("django_jobq")


def queue_bucket(queue: str, rate: tuple[int, float]) -> TokenBucket:
    """The bucket of a queue's RATE_LIMIT (burst: its count), shared by every worker (the key and
    size runner.permit_wait uses for a retry in the slot)."""
    count, seconds = rate
    return TokenBucket(f"jobq:queue:{queue}", count, seconds, count)


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

    def _rations(self, lane: Lane, free: int) -> dict[str, int]:
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
        return rations

    @staticmethod
    def _asked(lane: Lane, free: int, rations: dict[str, int]) -> int:
        """The jobs this cycle's claim asks for: a named lane of a rate-limited queue, its permits."""
        return free if lane.claims is None else min(free, rations.get(lane.claims, free))

    def _settle_rations(self, lane: Lane, rations: dict[str, int], jobs: Iterable[Job]) -> None:
        """Give back the permits the claim found no job for: such a queue had no more due jobs, and
        is not asked for permits again before the poll interval or a wake-up (Lane.dry)."""
        claimed = Counter(job.queue for job in jobs)
        for queue, taken in rations.items():
            if taken > claimed[queue]:
                self._give_back_permits(queue, taken - claimed[queue])
                lane.permit_at.pop(queue, None)
                lane.dry[queue] = time.monotonic() + self.poll_interval

    def _return_permits(self, queues: Iterable[str]) -> None:
        """Give back the permits of claimed jobs that go back unstarted (one queue name per job)."""
        for queue, n in Counter(queues).items():
            self._give_back_permits(queue, n)

    def _give_back_permits(self, queue: str, n: int) -> None:
        options = jobq_settings().queues.get(queue)
        if options is None or options.rate_limit is None:
            return
        try:
            queue_bucket(queue, options.rate_limit).give_back(n)
        except RateLimitUnavailable as exc:  # spent: the bucket refills at its rate
            logger.warning("could not give back %d permit(s) of queue %s (%s)", n, queue, exc)
