"""The "cancel" action of the job list: PENDING and WAITING jobs end CANCELLED, RUNNING ones are asked
to stop, through the manager's guarded statement (Job.objects.cancel_many)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.db.models import QuerySet
from django.http import HttpRequest

from ..conf import jobq_settings
from ..managers.control import MAX_CANCEL_IDS
from ..models import Job
from ..status import ACTIVE
from .common import OnQueueDatabase, log

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    _JobModelAdmin = admin.ModelAdmin[Job]
else:  # reads and writes on JOBQ["DATABASE"]
    _JobModelAdmin = OnQueueDatabase


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
        user = request.user.get_username() or f"user {request.user.pk}"
        counts = Job.objects.cancel_many(ids=ids, by=f"admin {user}"[:200])
        changed = Job.objects.using(jobq_settings().database).filter(pk__in=ids, cancelled_by__isnull=False)
        log(request, changed.only("id", "task", "status"), CHANGE, "Cancelled")
        text = (
            f"Cancelled {counts.cancelled} pending job(s); asked {counts.requested} running job(s) to stop."
        )
        level = messages.SUCCESS if counts.cancelled or counts.requested else messages.WARNING
        self.message_user(request, text, level)
