"""The queue dashboard page: counts per queue and status, lag, throughput, workers (one snapshot), which
queues are paused, with Pause / Resume buttons for those allowed (admin.queues), and the most recent
unfinished workflows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import dashboard
from ..conf import jobq_settings
from ..dashboard.workflows import WORKFLOWS_LIMIT
from ..shards import every_database, working_database
from . import database_reads
from .common import breadcrumbs, console_alias, exact_time, lanes_text, time_cell
from .databases import database_query, label
from .queues import may_pause

if TYPE_CHECKING:
    from ..models import Job


def dashboard_view(model_admin: admin.ModelAdmin[Job], request: HttpRequest) -> HttpResponseBase:
    """The dashboard, for whoever may view jobs."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    alias = console_alias(request)
    snap = dashboard.snapshot(using=alias)
    databases = _databases(snap)
    paused = {p.queue: p for p in snap.paused}
    refresh = request.GET.get("refresh", "")
    opts = model_admin.opts
    app_url = reverse("admin:app_list", kwargs={"app_label": opts.app_label})
    context = {
        **model_admin.admin_site.each_context(request),
        **breadcrumbs((str(opts.app_config.verbose_name), app_url), ("Queue dashboard", None)),
        "title": "Queue dashboard",
        "opts": model_admin.opts,
        "snap": snap,
        "queues": [_queue_row(q, snap, paused) for q in snap.queues],
        "total": _queue_row(snap.total, snap, paused),
        "can_pause": may_pause(model_admin, request),
        "queue_url": reverse("admin:django_jobq_queue_state"),
        "chart": throughput_chart(snap.throughput),
        "workers": [
            {
                "w": w,
                "seen": time_cell(w.last_seen_at, snap.now),
                "started": time_cell(w.started_at, snap.now),
                "lanes": lanes_text(w.lanes),
            }
            for w in snap.workers
        ],
        "refresh": int(refresh) if refresh.isdigit() and 0 < int(refresh) <= 3600 else None,
        "workflows": [
            {"w": w, "created": time_cell(w.created_at, snap.now), "url": _workflow_url(w.id)}
            for w in dashboard.unfinished_workflows(using=alias)
        ],
        "fair": [{"k": k, "wait": dashboard.format_duration(k.wait)} for k in snap.fair],
        "workflows_url": reverse("admin:django_jobq_workflow_changelist"),
        "workflows_limit": WORKFLOWS_LIMIT,
        "jobs_url": reverse("admin:django_jobq_job_changelist"),
        "dead_url": reverse("admin:django_jobq_deadjob_changelist"),
        **databases,
    }
    return TemplateResponse(request, "admin/django_jobq/dashboard.html", context)


# an outbox entry older than this is shown as late: the reaper relays one once it is two seconds old,
# at each pass, so such an entry waits for a database that is down or for a reaper that does not run
OUTBOX_LATE_SECONDS = 60.0


def _databases(snap: dashboard.Snapshot) -> dict[str, Any]:
    """With JOBQ["SHARDS"]: a row of totals per database (``snap`` is the one the page shows; the
    others read at once, admin/database_reads.py: one that cannot be read, or not in time, is a row
    that says so), their sum, and the query that keeps the page's links on its database. Runs inside
    on_requested_database."""
    if not jobq_settings().shards:
        return {"on_db": "", "db_link": ""}
    shown = working_database()
    others = database_reads.snapshots(alias for alias in every_database() if alias != shown)
    rows: list[dict[str, Any]] = []
    for alias in every_database():
        row: dict[str, Any] = {"alias": alias, "label": label(alias), "selected": alias == shown}
        its = snap if alias == shown else others[alias]
        if isinstance(its, str):
            row["error"] = its
        else:
            row["total"], row["outbox"] = its.total, its.outbox
            if its.outbox is not None and its.outbox.oldest_seconds is not None:
                row["outbox_oldest"] = dashboard.format_duration(its.outbox.oldest_seconds)
                row["outbox_late"] = its.outbox.oldest_seconds > OUTBOX_LATE_SECONDS
        rows.append(row)
    read = [row["total"] for row in rows if "total" in row]
    return {
        "on_db": database_query(),
        "db_link": f"?{database_query()[:-1]}",
        "databases": rows,
        "databases_read": len(read),
        "databases_total": dashboard.total(read),
        "databases_outbox": sum(row["outbox"].jobs for row in rows if row.get("outbox") is not None),
        "selected_label": label(shown),
        "selected_alias": shown,
    }


def _workflow_url(workflow_id: int) -> str:
    return reverse("admin:django_jobq_workflow_change", args=[workflow_id])


def _queue_row(
    q: dashboard.QueueFigures, snap: dashboard.Snapshot, paused: dict[str, dashboard.PausedQueue]
) -> dict[str, Any]:
    done = "?" if q.done is None else (f"≈{q.done}" if snap.done_estimated else str(q.done))
    state = paused.get(q.queue)
    pause = f"paused by {state.by or '?'} since {exact_time(state.since)}" if state else None
    return {"q": q, "lag": dashboard.format_duration(q.lag), "done": done, "pause": pause}


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
                "title": f"{f'{m.ago} min ago' if m.ago else 'last minute'}: {m.done} done, {m.dead} dead"
                + (f", {m.cancelled} cancelled" if m.cancelled else ""),
            }
        )
    return {
        "width": width,
        "height": height,
        "top": top,
        "bars": bars,
        "done": sum(m.done for m in minutes),
        "dead": sum(m.dead for m in minutes),
        "cancelled": sum(m.cancelled for m in minutes),
    }
