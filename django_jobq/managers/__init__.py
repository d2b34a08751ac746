"""JobManager: each public operation runs one named statement from django_jobq.sql.

Split by concern: producing (enqueue), graphs (enqueue with dependencies), consuming (claim and the fenced writes of a worker), waiting
(wait_for), maintenance (reap, requeue, prune, counts), control (cancel), queue state (pause, resume) and the
scheduler's statements (schedules); the async twins are derived here with sync_to_async.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from ..status import CancelCounts, CancelOutcome, JobStatus
from .batching import BatchClaimManager
from .consuming import ConsumerManager, result_json
from .control import ControlManager
from .graphs import GraphManager
from .maintenance import MaintenanceManager
from .moving import MoveManager
from .producing import NewJob
from .queues import QueueStateManager
from .schedules import ScheduleStatementsManager
from .seats import SeatManager
from .waiting import WaitingManager

if TYPE_CHECKING:
    from ..models import Job

__all__ = ["JobManager", "NewJob", "result_json"]


class JobManager(
    GraphManager,
    ConsumerManager,
    BatchClaimManager,
    WaitingManager,
    MaintenanceManager,
    ControlManager,
    QueueStateManager,
    ScheduleStatementsManager,
    SeatManager,
    MoveManager,
):
    async def aenqueue(self, *args: Any, **kwargs: Any) -> int | None:
        return await sync_to_async(self.enqueue)(*args, **kwargs)

    async def aenqueue_or_get(self, *args: Any, **kwargs: Any) -> tuple[int, bool]:
        return await sync_to_async(self.enqueue_or_get)(*args, **kwargs)

    async def await_for(self, *args: Any, **kwargs: Any) -> Job:
        # Off the event loop's sync thread: a long wait must not hold up the app's other sync calls.
        return await sync_to_async(self.wait_for, thread_sensitive=False)(*args, **kwargs)

    async def aclaim(self, *args: Any, **kwargs: Any) -> Job | None:
        return await sync_to_async(self.claim)(*args, **kwargs)

    async def aclaim_batch(self, *args: Any, **kwargs: Any) -> list[Job]:
        return await sync_to_async(self.claim_batch)(*args, **kwargs)

    async def acomplete(self, *args: Any, **kwargs: Any) -> bool:
        return await sync_to_async(self.complete)(*args, **kwargs)

    async def afail(self, *args: Any, **kwargs: Any) -> JobStatus | None:
        return await sync_to_async(self.fail)(*args, **kwargs)

    async def arenew_lease(self, *args: Any, **kwargs: Any) -> bool:
        return await sync_to_async(self.renew_lease)(*args, **kwargs)

    async def areap(self) -> list[int]:
        return await sync_to_async(self.reap)()

    async def arequeue(self, *args: Any, **kwargs: Any) -> bool:
        return await sync_to_async(self.requeue)(*args, **kwargs)

    async def acancel(self, *args: Any, **kwargs: Any) -> CancelOutcome:
        return await sync_to_async(self.cancel)(*args, **kwargs)

    async def acancel_many(self, *args: Any, **kwargs: Any) -> CancelCounts:
        return await sync_to_async(self.cancel_many)(*args, **kwargs)

    async def areschedule(self, *args: Any, **kwargs: Any) -> bool:
        return await sync_to_async(self.reschedule)(*args, **kwargs)

    async def acounts(self, queue: str | None = None) -> dict[str, int]:
        return await sync_to_async(self.counts)(queue)

    async def apause_queue(self, *args: Any, **kwargs: Any) -> bool:
        return await sync_to_async(self.pause_queue)(*args, **kwargs)

    async def aresume_queue(self, *args: Any, **kwargs: Any) -> bool:
        return await sync_to_async(self.resume_queue)(*args, **kwargs)

    async def apaused_queues(self) -> list[str]:
        return await sync_to_async(self.paused_queues)()
