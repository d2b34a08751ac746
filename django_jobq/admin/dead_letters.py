"""The dead letters: DEAD jobs, grouped by task and exception class; requeue and delete them."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from .. import dashboard
from ..models import DeadJob, JobStatus
from .common import ExceptionFilter, QueueFilter, TaskFilter, per_request
from .jobs import JobAdmin


@admin.register(DeadJob)
class DeadJobAdmin(JobAdmin):
    """DEAD jobs, grouped by task and exception class; requeue and delete them."""

    list_display = ("id", "task", "queue", "error_line", "attempts_display", "finished_at")
    list_filter = (TaskFilter, ExceptionFilter, QueueFilter)
    sortable_by = ("id", "finished_at")
    paginator = Paginator  # the dead letters are counted through their own index
    change_list_template = "admin/django_jobq/deadjob/change_list.html"
    deletable_statuses = (JobStatus.DEAD,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request).filter(status=JobStatus.DEAD)
        return queryset.annotate(exception=dashboard.ExceptionClass("last_error"))

    # The dead letters are jobs: the Job permissions govern them, not the proxy model's own.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        groups = per_request(request, "dead_groups", dashboard.dead_letter_groups)
        extra_context = {**(extra_context or {}), "jobq_groups": groups}
        return super().changelist_view(request, extra_context)
