"""The admin: jobs (read-only), dead letters, workers and the queue dashboard.

Jobs are never edited through a form: a form save writes every column and would undo a concurrent
claim. State changes go through the manager's guarded statements (requeue: DEAD -> PENDING only) and a
guarded delete that never removes a RUNNING job; each is allowed by its own permission and recorded in
the admin log with what it actually changed.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from . import dashboard
from .conf import jobq_settings
from .models import DeadJob, Job, JobStatus, WorkerRecord
from .sql import stats

T = TypeVar("T")

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    _JobModelAdmin = admin.ModelAdmin[Job]
    _WorkerModelAdmin = admin.ModelAdmin[WorkerRecord]
    _Paginator = Paginator[Any]
else:
    _JobModelAdmin = _WorkerModelAdmin = admin.ModelAdmin
    _Paginator = Paginator

# Above this many matching jobs the job list shows the planner's estimate of its total instead of a count.
ESTIMATE_COUNT_ABOVE = 10_000


# -- shared helpers ----------------------------------------------------------------------------------------
def _per_request(request: HttpRequest, key: str, compute: Callable[[], T]) -> T:
    """Compute once per request (the list filters and the dead-letter groups share their queries)."""
    cache: dict[str, Any] = request.__dict__.setdefault("_jobq_cache", {})
    if key not in cache:
        cache[key] = compute()
    return cache[key]  # type: ignore[no-any-return]


def _log(request: HttpRequest, jobs: Iterable[Job], flag: int, message: str = "") -> None:
    """Record in the admin log that the request's user did ``flag`` to each of ``jobs``."""
    user_id = request.user.pk
    assert user_id is not None  # admin views require a logged-in staff user
    LogEntry.objects.log_actions(
        user_id=user_id, queryset=list(jobs), action_flag=flag, change_message=message
    )


