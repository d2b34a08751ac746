"""Cancelling from the admin: the job list's "cancel" action and the Cancel button of a job's page
(``<id>/cancel/``). PENDING and WAITING jobs end CANCELLED, RUNNING ones are asked to stop, through the
manager's guarded statement (Job.objects.cancel_many); both need django_jobq.cancel_job and are logged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse

from ..conf import jobq_settings
from ..managers.control import MAX_CANCEL_IDS
from ..models import Job
from ..status import ACTIVE
from .common import OnQueueDatabase, log

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    _JobModelAdmin = admin.ModelAdmin[Job]
else:  # reads and writes on JOBQ["DATABASE"]
    _JobModelAdmin = OnQueueDatabase


def cancellable(job: Job) -> bool:
    """Whether a cancel would change ``job``: it is not finished, and no cancel was asked of it yet."""
    return job.status in ACTIVE and job.cancel_requested_at is None


class CancelActions(_JobModelAdmin):
    def has_cancel_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_jobq.cancel_job")

    @admin.action(permissions=["cancel"], description="Cancel selected jobs (running ones are asked to stop)")
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        ids = list(queryset.filter(status__in=ACTIVE).values_list("pk", flat=True)[: MAX_CANCEL_IDS + 1])
        if len(ids) > MAX_CANCEL_IDS:
            self.message_user(request, f"Select at most {MAX_CANCEL_IDS} pending or running jobs at once; "
                              "nothing was cancelled.", messages.ERROR)  # fmt: skip
            return
        self._cancel(request, ids)

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
