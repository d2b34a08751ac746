"""The queue's models. Models are the only source of schema; SQL lives in django_jobq.sql."""

from ..status import JobStatus as JobStatus  # django_jobq.models.JobStatus, as documented
from .bulk import BulkAction
from .jobs import ContainmentIndex, DeadJob, Job
from .outbox import MovedJob, OutboxEntry
from .schedules import Schedule, ScheduleSource, ScheduleTick
from .workers import CapSeat, InboundMark, MaintenanceLease, QueueState, RateBucket, RateWindow, WorkerRecord
from .workflows import Dependency, Workflow

__all__ = [
    "BulkAction",
    "CapSeat",
    "ContainmentIndex",
    "DeadJob",
    "Dependency",
    "InboundMark",
    "Job",
    "JobStatus",
    "MaintenanceLease",
    "MovedJob",
    "OutboxEntry",
    "QueueState",
    "RateBucket",
    "RateWindow",
    "Schedule",
    "ScheduleSource",
    "ScheduleTick",
    "WorkerRecord",
    "Workflow",
]  # fmt: skip
