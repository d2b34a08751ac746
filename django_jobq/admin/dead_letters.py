"""The dead letters: DEAD jobs, grouped by task and exception class; requeue and delete them.

The exception is the column ``exception``, written once by the statement that made the job DEAD, and
a key of the partial index jobq_job_dead with the queue and the task: the groups, the filters and the
list read that index and the dead rows only, never the job table's history."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString

from .. import dashboard
from ..models import DeadJob, Job
from ..status import JobStatus
from .common import console_alias, per_request, time_cell
from .jobs import JobAdmin
from .listing import QueueFilter, TaskFilter


def _groups(request: HttpRequest) -> list[dashboard.DeadGroup]:
    """The dead-letter groups, once per request, from the alias the request reads."""
    return per_request(
        request, "dead_groups", lambda: dashboard.dead_letter_groups(using=console_alias(request))
    )


class _DeadNameFilter(admin.SimpleListFilter):
    """A dead-letter filter: only the names that have dead letters (dashboard.dead_letter_names); the
    column and which name (queue or task) come from QueueFilter or TaskFilter."""

    which: int

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = per_request(
            request, "dead_names", lambda: dashboard.dead_letter_names(using=console_alias(request))
        )[self.which]
        return [(name, name) for name in names]


class DeadQueueFilter(_DeadNameFilter, QueueFilter):
    pass


class DeadTaskFilter(_DeadNameFilter, TaskFilter):
    pass


class ExceptionFilter(admin.SimpleListFilter):
    """Dead letters by what killed them (the column exception; "" for none recorded)."""

    title = "exception"
    parameter_name = "exception"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        groups = _groups(request)
        names = sorted({group.exception for group in groups})
        return [(name, name or "(none recorded)") for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        return queryset.filter(exception__isnull=True) if value == "" else queryset.filter(exception=value)


@admin.register(DeadJob)
class DeadJobAdmin(JobAdmin):
    """DEAD jobs, grouped by task and exception class; requeue and delete them."""

    list_display = ("id", "task", "queue_cell", "error_line", "attempts_display", "died")
    list_filter = (DeadTaskFilter, ExceptionFilter, DeadQueueFilter)
    sortable_by = ("id", "died")
    paginator = Paginator  # the dead letters are counted through their own index
    change_list_template = "admin/django_jobq/deadjob/change_list.html"
    deletable_statuses = (JobStatus.DEAD,)
    actions = ("requeue_selected", "requeue_with_options", "delete_selected")  # nothing to cancel here

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).filter(status=JobStatus.DEAD)

    def get_sortable_by(self, request: HttpRequest) -> Any:
        return self.sortable_by  # "died": jobq_job_finished, in its order

    def get_list_display(self, request: HttpRequest) -> Any:
        return self.list_display

    @admin.display(description="died", ordering="finished_at")
    def died(self, obj: Job) -> SafeString | str:
        return time_cell(obj.finished_at)

    # The dead letters are jobs: the Job permissions govern them, not the proxy model's own.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        groups = _groups(request)
        rows = [{"g": group, "died": time_cell(group.last_finished_at)} for group in groups]
        extra_context = {**(extra_context or {}), "jobq_groups": groups, "jobq_group_rows": rows}
        return super().changelist_view(request, extra_context)
