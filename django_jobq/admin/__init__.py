"""The admin: jobs (read-only), dead letters, workers, the queue dashboard and schedules.

Jobs are never edited through a form: a form save writes every column and would undo a concurrent
claim. State changes go through the manager's guarded statements (requeue: DEAD or CANCELLED -> PENDING; cancel) and a
guarded delete that never removes a RUNNING job; each is allowed by its own permission and recorded in
the admin log with what it actually changed.

One module per page: jobs (the list; job_page, a job's page), requeue, dead letters, dashboard, workers,
schedules, workflows (read-only, with "Cancel workflow"), bulk actions; actions.py confirms every list
action with the exact count of jobs it changes, and runs "select all matching" as a bulk action.
"""

from .bulk_actions import BulkActionAdmin
from .dead_letters import DeadJobAdmin
from .jobs import JobAdmin
from .schedules import ScheduleAdmin
from .workers import WorkerRecordAdmin
from .workflows import WorkflowAdmin

__all__ = [
    "BulkActionAdmin",
    "DeadJobAdmin",
    "JobAdmin",
    "ScheduleAdmin",
    "WorkerRecordAdmin",
    "WorkflowAdmin",
]
