"""What every page of the admin shares: per-request caching, the admin log, formatting."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import django
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import dateformat, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import dashboard
from ..conf import jobq_settings
from ..replica import console_alias as console_alias  # re-exported for the admin's pages
from ..status import ACTIVE, CANCELLED

T = TypeVar("T")

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin


class OnQueueDatabase(_ModelAdmin):
    """A ModelAdmin whose pages read the read alias (a replica, when one is configured) and whose
    actions and forms read and write JOBQ["DATABASE"], with or without a router (Django's "multiple
    databases in the admin" recipe): see console_alias."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(console_alias(request))

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.save(using=jobq_settings().database)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        obj.delete(using=jobq_settings().database)


# -- shared helpers ----------------------------------------------------------------------------------------
def loaded_from(obj: models.Model) -> str:
    """The alias ``obj`` was read from (console_alias's, for a row of a page): its related rows too."""
    return obj._state.db or jobq_settings().database


def per_request(request: HttpRequest, key: str, compute: Callable[[], T]) -> T:
    """Compute once per request (the list filters and the dead-letter groups share their queries)."""
    cache: dict[str, Any] = request.__dict__.setdefault("_jobq_cache", {})
    if key not in cache:
        cache[key] = compute()
    return cache[key]  # type: ignore[no-any-return]


def log(request: HttpRequest, jobs: Iterable[models.Model], flag: int, message: str = "") -> None:
    """Record in the admin log that the request's user did ``flag`` to each of ``jobs`` (or other rows)."""
    user_id = request.user.pk
    assert user_id is not None  # admin views require a logged-in staff user
    LogEntry.objects.log_actions(
        user_id=user_id, queryset=list(jobs), action_flag=flag, change_message=message
    )


def log_action(
    request: HttpRequest,
    *,
    model: type[models.Model],
    object_id: Any,
    object_repr: str,
    flag: int,
    message: str,
) -> None:
    """Record one admin log entry for an action over many rows (``object_id`` None) or one."""
    user_id = request.user.pk
    assert user_id is not None  # admin views require a logged-in staff user
    LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(model),
        object_id=None if object_id is None else str(object_id),
        object_repr=object_repr[:200],
        action_flag=flag,
        change_message=message,
    )


