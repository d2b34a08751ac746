"""The requeue actions (confirmed, actions.py) and one job's requeue page: DEAD (and CANCELLED) jobs
back to PENDING through the manager's guarded statement."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.text import capfirst

from ..conf import jobq_settings
from ..models import BulkAction, Job
from ..status import JobStatus
from .actions import ConfirmedActions
from .common import breadcrumbs, log


class RequeueForm(forms.Form):
    run_at = forms.DateTimeField(
        required=False,
        label="Run at",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    priority = forms.IntegerField(
        required=False,
        min_value=-32768,
        max_value=32767,
        help_text="Empty: keep each job's priority. Lower runs first.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        zone = timezone.get_current_timezone_name()
        self.fields["run_at"].help_text = f"Empty: now. In {zone} time."


class RequeueActions(ConfirmedActions):
    """The "requeue" actions of a job list, and the one-job requeue page (``<id>/requeue/``)."""

    def has_requeue_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("django_jobq.requeue_job")

    @admin.action(permissions=["requeue"], description="Requeue selected dead jobs now")
    def requeue_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        return self.confirm_action(request, queryset, BulkAction.Kind.REQUEUE)

    @admin.action(permissions=["requeue"], description="Requeue selected dead jobs at a time / priority…")
    def requeue_with_options(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        form = RequeueForm(request.POST if request.POST.get("post") == "yes" else None)
        return self.confirm_action(request, queryset, BulkAction.Kind.REQUEUE, form=form)

    def requeue_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """One job's requeue: GET shows the form, POST requeues (if it is still DEAD)."""
        if not (self.has_view_permission(request) and self.has_requeue_permission(request)):
            raise PermissionDenied
        job = self.get_object(request, object_id)
        if job is None:
            raise Http404(f"No job {object_id!r} here.")
        # Back to the job's page in the job list: once requeued it is no longer a dead letter.
        change_url = reverse("admin:django_jobq_job_change", args=[job.pk])
        form = RequeueForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            self._requeue(request, [job.pk], **form.cleaned_data)
            return HttpResponseRedirect(change_url)
        if job.status not in (JobStatus.DEAD, JobStatus.CANCELLED):
            self.message_user(
                request, f"{job} is neither DEAD nor CANCELLED: only those can be requeued.", messages.WARNING
            )
        return self._requeue_page(request, form, job)

    def _requeue(
        self,
        request: HttpRequest,
        ids: Sequence[int],
        run_at: dt.datetime | None = None,
        priority: int | None = None,
    ) -> list[int]:
        """Requeue through the manager's guarded statement; log and report what it changed."""
        done = Job.objects.requeue_many(ids, run_at=run_at, priority=priority)
        if done:
            message = "Requeued (-> PENDING)"
            if run_at is not None:
                message += f", to run at {run_at.isoformat(timespec='seconds')}"
            if priority is not None:
                message += f", priority {priority}"
            jobs = (
                Job.objects.using(jobq_settings().database).filter(pk__in=done).only("id", "task", "status")
            )
            log(request, jobs, CHANGE, message)
            self.message_user(request, f"Requeued {len(done)} dead job(s).", messages.SUCCESS)
        refused = len(ids) - len(done)
        if refused:
            self.message_user(
                request,
                f"{refused} job(s) left unchanged: only DEAD jobs are requeued, and not while another "
                "active job holds the same dedupe key.",
                messages.WARNING,
            )
        return done

    def _requeue_page(self, request: HttpRequest, form: RequeueForm, job: Job) -> TemplateResponse:
        opts = self.opts
        context = {
            **self.admin_site.each_context(request),
            **breadcrumbs(
                (
                    str(opts.app_config.verbose_name),
                    reverse("admin:app_list", kwargs={"app_label": opts.app_label}),
                ),
                (
                    str(capfirst(opts.verbose_name_plural)),
                    reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
                ),
                (str(job), reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[job.pk])),
                ("Requeue", None),
            ),
            "title": "Requeue dead jobs",
            "opts": self.opts,
            "form": form,
            "jobs": [job],
        }
        return TemplateResponse(request, "admin/django_jobq/requeue.html", context)
