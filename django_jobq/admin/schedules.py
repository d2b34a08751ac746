"""Schedules: the list with each next run in the schedule's zone and in UTC, enable / disable, and
"run now" (one job at once, next_run_at untouched), allowed by django_jobq.run_schedule and logged.

Schedules from JOBQ["SCHEDULES"] are shown read-only: the scheduler's next start-up would overwrite
an edit (set "ENABLED": False in the settings to stop one)."""

from __future__ import annotations

import datetime as dt
import logging
import zoneinfo
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from .. import ticks
from ..conf import jobq_settings
from ..exceptions import JobqError
from ..models import Schedule, ScheduleSource
from ..scheduler import run_now
from .common import OnQueueDatabase, log, time_cell, time_field

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    _ScheduleModelAdmin = admin.ModelAdmin[Schedule]
else:  # reads and writes on JOBQ["DATABASE"]
    _ScheduleModelAdmin = OnQueueDatabase

logger = logging.getLogger("django_jobq")

RUN_PERMISSION = "django_jobq.run_schedule"
# Written by the scheduler and the settings sync; shown read-only (the times with their zones).
OWNED = ("next_run_field", "last_tick_field", "source")


def zone_of(schedule: Schedule) -> str:
    """The zone the schedule's wall clock is read in (its own, JOBQ["TIMEZONE"], TIME_ZONE)."""
    return ticks.zone_for(schedule.timezone, jobq_settings().timezone)