def first_line(text: str | None, limit: int = 120) -> str:
    if not text:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines and lines[0].startswith("Traceback") else (lines[0] if lines else "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="jobq-json">{}</pre>', text)


def progress_bar(progress: Any, *, compact: bool = False) -> SafeString | str:
    """A job's {"done": n, "total": m} as an HTML <progress> bar with its figures; "-" when there is none.

    ``compact`` (the job list) shows only the percentage next to the bar, the figures on hover.
    """
    if not isinstance(progress, dict):
        return "-"
    done, total = progress.get("done"), progress.get("total")
    if not isinstance(done, int | float) or isinstance(done, bool):
        return format_html("<code>{}</code>", json.dumps(progress))
    if isinstance(total, int | float) and not isinstance(total, bool) and total > 0:
        percent = max(0, min(100, round(100 * done / total)))
        figures = f"{_number(done)} / {_number(total)}"
        if compact:
            return format_html(
                '<span title="{}"><progress class="jobq-progress" value="{}" max="{}">{}%</progress> {}%</span>',
                figures,
                done,
                total,
                percent,
                percent,
            )
        return format_html(
            '<progress class="jobq-progress" value="{}" max="{}">{}%</progress> {} ({}%)',
            done,
            total,
            percent,
            figures,
            percent,
        )
    return format_html('<progress class="jobq-progress">…</progress> {} done', _number(done))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def ago(moment: dt.datetime | None, now: dt.datetime) -> str:
    return "-" if moment is None else dashboard.format_seconds((now - moment).total_seconds())


OVERDUE_HEARTBEATS = 2  # a worker whose last heartbeat is older than this many intervals is "overdue"


def heartbeat_state(last_seen_at: dt.datetime, stopped_at: dt.datetime | None, now: dt.datetime) -> str:
    """A worker's heartbeat in words: "alive, last beat 3s ago", "overdue: last beat 47s ago (4 beats
    missed)" once OVERDUE_HEARTBEATS beats were missed (killed, hung or cut off: its jobs come back
    when their leases expire), or "stopped 2m05s ago"."""
    if stopped_at is not None:
        return f"stopped {ago(stopped_at, now)} ago"
    age = max(0.0, (now - last_seen_at).total_seconds())
    interval = jobq_settings().heartbeat_seconds
    missed = int(age // interval)
    if missed >= OVERDUE_HEARTBEATS:
        return f"overdue: last beat {dashboard.format_seconds(age)} ago ({missed} beats missed)"
    return f"alive, last beat {dashboard.format_seconds(age)} ago"


# -- times: one format everywhere ------------------------------------------------------------------------
# Tables show how long ago (or how soon) with the exact time on hover; a job's page shows the exact time
# with how long ago after it. The exact time is always EXACT_FORMAT in the current time zone.
EXACT_FORMAT = "Y-m-d H:i:s T"


def exact_time(moment: dt.datetime) -> str:
    """``2026-03-01 09:01:00 UTC``: the moment in the current time zone."""
    return dateformat.format(timezone.localtime(moment), EXACT_FORMAT)


def relative_time(moment: dt.datetime, now: dt.datetime | None = None) -> str:
    """``3m05s ago`` or ``in 20s``."""
    seconds = (moment - (now or timezone.now())).total_seconds()
    return (
        f"in {dashboard.format_seconds(seconds)}"
        if seconds > 0
        else f"{dashboard.format_seconds(-seconds)} ago"
    )


def time_cell(moment: dt.datetime | None, now: dt.datetime | None = None) -> SafeString | str:
    """For a table: the relative time, the exact one on hover."""
    if moment is None:
        return "-"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        moment.isoformat(timespec="seconds"),
        exact_time(moment),
        relative_time(moment, now),
    )


def time_field(moment: object, now: dt.datetime | None = None) -> SafeString | str:
    """For a job's page: the exact time, then the relative one; an ISO string (the error history) is parsed."""
    if isinstance(moment, str):
        try:
            moment = dt.datetime.fromisoformat(moment)
        except ValueError:
            return str(moment)
    if not isinstance(moment, dt.datetime):
        return "-" if moment is None else str(moment)
    return format_html(
        '<time datetime="{}">{}</time> <span class="jobq-muted">({})</span>',
        moment.isoformat(timespec="seconds"),
        exact_time(moment),
        relative_time(moment, now),
    )


def breadcrumbs(*crumbs: tuple[str, str | None]) -> dict[str, Any]:
    """Context for admin/django_jobq/breadcrumbs.html: (label, url) pairs, the last one the page itself.

    The markup follows the running Django's admin: an <ol> of <li> from Django 6.1, a <div> with
    separators before it, so each version's own stylesheet applies.
    """
    return {"jobq_crumbs": list(crumbs), "jobq_breadcrumbs_list": django.VERSION >= (6, 1)}


def cancel_asked(job: Any) -> bool:
    """A job not finished yet that was asked to stop (a RUNNING one runs until its task sees it)."""
    return job.status in ACTIVE and job.cancel_requested_at is not None


def cancel_text(job: Any) -> str:
    """Why a CANCELLED job ended, in words, from who asked for the cancel (cancelled_by)."""
    by = job.cancelled_by
    if by is None:
        return "discarded by its task (Discard, discard_on)"
    if by.startswith("dependency:"):
        return f"cancelled: job {by.removeprefix('dependency:')}, which it waited for, did not succeed"
    return f"cancelled by {by}"


def error_text(job: Any) -> str | None:
    """The last error to show: for a job someone cancelled, the cancel in words (who asked) rather
    than the text its run ended with (the Cancelled reason, or whatever the task raised then)."""
    if job.status == CANCELLED and job.cancelled_by is not None and job.last_error:
        return cancel_text(job)
    return job.last_error  # type: ignore[no-any-return]


def lanes_text(lanes: dict[str, int]) -> str:
    return ", ".join(f"{queue}: {slots}" for queue, slots in sorted(lanes.items())) or "-"
