"""Cancelling from the admin: the job list's "cancel" action (confirmed, actions.py) and the Cancel
button of a job's page (``<id>/cancel/``). PENDING and WAITING jobs end CANCELLED, RUNNING ones are asked to stop, through the
manager's guarded statement (Job.objects.cancel_many); both need django_jobq.cancel_job and are logged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse

from ..conf import jobq_settings
from ..models import BulkAction, Job
from ..status import ACTIVE
from .actions import ConfirmedActions
from .common import log


def cancellable(job: Job) -> bool:
    """Whether a cancel would change ``job``: it is not finished, and no cancel was asked of it yet."""
    return job.status in ACTIVE and job.cancel_requested_at is None


class CancelActions(ConfirmedActions):
    def has_cancel_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_jobq.cancel_job")

    @admin.action(permissions=["cancel"], description="Cancel selected jobs (running ones are asked to stop)")
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        return self.confirm_action(request, queryset, BulkAction.Kind.CANCEL)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST (the Cancel button of a job's page): cancel that job, as the list's action does; back to
        its page with what happened."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not (self.has_view_permission(request) and self.has_cancel_permission(request)):
            raise PermissionDenied
        job = self.get_object(request, object_id)
        if job is None:
            raise Http404(f"No job {object_id!r} here.")
        self._cancel(request, [job.pk])
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:django_jobq_job_change", args=[job.pk]))

    def _cancel(self, request: HttpRequest, ids: Sequence[int]) -> None:
        user = request.user.get_username() or f"user {request.user.pk}"
        counts = Job.objects.cancel_many(ids=ids, by=f"admin {user}"[:200])
        changed = Job.objects.using(jobq_settings().database).filter(pk__in=ids, cancelled_by__isnull=False)
        log(request, changed.only("id", "task", "status"), CHANGE, "Cancelled")
        text = (
            f"Cancelled {counts.cancelled} pending job(s); asked {counts.requested} running job(s) to stop."
        )
        level = messages.SUCCESS if counts.cancelled or counts.requested else messages.WARNING
        self.message_user(request, text, level)
