"""The job list and a job's page (read-only), with the guarded delete; the requeue, dashboard and
pause/resume URLs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.models import DELETION, LogEntry
from django.db import connections
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from ..conf import jobq_settings
from ..console.search import HELP as SEARCH_HELP
from ..console.search import TAG_PREFIX, BadSearch, search, window_note, workflow_id
from ..exceptions import UnknownShard
from ..models import BulkAction, Job
from ..sql import engine_of
from ..status import JobStatus
from .cancelling import CancelActions, cancellable
from .common import (
    cancel_asked,
    error_text,
    exact_time,
    first_line,
    log,
    progress_bar,
    relative_time,
    time_cell,
)
from .dashboard import dashboard_view
from .databases import OnRequestedDatabase, database_query, routed
from .job_page import JobPage
from .listing import (
    NARROW_STATUSES,
    SORTS,
    BoundedChangeList,
    BoundedPaginator,
    QueueFilter,
    TaskFilter,
    finished_filter,
    status_filter,
)
from .queues import queue_state_view
from .requeue import RequeueActions


class WorkflowFilter(admin.SimpleListFilter):
    """``?workflow=42``: the jobs of one workflow (jobq_job_workflow). Listed only while in use (with
    "All" to leave it): the workflows are many; the workflow pages and the search "workflow:42" link here."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"workflow {value}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        try:
            return queryset.filter(workflow_id=workflow_id(value))
        except BadSearch:
            return queryset.none()


