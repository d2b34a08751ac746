"""The workers: one row per worker process, from its heartbeats."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone
from django.utils.safestring import SafeString

from ..models import WorkerRecord
from .common import OnQueueDatabase, heartbeat_state, lanes_text, time_cell

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    _WorkerModelAdmin = admin.ModelAdmin[WorkerRecord]
else:  # reads and writes on JOBQ["DATABASE"]
    _WorkerModelAdmin = OnQueueDatabase


@admin.register(WorkerRecord)
class WorkerRecordAdmin(_WorkerModelAdmin):
    list_display = (
        "worker_id",
        "state",
        "hostname",
        "pid",
        "lanes_display",
        "running",
        "started",
        "last_seen",
    )
    list_filter = ("hostname",)
    search_fields = ("worker_id", "hostname")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="state")
    def state(self, obj: WorkerRecord) -> str:
        return heartbeat_state(obj.last_seen_at, obj.stopped_at, timezone.now())

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: WorkerRecord) -> SafeString | str:
        return time_cell(obj.started_at)

    @admin.display(description="last heartbeat", ordering="last_seen_at")
    def last_seen(self, obj: WorkerRecord) -> SafeString | str:
        return time_cell(obj.last_seen_at)

    @admin.display(description="lanes")
    def lanes_display(self, obj: WorkerRecord) -> str:
        return lanes_text(obj.lanes if isinstance(obj.lanes, dict) else {})
