"""The bulk actions' page: each "select all matching" action, its progress, and "Stop" (the next batch
sees it and ends the action CANCELLED; what the batches before it did stays done)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin, messages
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..console import bulk
from ..console.selection import Selection
from ..exceptions import JobqError
from ..models import BulkAction, Job
from ..status import ACTIVE, JobStatus
from .common import OnQueueDatabase, progress_bar, time_cell

# The permission that starts (and may stop) each kind of bulk action.
PERMISSIONS = {
    BulkAction.Kind.REQUEUE: "django_jobq.requeue_job",
    BulkAction.Kind.CANCEL: "django_jobq.cancel_job",
    BulkAction.Kind.DELETE: "django_jobq.delete_job",
}


@admin.register(BulkAction)
class BulkActionAdmin(OnQueueDatabase):
    list_display = (
        "id",
        "action",
        "filter_cell",
        "progress_cell",
        "state_cell",
        "requested_by",
        "started",
        "job_link",
    )
    list_display_links = ("id",)
    list_filter = ("state", "action")
    fields = (
        "action",
        "filter_cell",
        "query",
        "progress_cell",
        "state_cell",
        "skipped",
        "requested_by",
        "started",
        "finished",
        "job_link",
    )
    readonly_fields = fields
    actions: ClassVar[list[str]] = ["stop_selected"]  # type: ignore[misc]

    # Jobs' viewers see the bulk actions; nobody adds, edits or deletes one by hand.
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_jobq.view_job") or request.user.has_perm(
            "django_jobq.change_job"
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_stop_permission(self, request: HttpRequest) -> bool:
        return any(request.user.has_perm(perm) for perm in PERMISSIONS.values())

    @admin.action(permissions=["stop"], description="Stop selected bulk actions (after their current batch)")
    def stop_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        asked = refused = 0
        for action in queryset.filter(state=BulkAction.State.RUNNING).only("id", "action"):
            if not request.user.has_perm(PERMISSIONS[BulkAction.Kind(action.action)]):
                refused += 1
            elif bulk.request_cancel(action.pk):
                asked += 1
        self.message_user(
            request,
            f"Asked {asked} bulk action(s) to stop after their current batch (a halted one stops at once).",
        )
        if refused:
            self.message_user(
                request,
                f"{refused} bulk action(s) left running: you may not do what they do.",
                messages.WARNING,
            )

    @admin.display(description="jobs")
    def filter_cell(self, obj: BulkAction) -> str:
        try:
            return Selection.from_dict(obj.selection).describe()
        except JobqError:
            return "?"

    @admin.display(description="progress")
    def progress_cell(self, obj: BulkAction) -> SafeString | str:
        """Jobs gone through (changed or left as they were) out of those counted when it was confirmed."""
        return progress_bar({"done": obj.done + obj.skipped, "total": max(obj.total, obj.done + obj.skipped)})

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """Each action with its job's status (one subquery, not a query per row)."""
        status = Job.objects.filter(id=OuterRef("job_id")).values("status")[:1]
        actions: QuerySet[Any] = super().get_queryset(request).annotate(job_status=Subquery(status))
        return actions

    @admin.display(description="state")
    def state_cell(self, obj: BulkAction) -> str:
        state = f"{obj.state}: {obj.done} changed, {obj.skipped} left as they were"
        if obj.state != BulkAction.State.RUNNING:
            return state
        job_status = getattr(obj, "job_status", None)
        if obj.job_id is not None and job_status not in ACTIVE:
            ended = "is gone" if job_status is None else f"ended {JobStatus(job_status).name}"
            return f"{state}; halted: its job {ended} (requeue the job to resume, or stop the action)"
        if obj.cancel_requested_at is not None:
            return f"{state} (stop requested)"
        return state

    @admin.display(description="started", ordering="created_at")
    def started(self, obj: BulkAction) -> SafeString | str:
        return time_cell(obj.created_at)

    @admin.display(description="finished")
    def finished(self, obj: BulkAction) -> SafeString | str:
        return time_cell(obj.finished_at)

    @admin.display(description="job")
    def job_link(self, obj: BulkAction) -> SafeString | str:
        if obj.job_id is None:
            return "-"
        page = reverse(f"{self.admin_site.name}:django_jobq_job_change", args=[obj.job_id])
        return format_html('<a href="{}">job {}</a>', page, obj.job_id)