@admin.register(Job)
class JobAdmin(OnRequestedDatabase, JobPage, CancelActions, RequeueActions):
    list_display: tuple[str, ...] = (
        "id",
        "task_cell",
        "queue_cell",
        "status_cell",
        "run_at_display",
        "progress_cell",
        "error_line",
    )
    list_display_links = ("id",)
    list_filter: ClassVar[tuple[Any, ...]] = ("status", QueueFilter, TaskFilter, WorkflowFilter)
    search_fields = ("=id", "task", "=dedupe_key")  # shown as the search box; see get_search_results
    search_help_text = SEARCH_HELP
    sortable_by: ClassVar[tuple[str, ...]] = ("id",)  # and per status: get_sortable_by
    list_per_page = 50
    show_full_result_count = False
    paginator: ClassVar[type] = BoundedPaginator
    actions: Sequence[Any] = (
        "cancel_selected",
        "requeue_selected",
        "requeue_with_options",
        "delete_selected",
    )
    change_form_template = "admin/django_jobq/job/change_form.html"
    change_list_template = "admin/django_jobq/job/change_list.html"
    # Statuses this admin may delete; RUNNING never (the SQL refuses it too).
    deletable_statuses: Sequence[int] = (
        JobStatus.PENDING,
        JobStatus.DONE,
        JobStatus.DEAD,
        JobStatus.CANCELLED,
    )

    # -- permissions: view and the two guarded actions; nobody adds or edits a job by hand -----------------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return user.has_perm("django_jobq.view_job") or user.has_perm("django_jobq.change_job")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.status not in self.deletable_statuses:
            return False  # no delete button or URL for a RUNNING job
        return request.user.has_perm("django_jobq.delete_job")

    # -- list ------------------------------------------------------------------------------------------
    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[BoundedChangeList]:
        return BoundedChangeList

    def get_sortable_by(self, request: HttpRequest) -> Any:
        """By id always; "run at" and "finished" only where an index serves them (listing.SORTS)."""
        return ("id", *SORTS[status_filter(request)])

    def get_list_display(self, request: HttpRequest) -> Any:
        """A finished job's progress is over: its column gives when it finished instead."""
        shown = super().get_list_display(request)
        if not finished_filter(request):
            return shown
        return tuple("finished_cell" if name == "progress_cell" else name for name in shown)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        narrowed = status_filter(request) in NARROW_STATUSES
        try:
            found, cut = search(queryset, term, narrowed=narrowed)
        except BadSearch as exc:
            self.message_user(request, str(exc), messages.WARNING)
            return queryset.none(), False
        if cut:
            self.message_user(request, window_note(), messages.INFO)
        return found, False

    @admin.display(description="task")
    def task_cell(self, obj: Job) -> SafeString:
        """The task, a link to the job's page, and under it the job's tags (the list has no room for a
        column of its own, and most jobs have none)."""
        page = reverse(f"{self.admin_site.name}:django_jobq_job_change", args=[obj.pk])
        tags = self.tags_cell(obj)
        return format_html(
            '<a href="{}">{}</a>{}', page, obj.task, format_html("<br>{}", tags) if tags else ""
        )

    @admin.display(description="queue")
    def queue_cell(self, obj: Job) -> SafeString:
        """The queue, clipped when long (whole on hover): one line per job."""
        return format_html('<span class="jobq-clip jobq-queue" title="{}">{}</span>', obj.queue, obj.queue)

    @admin.display(description="tags")
    def tags_cell(self, obj: Job) -> SafeString | str:
        """Each tag, a link to the jobs carrying it (the search "tag:NAME")."""
        tags = obj.tags if isinstance(obj.tags, list) else []
        jobs = reverse(f"{self.admin_site.name}:django_jobq_job_changelist")
        return format_html_join(
            " ",
            '<a class="jobq-tag" href="{}?{}">{}</a>',
            (
                (jobs, database_query() + urlencode({"q": f"{TAG_PREFIX}{tag}"}), tag)
                for tag in tags
                if isinstance(tag, str)
            ),
        )

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: Job) -> SafeString:
        """The status; "cancel requested" after it while a job asked to stop still runs."""
        if not cancel_asked(obj):
            return self._badge(obj)
        return format_html('{} <span class="jobq-cancelling">cancel requested</span>', self._badge(obj))

    def _badge(self, obj: Job) -> SafeString:
        status = JobStatus(obj.status)
        return format_html('<span class="jobq-status jobq-{}">{}</span>', status.name.lower(), status.label)

    @admin.display(description="status", ordering="status")
    def status_cell(self, obj: Job) -> SafeString:
        """The status, the attempts used out of those allowed and, on hover, the worker: the list is narrow
        beside the admin's navigation and filters, so one column says what the job page says in three.
        Under it, when a cancel was asked of a job that still runs: when, and by whom."""
        title = (
            f"attempts used / allowed; worker {obj.worker_id}" if obj.worker_id else "attempts used / allowed"
        )
        cell = format_html(
            '{} <span class="jobq-muted" title="{}">{}</span>',
            self._badge(obj),
            title,
            self.attempts_display(obj),
        )
        asked = obj.cancel_requested_at
        if asked is None or not cancel_asked(obj):
            return cell
        by = obj.cancelled_by or "unknown"
        return format_html(
            '{}<br><span class="jobq-cancelling jobq-cancel-note" title="cancel requested {} by {}">'
            "cancel requested {} by {}</span>",
            cell,
            exact_time(asked),
            by,
            relative_time(asked),
            by,
        )

    @admin.display(description="attempts")
    def attempts_display(self, obj: Job) -> str:
        """Attempts used of the budget; shutdown releases apart (the first few use no attempt)."""
        used = f"{obj.attempts}/{obj.max_attempts}"
        return f"{used}, {obj.releases} release{'s' if obj.releases > 1 else ''}" if obj.releases else used

    @admin.display(description="run at", ordering="run_at")
    def run_at_display(self, obj: Job) -> SafeString | str:
        return time_cell(obj.run_at)

    @admin.display(description="finished", ordering="finished_at")
    def finished_cell(self, obj: Job) -> SafeString | str:
        return time_cell(obj.finished_at)

    @admin.display(description="progress")
    def progress_cell(self, obj: Job) -> SafeString | str:
        return progress_bar(obj.progress, compact=True)

    @admin.display(description="progress")
    def progress_display(self, obj: Job) -> SafeString | str:
        return progress_bar(obj.progress)

    @admin.display(description="last error")
    def error_line(self, obj: Job) -> SafeString | str:
        line = first_line(error_text(obj))
        return format_html('<span class="jobq-clip" title="{}">{}</span>', line, line) if line else ""

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if (moved := self._moved_to(request, object_id)) is not None:  # moved by jobq_queue move
            page = reverse("admin:django_jobq_job_change", args=[moved], current_app=self.admin_site.name)
            query = request.GET.urlencode()
            return HttpResponseRedirect(f"{page}?{query}" if query else page)
        extra_context = {
            **(extra_context or {}),
            "jobq_can_requeue": self.has_requeue_permission(request),
            "jobq_can_cancel": self.has_cancel_permission(request),
        }
        return super().change_view(request, object_id, form_url, extra_context)

    def _moved_to(self, request: HttpRequest, object_id: str) -> int | None:
        """With JOBQ["SHARDS"], for a user who may see jobs, the id a job that is not on this page's
        database was given where jobq_queue move took it; else None."""
        if not (
            jobq_settings().shards and object_id.isascii() and object_id.isdigit() and len(object_id) < 19
        ):
            return None
        if not self.has_view_or_change_permission(request) or self.get_object(request, object_id) is not None:
            return None
        asked = int(object_id)
        try:
            moved = Job.objects.current_id(asked)
        except UnknownShard:  # an id of no configured database: the page says it is not there
            return None
        return None if moved == asked else moved

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        """The Cancel button: for a job a cancel would still change, and a user who may cancel."""
        context["jobq_cancel"] = bool(obj is not None and cancellable(obj) and context.get("jobq_can_cancel"))
        return super().render_change_form(request, context, add, change, form_url, obj)

    # -- delete: a job's page uses Django's confirmation page, the guarded statement underneath -------------------------------
    def get_deleted_objects(
        self, objs: Iterable[Any], request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        listed = [str(obj) for obj in objs if obj.status in self.deletable_statuses]
        return listed, {str(self.opts.verbose_name_plural): len(listed)}, set(), []

    def log_deletions(self, request: HttpRequest, queryset: Iterable[Any]) -> list[LogEntry]:
        return []  # logged after the delete, for the rows it really removed

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self._delete(request, [obj.pk])

    @admin.action(permissions=["delete"], description="Delete selected jobs")
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        """The list's delete: the confirmed action (actions.py), not Django's page listing every job."""
        return self.confirm_action(request, queryset, BulkAction.Kind.DELETE)

    def _delete(self, request: HttpRequest, ids: list[int]) -> None:
        connection = connections[jobq_settings().database]
        engine = engine_of(connection)
        params = {"ids": ids, "statuses": list(self.deletable_statuses)}
        rows = engine.run(connection, engine.stats.DELETE_INACTIVE, params).rows
        deleted = [Job(id=pk, task=task, status=status) for pk, task, status in rows]
        if deleted:
            log(request, deleted, DELETION)
        kept = len(ids) - len(deleted)
        if kept:
            self.message_user(
                request,
                f"{kept} job(s) were not deleted: they are running, being changed at this moment, or gone.",
                messages.WARNING,
            )

    # -- dashboard -------------------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        urls = [
            path(
                "<path:object_id>/requeue/",
                self.admin_site.admin_view(routed(self.requeue_view)),
                name=f"{name}_requeue",
            )
        ]
        if self.model is Job:
            urls.append(
                path(
                    "<path:object_id>/cancel/",
                    self.admin_site.admin_view(routed(self.cancel_view)),
                    name=f"{name}_cancel",
                )
            )
            urls.append(
                path(
                    "dashboard/",
                    self.admin_site.admin_view(routed(self.dashboard_view)),
                    name="django_jobq_dashboard",
                )
            )
            urls.append(
                path(
                    "dashboard/queue/",
                    self.admin_site.admin_view(self.queue_state_view),
                    name="django_jobq_queue_state",
                )
            )
        return urls + super().get_urls()

    def dashboard_view(self, request: HttpRequest) -> HttpResponseBase:
        return dashboard_view(self, request)

    def queue_state_view(self, request: HttpRequest) -> HttpResponseBase:
        return queue_state_view(self, request)
