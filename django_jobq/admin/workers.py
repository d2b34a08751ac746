"""The workers: one row per worker process, from its heartbeats."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..dashboard.workers import WORKERS_RECENT_SECONDS, SupervisorFigures
from ..models import WorkerRecord
from .common import OnQueueDatabase, exact_time, heartbeat_state, lanes_text, time_cell

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    _WorkerModelAdmin = admin.ModelAdmin[WorkerRecord]
else:  # reads and writes on JOBQ["DATABASE"]
    _WorkerModelAdmin = OnQueueDatabase


class SupervisorFilter(admin.SimpleListFilter):
    """The processes of one supervisor (jobq_worker --processes), among the workers seen lately."""

    title = "supervisor"
    parameter_name = "supervisor"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        since = timezone.now() - dt.timedelta(seconds=WORKERS_RECENT_SECONDS)
        recent = model_admin.get_queryset(request).filter(last_seen_at__gte=since, supervisor__isnull=False)
        states = (SupervisorFigures.of(v) for v in recent.values_list("supervisor", flat=True)[:500])
        return [(name, name) for name in sorted({s.id for s in states if s is not None})]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value():
            return queryset.filter(supervisor__id=self.value())
        return queryset


@admin.register(WorkerRecord)
class WorkerRecordAdmin(_WorkerModelAdmin):
    # Six columns beside the navigation and the filters at 1400 px: the state already says when the
    # last heartbeat was, and the pid goes under the host.
    list_display = ("worker_display", "state", "host_display", "lanes_display", "running", "started")
    list_filter = ("hostname", SupervisorFilter)
    change_list_template = "admin/django_jobq/workerrecord/change_list.html"
    search_fields = ("worker_id", "hostname")
    fields = (
        "worker_id", "hostname", "pid", "lanes", "running", "stuck", "started_at", "last_seen_at", "stopped_at",
        "supervisor_details",
    )  # fmt: skip
    readonly_fields = ("supervisor_details",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="heartbeat", ordering="last_seen_at")
    def state(self, obj: WorkerRecord) -> SafeString:
        """Its heartbeat in words; the exact time of the last one on hover."""
        return format_html(
            '<span title="last heartbeat {}">{}</span>',
            exact_time(obj.last_seen_at),
            heartbeat_state(obj.last_seen_at, obj.stopped_at, timezone.now()),
        )

    @admin.display(description="host (pid)", ordering="hostname")
    def host_display(self, obj: WorkerRecord) -> SafeString:
        return format_html('{}<br><span class="jobq-muted">pid {}</span>', obj.hostname, obj.pid)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: WorkerRecord) -> SafeString | str:
        return time_cell(obj.started_at)

    @admin.display(description="worker (supervisor)", ordering="worker_id")
    def worker_display(self, obj: WorkerRecord) -> SafeString | str:
        """Its id and, under it, its supervisor as last told: pid and host, processes, restarts and
        the last exit."""
        s = SupervisorFigures.of(obj.supervisor)
        if s is None:
            return obj.worker_id
        details = (
            f"supervisor {s.id}, pid {s.pid} on {s.host} since {s.started_at}: {s.processes} process(es), "
            f"{s.started} started, {s.restarts} unplanned exit(s), {s.recycled} recycled"
            + (f"; last exit: {s.last_exit}" if s.last_exit else "")
        )
        return format_html(
            '{}<br><small title="{}">supervisor {}: {} restart(s)</small>',
            obj.worker_id,
            details,
            s.id,
            s.restarts,
        )

    @admin.display(description="supervisor")
    def supervisor_details(self, obj: WorkerRecord) -> str:
        """The worker page's account of its supervisor."""
        s = SupervisorFigures.of(obj.supervisor)
        if s is None:
            return "none (not started by jobq_worker --processes)"
        return (
            f"{s.id}, pid {s.pid} on {s.host} since {s.started_at}: {s.processes} process(es), "
            f"{s.started} started, {s.restarts} unplanned exit(s), {s.recycled} recycled"
            + (f"; last exit: {s.last_exit}" if s.last_exit else "")
        )

    @admin.display(description="lanes")
    def lanes_display(self, obj: WorkerRecord) -> str:
        return lanes_text(obj.lanes if isinstance(obj.lanes, dict) else {})
