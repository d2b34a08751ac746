"""Workflows: the list (jobs per state, the overall state) and a workflow's page (its jobs in
topological order, what each waits for and what waits for it), read-only, with "Cancel workflow" for
those allowed to cancel jobs (django_jobq.cancel_job), through django_jobq.workflows.Workflow.cancel
and logged."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe

from ..console.search import WORKFLOW_PREFIX
from ..exceptions import JobqError
from ..models import Dependency, Job, Workflow
from ..status import FINISHED, JobStatus
from ..workflows import Workflow as WorkflowHandle
from ..workflows import WorkflowStatus
from .common import OnQueueDatabase, breadcrumbs, loaded_from, log, time_cell
from .databases import OnRequestedDatabase, routed

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    _WorkflowModelAdmin = admin.ModelAdmin[Workflow]
else:  # reads and writes on JOBQ["DATABASE"]
    _WorkflowModelAdmin = OnQueueDatabase

CANCEL_PERMISSION = "django_jobq.cancel_job"
# A workflow's page lists at most this many of its jobs (the first, in id order) and their edges.
MAX_SHOWN_JOBS = 500
MAX_SHOWN_EDGES = 5_000
MAX_LISTED_IDS = 20  # ids listed in one "waits for" / "needed by" cell; the rest counted
# The list's state columns, in the order a job lives them.
STATES = (
    JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DONE, JobStatus.DEAD,
    JobStatus.CANCELLED,
)  # fmt: skip


def _jobs_in(state: JobStatus) -> Coalesce:
    """A workflow's jobs in ``state``, counted on jobq_job_workflow (workflow_id, status), index-only."""
    count = (
        Job.objects.filter(workflow_id=OuterRef("pk"), status=state)
        .order_by()
        .values("workflow_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    return Coalesce(Subquery(count, output_field=IntegerField()), Value(0))


def _status(obj: Any) -> WorkflowStatus:
    return WorkflowStatus({state.name: getattr(obj, f"jobs_{state.name.lower()}", 0) for state in STATES})


def state_badge(status: WorkflowStatus) -> SafeString:
    css = {"running": "running", "succeeded": "done", "failed": "dead"}[status.state]
    label = "empty" if not sum(status.counts.values()) else status.state
    return format_html('<span class="jobq-status jobq-{}">{}</span>', css, label)


class StateFilter(admin.SimpleListFilter):
    """Running (a job unfinished), succeeded (every job DONE) or failed (finished, not every job DONE)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("running", "running"), ("succeeded", "succeeded"), ("failed", "failed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        unfinished = Q(jobs_waiting__gt=0) | Q(jobs_pending__gt=0) | Q(jobs_running__gt=0)
        failed = Q(jobs_dead__gt=0) | Q(jobs_cancelled__gt=0)
        if self.value() == "running":
            return queryset.filter(unfinished)
        if self.value() == "succeeded":
            return queryset.exclude(unfinished).exclude(failed).filter(jobs_done__gt=0)
        if self.value() == "failed":
            return queryset.exclude(unfinished).filter(failed)
        return queryset


@admin.register(Workflow)
class WorkflowAdmin(OnRequestedDatabase, _WorkflowModelAdmin):
    list_display: tuple[str, ...] = ("id", "name_display", "created", "jobs", "state")
    list_display_links = ("id", "name_display")
    list_filter = (StateFilter,)
    search_fields = ("=id", "name")
    search_help_text = "A workflow id, or words of its name."
    sortable_by = ("id",)
    list_per_page = 50
    show_full_result_count = False
    actions = ("cancel_workflows",)
    change_list_template = "admin/django_jobq/workflow/change_list.html"

    # -- permissions: view with the jobs' permission; nobody adds, edits or deletes a workflow here -------
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return any(
            user.has_perm(f"django_jobq.{codename}")
            for codename in ("view_job", "change_job", "view_workflow")
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_cancel_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_permission(request) and request.user.has_perm(CANCEL_PERMISSION)

    # -- list ------------------------------------------------------------------------------------------
    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        counts = {f"jobs_{state.name.lower()}": _jobs_in(state) for state in STATES}
        workflows: QuerySet[Any] = super().get_queryset(request).annotate(**counts)
        return workflows

    @admin.display(description="created", ordering="id")
    def created(self, obj: Workflow) -> SafeString | str:
        return time_cell(obj.created_at)

    def _count_cell(self, obj: Workflow, state: JobStatus) -> SafeString | str:
        jobs = getattr(obj, f"jobs_{state.name.lower()}", 0)
        if not jobs:
            return "0"
        url = reverse(f"{self.admin_site.name}:django_jobq_job_changelist")
        query = urlencode({"q": f"{WORKFLOW_PREFIX}{obj.pk}", "status__exact": str(int(state))})
        return format_html('<a href="{}?{}">{}</a>', url, query, jobs)

    @admin.display(description="name", ordering="name")
    def name_display(self, obj: Workflow) -> SafeString:
        return format_html('<span class="jobq-wrap">{}</span>', obj.name)

    @admin.display(description="jobs")
    def jobs(self, obj: Workflow) -> SafeString | str:
        """Its jobs per state (those it has), each count a link to those jobs."""
        cells = [
            format_html("{} {}", self._count_cell(obj, state), state.name.lower())
            for state in (JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DONE,
                          JobStatus.DEAD, JobStatus.CANCELLED)
            if getattr(obj, f"jobs_{state.name.lower()}", 0)
        ]  # fmt: skip
        if not cells:
            return "none"
        return format_html(
            '<span class="jobq-wrap">{}</span>',
            format_html_join(mark_safe(", "), "{}", ((c,) for c in cells)),
        )

    @admin.display(description="state")
    def state(self, obj: Workflow) -> SafeString:
        return state_badge(_status(obj))

    # -- cancel ----------------------------------------------------------------------------------------
    @admin.action(permissions=["cancel"], description="Cancel selected workflows")
    def cancel_workflows(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for workflow in queryset.only("id", "name"):
            self._cancel(request, workflow)

    def _cancel(self, request: HttpRequest, workflow: Workflow) -> None:
        user = request.user.get_username() or f"user {request.user.pk}"
        try:
            counts = WorkflowHandle(workflow.pk).cancel(by=f"admin {user}"[:200])
        except JobqError as exc:
            self.message_user(request, f"{workflow}: not cancelled: {exc}", messages.ERROR)
            return
        text = f"cancelled {counts.cancelled} job(s), asked {counts.requested} running job(s) to stop"
        log(request, [workflow], CHANGE, f"Cancelled: {text}")
        level = messages.SUCCESS if counts.cancelled or counts.requested else messages.WARNING
        self.message_user(request, f"{workflow}: {text}.", level)

    def get_urls(self) -> list[URLPattern]:
        cancel = path(
            "<int:workflow_id>/cancel/",
            self.admin_site.admin_view(routed(self.cancel_view)),
            name="django_jobq_workflow_cancel",
        )
        return [cancel, *super().get_urls()]

    def cancel_view(self, request: HttpRequest, workflow_id: int) -> HttpResponse:
        """POST: cancel the workflow's unfinished jobs; back to its page with a message."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_cancel_permission(request):
            raise PermissionDenied
        workflow = self.get_object(request, str(workflow_id))
        if workflow is None:
            raise Http404(f"no workflow {workflow_id}")
        self._cancel(request, workflow)
        return HttpResponseRedirect(reverse("admin:django_jobq_workflow_change", args=[workflow_id]))

    # -- a workflow's page -----------------------------------------------------------------------------
    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The workflow's jobs, in id order (a job's dependencies always have lower ids: a topological
        order), with their edges; no form."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        workflow = self.get_object(request, object_id)
        if workflow is None:
            self.message_user(request, f"There is no workflow {object_id:.30}.", messages.WARNING)
            return HttpResponseRedirect(reverse("admin:django_jobq_workflow_changelist"))
        opts = self.opts
        app_url = reverse("admin:app_list", kwargs={"app_label": opts.app_label})
        context = {
            **self.admin_site.each_context(request),
            **breadcrumbs(
                (str(opts.app_config.verbose_name), app_url),
                (
                    str(opts.verbose_name_plural).capitalize(),
                    reverse("admin:django_jobq_workflow_changelist"),
                ),
                (str(workflow), None),
            ),
            "title": str(workflow).capitalize(),
            "opts": opts,
            "workflow": workflow,
            "status": _status(workflow),
            "badge": state_badge(_status(workflow)),
            "states": [(state.label, getattr(workflow, f"jobs_{state.name.lower()}", 0)) for state in STATES],
            "can_cancel": self.has_cancel_permission(request) and not _status(workflow).finished,
            "cancel_url": reverse("admin:django_jobq_workflow_cancel", args=[workflow.pk]),
            "jobs_url": reverse("admin:django_jobq_job_changelist")
            + "?"
            + urlencode({"q": f"{WORKFLOW_PREFIX}{workflow.pk}"}),
            **workflow_jobs(workflow.pk, loaded_from(workflow)),
        }
        return TemplateResponse(request, "admin/django_jobq/workflow/detail.html", context)


def workflow_jobs(workflow_id: int, database: str) -> dict[str, Any]:
    """The page's table: the first MAX_SHOWN_JOBS jobs in id order, each with the ids it waits for
    (those still unfinished marked) and the ids waiting for it, among the edges of the jobs shown,
    read from ``database``."""
    fields = (
        "id",
        "task",
        "queue",
        "status",
        "waiting_on",
        "started_at",
        "finished_at",
        "dependency_failure",
    )
    jobs = list(
        Job.objects.using(database)
        .filter(workflow_id=workflow_id)
        .order_by("id")
        .only(*fields)[: MAX_SHOWN_JOBS + 1]
    )
    more_jobs = len(jobs) > MAX_SHOWN_JOBS
    jobs = jobs[:MAX_SHOWN_JOBS]
    ids = [job.pk for job in jobs]
    edges = list(
        Dependency.objects.using(database)
        .filter(dependent_id__in=ids)
        .order_by("dependent_id", "dependency_id")
        .values_list("dependent_id", "dependency_id", "resolved")[: MAX_SHOWN_EDGES + 1]
    )
    more_edges = len(edges) > MAX_SHOWN_EDGES
    waits_for: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    needed_by: dict[int, list[int]] = defaultdict(list)
    for dependent, dependency, resolved in edges[:MAX_SHOWN_EDGES]:
        waits_for[dependent].append((dependency, resolved))
        needed_by[dependency].append(dependent)
    rows = [
        {
            "job": job,
            "state": JobStatus(job.status),
            "css": JobStatus(job.status).name.lower(),
            "url": reverse("admin:django_jobq_job_change", args=[job.pk]),
            "waits_for": waits_for[job.pk][:MAX_LISTED_IDS],
            "waits_for_more": max(0, len(waits_for[job.pk]) - MAX_LISTED_IDS),
            "needed_by": needed_by[job.pk][:MAX_LISTED_IDS],
            "needed_by_more": max(0, len(needed_by[job.pk]) - MAX_LISTED_IDS),
            "finished": job.status in FINISHED,
            "started": time_cell(job.started_at),
            "ended": time_cell(job.finished_at),
        }
        for job in jobs
    ]
    return {
        "rows": rows,
        "more_jobs": more_jobs,
        "more_edges": more_edges,
        "max_jobs": MAX_SHOWN_JOBS,
        "edges": min(len(edges), MAX_SHOWN_EDGES),
    }