def _first_line(text: str | None, limit: int = 120) -> str:
    if not text:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines and lines[0].startswith("Traceback") else (lines[0] if lines else "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="jobq-json">{}</pre>', text)


def progress_bar(progress: Any) -> SafeString | str:
    """A job's {"done": n, "total": m} as an HTML <progress> bar with its figures; "-" when there is none."""
    if not isinstance(progress, dict):
        return "-"
    done, total = progress.get("done"), progress.get("total")
    if not isinstance(done, int | float) or isinstance(done, bool):
        return format_html("<code>{}</code>", json.dumps(progress))
    if isinstance(total, int | float) and not isinstance(total, bool) and total > 0:
        percent = max(0, min(100, round(100 * done / total)))
        return format_html(
            '<progress class="jobq-progress" value="{}" max="{}">{}%</progress> {} / {} ({}%)',
            done,
            total,
            percent,
            _number(done),
            _number(total),
            percent,
        )
    return format_html('<progress class="jobq-progress">…</progress> {} done', _number(done))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _ago(moment: dt.datetime | None, now: dt.datetime) -> str:
    return "-" if moment is None else dashboard.format_seconds((now - moment).total_seconds())


class EstimatedCountPaginator(_Paginator):
    """Counts up to ESTIMATE_COUNT_ABOVE rows; past that, the total is the planner's estimate.

    A million-row job list is never counted: the count reads at most ESTIMATE_COUNT_ABOVE + 1 rows.
    """

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return super().count
        counted = queryset.order_by()[: ESTIMATE_COUNT_ABOVE + 1].count()
        if counted <= ESTIMATE_COUNT_ABOVE:
            return counted
        plan = json.loads(queryset.explain(format="json"))
        return max(counted, int(plan[0]["Plan"]["Plan Rows"]))


# -- list filters ------------------------------------------------------------------------------------------
class _NameFilter(admin.SimpleListFilter):
    """Filter on a text column; the choices come from bounded indexes (dashboard.filter_names)."""

    which = 0

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = _per_request(request, "filter_names", dashboard.filter_names)[self.which]
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(**{str(self.parameter_name): value})


class QueueFilter(_NameFilter):
    title = "queue"
    parameter_name = "queue"
    which = 0


class TaskFilter(_NameFilter):
    title = "task"
    parameter_name = "task"
    which = 1


class ExceptionFilter(admin.SimpleListFilter):
    """Dead letters by the exception class that killed them (the last line of last_error)."""

    title = "exception"
    parameter_name = "exception"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        groups = _per_request(request, "dead_groups", dashboard.dead_letter_groups)
        names = sorted({group.exception for group in groups})
        return [(name, name or "(no error text)") for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(exception=value)


# -- forms -------------------------------------------------------------------------------------------------
class RequeueForm(forms.Form):
    run_at = forms.DateTimeField(
        required=False,
        label="Run at",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    priority = forms.IntegerField(
        required=False,
        min_value=-32768,
        max_value=32767,
        help_text="Empty: keep each job's priority. Lower runs first.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        zone = timezone.get_current_timezone_name()
        self.fields["run_at"].help_text = f"Empty: now. In {zone} time."


# -- jobs --------------------------------------------------------------------------------------------------
@admin.register(Job)
class JobAdmin(_JobModelAdmin):
    list_display: tuple[str, ...] = (
        "id",
        "task",
        "queue",
        "status_badge",
        "attempts_display",
        "run_at_display",
        "age",
        "worker_id",
        "progress_display",
        "error_line",
    )
    list_display_links = ("id", "task")
    list_filter: ClassVar[tuple[Any, ...]] = ("status", QueueFilter, TaskFilter)
    search_fields = ("=id", "task", "=dedupe_key")  # shown as the search box; see get_search_results
    search_help_text = "A job id, a task name (or its beginning), or a dedupe key."
    sortable_by = ("id", "run_at")
    list_per_page = 50
    show_full_result_count = False
    paginator: ClassVar[type] = EstimatedCountPaginator
    actions = ("requeue_selected", "requeue_with_options", "delete_selected")
    change_form_template = "admin/django_jobq/job/change_form.html"
    change_list_template = "admin/django_jobq/job/change_list.html"
    # Statuses this admin may delete; RUNNING never (the SQL refuses it too).
    deletable_statuses: Sequence[int] = (JobStatus.PENDING, JobStatus.DONE, JobStatus.DEAD)
    fieldsets = (
        (
            None,
            {"fields": ("id", "task", "queue", "status_badge", "priority", "attempts_display", "dedupe_key")},
        ),
        ("Progress", {"fields": ("progress_display",)}),
        ("Timing", {"fields": ("created_at", "run_at", "started_at", "finished_at", "duration")}),
        ("Lease", {"fields": ("worker_id", "lease_display")}),
        ("Payload and result", {"fields": ("payload_pretty", "result_pretty")}),
        ("Errors", {"fields": ("last_error_pretty", "error_history")}),
    )
    readonly_fields = (
        "id",
        "task",
        "queue",
        "status_badge",
        "priority",
        "attempts_display",
        "dedupe_key",
        "progress_display",
        "created_at",
        "run_at",
        "started_at",
        "finished_at",
        "duration",
        "worker_id",
        "lease_display",
        "payload_pretty",
        "result_pretty",
        "last_error_pretty",
        "error_history",
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

    def has_requeue_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_jobq.requeue_job")

    # -- list ------------------------------------------------------------------------------------------
    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(task__startswith=term) | Q(dedupe_key=term)
        if term.isdigit():
            match |= Q(id=int(term))
        return queryset.filter(match), False

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: Job) -> SafeString:
        status = JobStatus(obj.status)
        return format_html('<span class="jobq-status jobq-{}">{}</span>', status.name.lower(), status.label)

    @admin.display(description="attempts")
    def attempts_display(self, obj: Job) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @admin.display(description="run at", ordering="run_at")
    def run_at_display(self, obj: Job) -> SafeString:
        seconds = (obj.run_at - timezone.now()).total_seconds()
        when = (
            f"in {dashboard.format_seconds(seconds)}"
            if seconds > 0
            else f"{dashboard.format_seconds(-seconds)} ago"
        )
        return format_html('<span title="{}">{}</span>', obj.run_at.isoformat(timespec="seconds"), when)

    @admin.display(description="age")
    def age(self, obj: Job) -> str:
        return _ago(obj.created_at, timezone.now())

    @admin.display(description="progress")
    def progress_display(self, obj: Job) -> SafeString | str:
        return progress_bar(obj.progress)

    @admin.display(description="last error")
    def error_line(self, obj: Job) -> str:
        return _first_line(obj.last_error)

    # -- detail ----------------------------------------------------------------------------------------
    @admin.display(description="duration")
    def duration(self, obj: Job) -> str:
        if obj.started_at is None:
            return "-"
        end = obj.finished_at or timezone.now()
        running = "" if obj.finished_at else " (running)"
        return dashboard.format_seconds((end - obj.started_at).total_seconds()) + running

    @admin.display(description="lease")
    def lease_display(self, obj: Job) -> str:
        if obj.lease_until is None:
            return "-"
        left = (obj.lease_until - timezone.now()).total_seconds()
        if left >= 0:
            return f"until {obj.lease_until.isoformat(timespec='seconds')} (expires in {dashboard.format_seconds(left)})"
        return (
            f"expired {dashboard.format_seconds(-left)} ago at {obj.lease_until.isoformat(timespec='seconds')}"
            " (the reaper will take the job back)"
        )

    @admin.display(description="payload")
    def payload_pretty(self, obj: Job) -> SafeString:
        return _pretty_json(obj.payload)

    @admin.display(description="result")
    def result_pretty(self, obj: Job) -> SafeString | str:
        return "-" if obj.result is None else _pretty_json(obj.result)

    @admin.display(description="last error")
    def last_error_pretty(self, obj: Job) -> SafeString | str:
        return "-" if not obj.last_error else format_html('<pre class="jobq-error">{}</pre>', obj.last_error)

    @admin.display(description="every failed attempt")
    def error_history(self, obj: Job) -> SafeString | str:
        errors = obj.errors if isinstance(obj.errors, list) else []
        if not errors:
            return "-"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><details><summary>{}</summary>"
            '<pre class="jobq-error">{}</pre></details></td></tr>',
            (
                (
                    entry.get("attempt", "?"),
                    entry.get("at", ""),
                    entry.get("worker") or "-",
                    _first_line(str(entry.get("error", ""))),
                    entry.get("error", ""),
                )
                for entry in reversed(errors)
                if isinstance(entry, dict)
            ),
        )
        return format_html(
            '<table class="jobq-errors"><thead><tr><th>attempt</th><th>at</th><th>worker</th>'
            "<th>error (newest first)</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra_context = {**(extra_context or {}), "jobq_can_requeue": self.has_requeue_permission(request)}
        return super().change_view(request, object_id, form_url, extra_context)

    # -- requeue ---------------------------------------------------------------------------------------
    @admin.action(permissions=["requeue"], description="Requeue selected dead jobs now")
    def requeue_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._requeue(request, self._selected_ids(request, queryset))

    @admin.action(permissions=["requeue"], description="Requeue selected dead jobs at a time / priority…")
    def requeue_with_options(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        form = RequeueForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            self._requeue(request, self._selected_ids(request, queryset), **form.cleaned_data)
            return None  # back to the list
        jobs = list(queryset[:100])
        return self._requeue_page(request, form, jobs, selected=request.POST.getlist(ACTION_CHECKBOX_NAME))

    def requeue_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One job's requeue: GET shows the form, POST requeues (if it is still DEAD)."""
        if not (self.has_view_permission(request) and self.has_requeue_permission(request)):
            raise PermissionDenied
        job = self.get_object(request, object_id)
        if job is None:
            raise Http404(f"No job {object_id!r} here.")
        # Back to the job's page in the job list: once requeued it is no longer a dead letter.
        change_url = reverse("admin:django_jobq_job_change", args=[job.pk])
        form = RequeueForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            self._requeue(request, [job.pk], **form.cleaned_data)
            return HttpResponseRedirect(change_url)
        if job.status != JobStatus.DEAD:
            self.message_user(
                request, f"{job} is not DEAD: only dead jobs can be requeued.", messages.WARNING
            )
        return self._requeue_page(request, form, [job], selected=None)

    def _selected_ids(self, request: HttpRequest, queryset: QuerySet[Any]) -> list[int]:
        if request.POST.get("select_across") == "1":  # "select all N": only the dead ones, by the dead index
            return list(queryset.filter(status=JobStatus.DEAD).values_list("pk", flat=True))
        return list(queryset.values_list("pk", flat=True))

    def _requeue(
        self,
        request: HttpRequest,
        ids: Sequence[int],
        run_at: dt.datetime | None = None,
        priority: int | None = None,
    ) -> list[int]:
        """Requeue through the manager's guarded statement; log and report what it changed."""
        done = Job.objects.requeue_many(ids, run_at=run_at, priority=priority)
        if done:
            message = "Requeued (DEAD -> PENDING)"
            if run_at is not None:
                message += f", to run at {run_at.isoformat(timespec='seconds')}"
            if priority is not None:
                message += f", priority {priority}"
            jobs = (
                Job.objects.using(jobq_settings().database).filter(pk__in=done).only("id", "task", "status")
            )
            _log(request, jobs, CHANGE, message)
            self.message_user(request, f"Requeued {len(done)} dead job(s).", messages.SUCCESS)
        refused = len(ids) - len(done)
        if refused:
            self.message_user(
                request,
                f"{refused} job(s) left unchanged: only DEAD jobs are requeued, and not while another "
                "active job holds the same dedupe key.",
                messages.WARNING,
            )
        return done

    def _requeue_page(
        self, request: HttpRequest, form: RequeueForm, jobs: list[Job], selected: list[str] | None
    ) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": "Requeue dead jobs",
            "opts": self.opts,
            "form": form,
            "jobs": jobs,
            "selected": selected,  # None: the one-job page (posts to itself)
            "select_across": request.POST.get("select_across", "0"),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/django_jobq/requeue.html", context)

    # -- delete: Django's confirmation page, the guarded statement underneath -------------------------------
    def get_deleted_objects(
        self, objs: Iterable[Any], request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        listed = [str(obj) for obj in objs if obj.status in self.deletable_statuses]
        return listed, {str(self.opts.verbose_name_plural): len(listed)}, set(), []

    def log_deletions(self, request: HttpRequest, queryset: Iterable[Any]) -> list[LogEntry]:
        return []  # logged after the delete, for the rows it really removed

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self._delete(request, [obj.pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._delete(request, list(queryset.values_list("pk", flat=True)))

    def _delete(self, request: HttpRequest, ids: list[int]) -> None:
        connection = connections[jobq_settings().database]
        with connection.cursor() as cursor:
            cursor.execute(stats.DELETE_INACTIVE, {"ids": ids, "statuses": list(self.deletable_statuses)})
            rows = cursor.fetchall()
        deleted = [Job(id=pk, task=task, status=status) for pk, task, status in rows]
        if deleted:
            _log(request, deleted, DELETION)
        kept = len(ids) - len(deleted)
        if kept:
            self.message_user(
                request,
                f"{kept} job(s) were not deleted: they are running (or no longer exist).",
                messages.WARNING,
            )

    # -- dashboard -------------------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        urls = [
            path(
                "<path:object_id>/requeue/",
                self.admin_site.admin_view(self.requeue_view),
                name=f"{name}_requeue",
            )
        ]
        if self.model is Job:
            urls.append(
                path(
                    "dashboard/",
                    self.admin_site.admin_view(self.dashboard_view),
                    name="django_jobq_dashboard",
                )
            )
        return urls + super().get_urls()

    def dashboard_view(self, request: HttpRequest) -> HttpResponseBase:
        if not self.has_view_permission(request):
            raise PermissionDenied
        snap = dashboard.snapshot()
        refresh = request.GET.get("refresh", "")
        context = {
            **self.admin_site.each_context(request),
            "title": "Queue dashboard",
            "opts": self.opts,
            "snap": snap,
            "queues": [_queue_row(q, snap) for q in snap.queues],
            "total": _queue_row(snap.total, snap),
            "chart": throughput_chart(snap.throughput),
            "workers": [
                {"w": w, "seen": dashboard.format_seconds(w.silent_for), "lanes": _lanes(w.lanes)}
                for w in snap.workers
            ],
            "refresh": int(refresh) if refresh.isdigit() and 0 < int(refresh) <= 3600 else None,
            "jobs_url": reverse("admin:django_jobq_job_changelist"),
            "dead_url": reverse("admin:django_jobq_deadjob_changelist"),
        }
        return TemplateResponse(request, "admin/django_jobq/dashboard.html", context)


def _lanes(lanes: dict[str, int]) -> str:
    return ", ".join(f"{queue}: {slots}" for queue, slots in sorted(lanes.items())) or "-"


def _queue_row(q: dashboard.QueueFigures, snap: dashboard.Snapshot) -> dict[str, Any]:
    done = "?" if q.done is None else (f"≈{q.done}" if snap.done_estimated else str(q.done))
    return {"q": q, "lag": dashboard.format_seconds(q.lag), "done": done}


def throughput_chart(
    minutes: Sequence[dashboard.Minute], width: int = 900, height: int = 140
) -> dict[str, Any]:
    """Geometry of the inline SVG bar chart: one bar per minute, DONE below, DEAD stacked on top."""
    top = max([m.done + m.dead for m in minutes] + [1])
    slot = width / max(len(minutes), 1)
    bars = []
    for i, m in enumerate(minutes):
        done_h = height * m.done / top
        dead_h = height * m.dead / top
        bars.append(
            {
                "x": round(i * slot + 1, 1),
                "w": round(max(slot - 2, 1), 1),
                "done_y": round(height - done_h, 1),
                "done_h": round(done_h, 1),
                "dead_y": round(height - done_h - dead_h, 1),
                "dead_h": round(dead_h, 1),
                "title": f"{m.ago} min ago: {m.done} done, {m.dead} dead"
                if m.ago
                else f"last minute: {m.done} done, {m.dead} dead",
            }
        )
    return {
        "width": width,
        "height": height,
        "top": top,
        "bars": bars,
        "done": sum(m.done for m in minutes),
        "dead": sum(m.dead for m in minutes),
    }


# -- dead letters ------------------------------------------------------------------------------------------
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
        groups = _per_request(request, "dead_groups", dashboard.dead_letter_groups)
        extra_context = {**(extra_context or {}), "jobq_groups": groups}
        return super().changelist_view(request, extra_context)


# -- workers -----------------------------------------------------------------------------------------------
@admin.register(WorkerRecord)
class WorkerRecordAdmin(_WorkerModelAdmin):
    list_display = (
        "worker_id",
        "state",
        "hostname",
        "pid",
        "lanes_display",
        "running",
        "started_at",
        "last_seen_at",
    )
    list_filter = ("hostname",)
    search_fields = ("worker_id", "hostname")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="state")
    def state(self, obj: WorkerRecord) -> str:
        if obj.stopped_at is not None:
            return f"stopped {_ago(obj.stopped_at, timezone.now())} ago"
        silent = (timezone.now() - obj.last_seen_at).total_seconds()
        alive = silent <= dashboard.ALIVE_HEARTBEATS * jobq_settings().heartbeat_seconds
        return "alive" if alive else f"silent for {dashboard.format_seconds(silent)}"

    @admin.display(description="lanes")
    def lanes_display(self, obj: WorkerRecord) -> str:
        return _lanes(obj.lanes if isinstance(obj.lanes, dict) else {})