@admin.register(Schedule)
class ScheduleAdmin(_ScheduleModelAdmin):
    # the zone under the rule and UTC under the local time: 1,400 px hold every column
    list_display = ("name", "task_display", "spec_display", "enabled_display", "next_run", "last_tick")
    list_filter = ("enabled", "source")
    search_fields = ("name", "task")
    actions = ("enable_schedules", "disable_schedules", "run_schedules_now")
    fields = (
        "name", "task", "payload", "queue", "priority", "cron", "at", "timezone", "missed", "enabled",
        *OWNED,
    )  # fmt: skip

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        if obj is not None and obj.source == ScheduleSource.SETTINGS:
            return self.fields
        return OWNED

    def has_change_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        """Nobody edits a schedule of JOBQ["SCHEDULES"] here: its page is a view, without Save buttons."""
        return super().has_change_permission(request, obj) and (
            obj is None or obj.source != ScheduleSource.SETTINGS
        )

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        return super().has_delete_permission(request, obj) and (
            obj is None or obj.source != ScheduleSource.SETTINGS or not obj.enabled
        )

    def has_run_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request) and request.user.has_perm(RUN_PERMISSION)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        if not change:
            obj.source = ScheduleSource.ADMIN
        super().save_model(request, obj, form, change)

    # -- columns ---------------------------------------------------------------------------------------
    @admin.display(description="task", ordering="task")
    def task_display(self, obj: Schedule) -> SafeString:
        return _breakable(obj.task, ".")

    @admin.display(description="when (zone)")
    def spec_display(self, obj: Schedule) -> SafeString:
        rule = f"daily at {obj.at}" if obj.at else obj.spec
        zone = obj.timezone or f"{zone_of(obj)} (default)"
        return format_html('{}<br><span class="jobq-muted">{}</span>', rule, _breakable(zone, "/"))

    @admin.display(description="state (source)", ordering="enabled")
    def enabled_display(self, obj: Schedule) -> SafeString:
        state = (
            mark_safe('<span class="jobq-status jobq-done">enabled</span>')
            if obj.enabled
            else mark_safe('<span class="jobq-status jobq-cancelled">disabled</span>')
        )
        return format_html('{}<br><span class="jobq-muted">{}</span>', state, obj.get_source_display())

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, obj: Schedule) -> SafeString | str:
        if obj.next_run_at is None:
            return "-"
        return format_html(
            '{}<br><span class="jobq-muted">{}</span>',
            _in_zone(obj.next_run_at, zone_of(obj)),
            _in_zone(obj.next_run_at, "UTC"),
        )

    @admin.display(description="last tick", ordering="last_tick_at")
    def last_tick(self, obj: Schedule) -> SafeString | str:
        return time_cell(obj.last_tick_at)

    # -- a schedule's page -----------------------------------------------------------------------------
    @admin.display(description="next run")
    def next_run_field(self, obj: Schedule) -> SafeString | str:
        """As in the list: in the schedule's zone (named), then in UTC."""
        if obj.next_run_at is None:
            return "-"
        zone = zone_of(obj)
        return format_html(
            '{} <span class="jobq-muted">({})</span><br>{}',
            _in_zone(obj.next_run_at, zone),
            zone,
            _in_zone(obj.next_run_at, "UTC"),
        )

    @admin.display(description="last tick")
    def last_tick_field(self, obj: Schedule) -> SafeString | str:
        return time_field(obj.last_tick_at)

    def get_list_display(self, request: HttpRequest) -> Any:
        """With a "Run now" button per row, under the last tick, for those who may run schedules. The
        button submits the changelist's own form (its CSRF token included) to the run view: no form
        nested in a form."""
        if not self.has_run_permission(request):
            return self.list_display
        return (*self.list_display[:-1], "last_tick_and_run")

    @admin.display(description="last tick", ordering="last_tick_at")
    def last_tick_and_run(self, obj: Schedule) -> SafeString:
        return format_html(
            '{}<br><button type="submit" class="button" formaction="{}" formmethod="post">Run now</button>',
            time_cell(obj.last_tick_at),
            reverse("admin:django_jobq_schedule_run", args=[obj.pk]),
        )

    # -- enable / disable ------------------------------------------------------------------------------
    @admin.action(description="Enable selected schedules (from their next tick)", permissions=["change"])
    def enable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, False)

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet[Schedule], enabled: bool) -> None:
        changed, refused = [], []
        for schedule in queryset:
            if schedule.source == ScheduleSource.SETTINGS:
                refused.append(schedule.name)
            elif schedule.enabled != enabled:
                schedule.enabled = enabled
                schedule.save(
                    using=jobq_settings().database
                )  # clears next_run_at: re-enabled, it starts from its next tick
                changed.append(schedule)
        word = "enabled" if enabled else "disabled"
        if changed:
            log(request, changed, CHANGE, f"Schedule {word}")
            self.message_user(request, f"{len(changed)} schedule(s) {word}.", messages.SUCCESS)
        if refused:
            self.message_user(
                request,
                f'Not changed (defined in JOBQ["SCHEDULES"]; set ENABLED there): {", ".join(refused)}',
                messages.WARNING,
            )

    # -- run now ---------------------------------------------------------------------------------------
    @admin.action(description="Run selected schedules now", permissions=["run"])
    def run_schedules_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            self._run(request, schedule)

    def get_urls(self) -> list[URLPattern]:
        run = path(
            "<int:schedule_id>/run/",
            self.admin_site.admin_view(self.run_view),
            name="django_jobq_schedule_run",
        )
        return [run, *super().get_urls()]

    def run_view(self, request: HttpRequest, schedule_id: int) -> HttpResponse:
        """POST: enqueue one job of the schedule now; back to the list with a message."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_run_permission(request):
            raise PermissionDenied
        self._run(
            request, get_object_or_404(Schedule.objects.using(jobq_settings().database), pk=schedule_id)
        )
        return HttpResponseRedirect(reverse("admin:django_jobq_schedule_changelist"))

    def _run(self, request: HttpRequest, schedule: Schedule) -> None:
        try:
            job_id = run_now(schedule)
        except JobqError as exc:
            self.message_user(request, f"{schedule.name}: not run: {exc}", messages.ERROR)
            return
        if job_id is None:
            self.message_user(request, f"{schedule.name} was already run this second.", messages.WARNING)
            return
        user = request.user.get_username()
        logger.info("schedule %s run now by %s (admin): job %s", schedule.name, user, job_id)
        log(request, [schedule], CHANGE, f"Run now: job {job_id}")
        self.message_user(request, f"{schedule.name}: job {job_id} enqueued.", messages.SUCCESS)


def _breakable(text: str, separator: str) -> SafeString:
    """``text`` with a line break allowed after each ``separator`` (America/<wbr>Argentina/<wbr>…), so
    a long task or zone name wraps in a narrow column instead of widening the table."""
    return format_html_join(mark_safe(f"{separator}<wbr>"), "{}", ((part,) for part in text.split(separator)))


def _in_zone(moment: dt.datetime | None, zone: str) -> str:
    if moment is None:
        return "-"
    try:
        local = moment.astimezone(zoneinfo.ZoneInfo(zone))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return moment.isoformat()
    return local.strftime("%Y-%m-%d %H:%M %Z")
