"""The job list at volume: filter choices that never read the job table, sorts only where an index
serves them, a count that stops at a time budget, and pagination that never offsets deep.

Each list page reads the page of jobs through an index (the primary key newest first, or a status's
partial index) and counts what it lists at most once, within COUNT_BUDGET_MS; past that the total
shown is the planner's estimate. Pages beyond MAX_PAGES are not offered: an OFFSET reads and drops
every row before it, so the last page of a large table would read the table.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db import OperationalError, connections, transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

from .. import dashboard
from ..conf import jobq_settings
from ..console.search import NARROW_STATUSES as NARROW_STATUSES  # the job list's search
from ..registry import registered_tasks
from ..status import CANCELLED, DEAD, DONE, FINISHED, PENDING, RUNNING, WAITING
from .common import console_alias, per_request

if TYPE_CHECKING:  # Paginator is generic for the type checker only
    _Paginator = Paginator[Any]
else:
    _Paginator = Paginator

# Counts stop here: above this many matching jobs (or past the time budget) the total is an estimate.
ESTIMATE_COUNT_ABOVE = 10_000
COUNT_BUDGET_MS = 50
# The deepest page offered: 200 pages of 50 jobs, an OFFSET of at most 9,950 rows.
MAX_PAGES = 200

STATUS_PARAM = "status__exact"
# The sortable columns of the job list for each status filter, beyond the id (the primary key). "run
# at" within a status whose jobs are few and bounded by their retention (its partial index gives
# them, then a sort of those rows only); "finished" for the finished statuses (jobq_job_finished, in
# its order). Without a status, or for PENDING (the backlog can be millions) and WAITING, by id only.
SORTS: dict[int | None, tuple[str, ...]] = {
    None: (),
    PENDING: (),
    WAITING: (),
    RUNNING: ("run_at_display",),
    DONE: ("finished_cell",),
    DEAD: ("run_at_display", "finished_cell"),
    CANCELLED: ("run_at_display", "finished_cell"),
}


def status_filter(request: HttpRequest) -> int | None:
    """The list's status filter (``?status__exact=3``), None when absent or not a status."""
    value = request.GET.get(STATUS_PARAM, "")
    return int(value) if value.isdigit() and int(value) in SORTS else None


def finished_filter(request: HttpRequest) -> bool:
    """Whether the list is filtered to one of the finished statuses (DONE, DEAD, CANCELLED)."""
    return status_filter(request) in FINISHED


# -- filter choices --------------------------------------------------------------------------------------
def configured_queues() -> set[str]:
    """The queues the configuration names: JOBQ["QUEUES"], the Tasks backends' QUEUES, the registered
    tasks' queues."""
    queues = set(jobq_settings().queues)
    for backend in getattr(settings, "TASKS", {}).values():
        if str(backend.get("BACKEND", "")).startswith("django_jobq."):
            queues.update(q for q in backend.get("QUEUES") or () if isinstance(q, str))
    queues.update(task.queue for task in registered_tasks().values())
    return queues


def filter_names(using: str | None = None) -> tuple[list[str], list[str]]:
    """(queues, tasks) offered by the job list's filters: what the configuration and the task registry
    name, and the names of the dead letters (one DISTINCT over the small partial index jobq_job_dead,
    on ``using``). Never a read of the backlog or the history: any other name works in the address
    (``?queue=x``)."""
    dead_queues, dead_tasks = dashboard.dead_letter_names(using=using)
    queues = configured_queues() | set(dead_queues)
    tasks = set(registered_tasks()) | set(dead_tasks)
    return sorted(queues), sorted(tasks)


class _NameFilter(admin.SimpleListFilter):
    """Filter on a text column; the choices come from filter_names (configuration, registry, dead letters)."""

    which = 0

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = per_request(request, "filter_names", lambda: filter_names(console_alias(request)))[self.which]
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if "\x00" in value:  # no job has such a name (and PostgreSQL refuses the byte in a query)
            return queryset.none()
        return queryset.filter(**{str(self.parameter_name): value})


class QueueFilter(_NameFilter):
    title = "queue"
    parameter_name = "queue"
    which = 0


class TaskFilter(_NameFilter):
    title = "task"
    parameter_name = "task"
    which = 1


# -- sorting and counting --------------------------------------------------------------------------------
class BoundedChangeList(ChangeList):
    """A change list that sorts only on the columns its admin's get_sortable_by allows for the request:
    ``?o=4`` on another column (a status sort reading the whole table) is ignored, as is any order
    Django would add a tiebreak to that no index serves."""

    def get_ordering_field(self, field_name: Any) -> Any:
        if field_name not in (self.sortable_by or ()):
            return None
        return super().get_ordering_field(field_name)


def bounded_count(queryset: QuerySet[Any]) -> int:
    """How many rows ``queryset`` has, counted up to ESTIMATE_COUNT_ABOVE + 1 within COUNT_BUDGET_MS
    (PostgreSQL); past either, the planner's estimate (never below what was counted)."""
    return counted(queryset)[0]


def counted(queryset: QuerySet[Any]) -> tuple[int, bool]:
    """bounded_count's figure, and whether it is exact (counted) rather than the planner's estimate."""
    limited = queryset.order_by()[: ESTIMATE_COUNT_ABOVE + 1]
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        total = limited.count()  # SQLite keeps no estimate: past the bound, the whole count
        return (total if total <= ESTIMATE_COUNT_ABOVE else _estimate(queryset, total)), True
    try:
        with transaction.atomic(using=queryset.db), connection.cursor() as cursor:
            # Local to this transaction (or savepoint), and put back before it ends: an enclosing
            # transaction keeps its own timeout; a cancelled count's rollback undoes it too.
            cursor.execute(
                "SELECT current_setting('statement_timeout'), set_config('statement_timeout', %s, true)",
                [f"{COUNT_BUDGET_MS}ms"],
            )
            (before, _) = cursor.fetchone() or ("0", None)
            total = limited.count()
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])
    except OperationalError:  # over budget (query_canceled)
        return _estimate(queryset, 0), False
    return (total, True) if total <= ESTIMATE_COUNT_ABOVE else (_estimate(queryset, total), False)


def _estimate(queryset: QuerySet[Any], counted: int) -> int:
    if connections[queryset.db].vendor != "postgresql":
        return max(counted, queryset.count())
    plan = json.loads(queryset.explain(format="json"))
    return max(counted, int(plan[0]["Plan"]["Plan Rows"]))


class BoundedPaginator(_Paginator):
    """bounded_count's total, and at most MAX_PAGES pages: a deeper page is refused (the list shows its
    first page again), the last page link is MAX_PAGES. ``estimated``: the total is not an exact count
    (the list's "select all" then offers no number: an action counts its selection exactly)."""

    estimated = False

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return super().count
        total, exact = counted(queryset)
        self.estimated = not exact
        return total

    @cached_property
    def num_pages(self) -> int:
        return min(super().num_pages, MAX_PAGES)
