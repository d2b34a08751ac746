"""The dead letters: DEAD jobs, grouped by task and exception class; requeue and delete them."""

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
from .common import DeadQueueFilter, DeadTaskFilter, ExceptionFilter, per_request, time_cell
from .jobs import JobAdmin


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
        queryset = super().get_queryset(request).filter(status=JobStatus.DEAD)
        return queryset.annotate(exception=dashboard.ExceptionClass("last_error"))

    @admin.display(description="died", ordering="finished_at")
    def died(self, obj: Job) -> SafeString | str:
        return time_cell(obj.finished_at)

    # The dead letters are jobs: the Job permissions govern them, not the proxy model's own.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        groups = per_request(request, "dead_groups", dashboard.dead_letter_groups)
        rows = [{"g": group, "died": time_cell(group.last_finished_at)} for group in groups]
        extra_context = {**(extra_context or {}), "jobq_groups": groups, "jobq_group_rows": rows}
        return super().changelist_view(request, extra_context)
