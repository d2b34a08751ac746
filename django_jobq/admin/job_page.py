"""A job's page: its fields in sections, read-only, and how each is shown (the errors first on a DEAD
or CANCELLED job's page, the worker's heartbeat on a RUNNING one's, its workflow and edges when it has
any)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import dashboard
from ..models import Dependency, Job, WorkerRecord
from ..status import ACTIVE, JobStatus
from .common import (
    OnQueueDatabase,
    cancel_text,
    error_text,
    exact_time,
    first_line,
    heartbeat_state,
    loaded_from,
    pretty_json,
    time_field,
)

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    _JobModelAdmin = admin.ModelAdmin[Job]
else:  # reads and writes on JOBQ["DATABASE"]
    _JobModelAdmin = OnQueueDatabase


MAX_EDGES = 50  # ids listed in "waits for" and "needed by" on a job's page; the workflow page has the rest
WORKFLOW_FIELDSET: Any = ("Workflow", {"fields": ("workflow_link", "waits_for", "needed_by")})


class JobPage(_JobModelAdmin):
    """The change page of JobAdmin (which adds the list, the actions and the dashboard)."""

    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "task",
                    "queue",
                    "tags_cell",
                    "status_badge",
                    "priority",
                    "attempts_display",
                    "dedupe_key",
                )
            },
        ),
        ("Payload", {"fields": ("payload_pretty",)}),
        ("Progress and result", {"fields": ("progress_display", "result_pretty")}),
        (
            "Timing",
            {
                "fields": (
                    "created_at_display",
                    "run_at_field",
                    "started_at_display",
                    "finished_at_display",
                    "duration",
                )
            },
        ),
        ("Lease", {"fields": ("worker_id", "worker_heartbeat", "lease_display")}),
        ("Errors", {"fields": ("last_error_pretty", "error_history")}),
    )
    readonly_fields = (
        "id",
        "task",
        "queue",
        "tags_cell",
        "status_badge",
        "priority",
        "attempts_display",
        "dedupe_key",
        "progress_display",
        "created_at_display",
        "run_at_field",
        "started_at_display",
        "finished_at_display",
        "duration",
        "worker_id",
        "worker_heartbeat",
        "lease_display",
        "payload_pretty",
        "result_pretty",
        "last_error_pretty",
        "error_history",
        "workflow_link",
        "waits_for",
        "needed_by",
        "cancel_display",
    )

    # -- detail ----------------------------------------------------------------------------------------
    @admin.display(description="duration")
    def duration(self, obj: Job) -> str:
        if obj.started_at is None:
            return "-"
        end = obj.finished_at or timezone.now()
        running = "" if obj.finished_at else " (running)"
        return dashboard.format_duration((end - obj.started_at).total_seconds()) + running

    @admin.display(description="created at")
    def created_at_display(self, obj: Job) -> SafeString | str:
        return time_field(obj.created_at)

    @admin.display(description="run at")
    def run_at_field(self, obj: Job) -> SafeString | str:
        return time_field(obj.run_at)

    @admin.display(description="started at")
    def started_at_display(self, obj: Job) -> SafeString | str:
        return time_field(obj.started_at)

    @admin.display(description="finished at")
    def finished_at_display(self, obj: Job) -> SafeString | str:
        return time_field(obj.finished_at)

    @admin.display(description="lease")
    def lease_display(self, obj: Job) -> SafeString | str:
        if obj.lease_until is None:
            return "-"
        left = (obj.lease_until - timezone.now()).total_seconds()
        if left >= 0:
            return format_html(
                "until {} (expires in {})", exact_time(obj.lease_until), dashboard.format_seconds(left)
            )
        return format_html(
            "expired {} ago at {} (the reaper will take the job back)",
            dashboard.format_seconds(-left),
            exact_time(obj.lease_until),
        )

    @admin.display(description="worker's heartbeat")
    def worker_heartbeat(self, obj: Job) -> str:
        """For a RUNNING job: whether its worker still beats (a killed one shows "overdue")."""
        if obj.status != JobStatus.RUNNING or not obj.worker_id:
            return "-"
        record = WorkerRecord.objects.using(loaded_from(obj)).filter(worker_id=obj.worker_id).first()
        if record is None:
            return "no heartbeat recorded for this worker"
        return heartbeat_state(record.last_seen_at, record.stopped_at, timezone.now())

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> Any:
        """A DEAD or CANCELLED job's errors come right after its summary: they are why one opens it. A job
        of a workflow, or with dependencies or dependents, has a Workflow section after its summary. A
        job a cancel was asked of, or that ended CANCELLED, says by whom and when under its status."""
        fieldsets = list(super().get_fieldsets(request, obj))
        if obj is not None and (obj.cancel_requested_at is not None or obj.status == JobStatus.CANCELLED):
            name, options = fieldsets[0]
            fields = list(options["fields"])
            fields.insert(fields.index("status_badge") + 1, "cancel_display")
            fieldsets[0] = (name, {**options, "fields": fields})
        if obj is not None and (obj.workflow_id is not None or obj.dependency_failure or obj.has_dependents):
            fieldsets = [*fieldsets[:1], WORKFLOW_FIELDSET, *fieldsets[1:]]
        if obj is None or obj.status not in (JobStatus.DEAD, JobStatus.CANCELLED):
            return fieldsets
        errors = [f for f in fieldsets if f[0] == "Errors"]
        rest = [f for f in fieldsets if f[0] != "Errors"]
        return [rest[0], *errors, *rest[1:]]

    @admin.display(description="cancel")
    def cancel_display(self, obj: Job) -> SafeString | str:
        """Who or what cancelled the job (or asked it to stop), and when."""
        asked = time_field(obj.cancel_requested_at) if obj.cancel_requested_at else None
        if obj.status in ACTIVE and asked:
            what = (
                "its task is told (context.cancelled) and the run ends CANCELLED, whatever it returns"
                if obj.status == JobStatus.RUNNING
                else "it ends CANCELLED and never runs"
            )
            return format_html("requested {} by {}: {}", asked, obj.cancelled_by or "unknown", what)
        return format_html("{} at {}", cancel_text(obj), asked) if asked else cancel_text(obj)

    # -- its workflow ----------------------------------------------------------------------------------
    @admin.display(description="workflow")
    def workflow_link(self, obj: Job) -> SafeString | str:
        if obj.workflow_id is None:
            return "-"
        url = reverse(f"{self.admin_site.name}:django_jobq_workflow_change", args=[obj.workflow_id])
        return format_html('<a href="{}" id="jobq-workflow-link">workflow {}</a>', url, obj.workflow_id)

    @admin.display(description="waits for")
    def waits_for(self, obj: Job) -> SafeString | str:
        """The jobs it waits for (struck through: finished), and whether it runs when one fails."""
        edges = Dependency.objects.using(loaded_from(obj)).filter(dependent_id=obj.pk)
        rows = list(edges.order_by("dependency_id").values_list("dependency_id", "resolved")[: MAX_EDGES + 1])
        if not rows:
            return "-"
        policy = {"run": "runs even when one of them fails", "cancel": "cancelled when one of them fails"}
        return format_html(
            '{}{} <span class="jobq-muted">({} unfinished; {})</span>',
            self._job_links([(pk, done) for pk, done in rows[:MAX_EDGES]]),
            " and more" if len(rows) > MAX_EDGES else "",
            obj.waiting_on,
            policy.get(obj.dependency_failure or "cancel", obj.dependency_failure),
        )

    @admin.display(description="needed by")
    def needed_by(self, obj: Job) -> SafeString | str:
        """The jobs that wait for it (jobq_dependency_of)."""
        edges = Dependency.objects.using(loaded_from(obj)).filter(dependency_id=obj.pk)
        ids = list(edges.order_by("dependent_id").values_list("dependent_id", flat=True)[: MAX_EDGES + 1])
        if not ids:
            return "-"
        more = " and more" if len(ids) > MAX_EDGES else ""
        return format_html("{}{}", self._job_links([(pk, False) for pk in ids[:MAX_EDGES]]), more)

    def _job_links(self, jobs: list[tuple[int, bool]]) -> SafeString:
        return format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            (
                (
                    reverse(f"{self.admin_site.name}:django_jobq_job_change", args=[pk]),
                    format_html("<s>{}</s>", pk) if done else pk,
                )
                for pk, done in jobs
            ),
        )

    @admin.display(description="payload")
    def payload_pretty(self, obj: Job) -> SafeString:
        return pretty_json(obj.payload)

    @admin.display(description="result")
    def result_pretty(self, obj: Job) -> SafeString | str:
        return "-" if obj.result is None else pretty_json(obj.result)

    @admin.display(description="last error")
    def last_error_pretty(self, obj: Job) -> SafeString | str:
        """The last error in full; for a job cancelled while it ran, the cancel in words, the traceback
        its run ended with folded under it."""
        if not obj.last_error:
            return "-"
        text = error_text(obj)
        if text == obj.last_error:
            return format_html('<pre class="jobq-error">{}</pre>', obj.last_error)
        return format_html(
            '<p id="jobq-cancel-reason">{}</p><details><summary>how its run ended</summary>'
            '<pre class="jobq-error">{}</pre></details>',
            text,
            obj.last_error,
        )

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
                    time_field(entry.get("at")),
                    entry.get("worker") or "-",
                    first_line(str(entry.get("error", ""))),
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
