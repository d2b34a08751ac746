"""The job lists' actions (requeue, cancel, delete): a confirmation page with the exact number of jobs
the action will change, then the action on exactly that selection.

Jobs ticked on the page are changed in the request. "Select all matching" becomes a bulk action
(django_jobq.console.bulk): the list's filter is turned into a Selection bounded by the newest job
(refused if the filter is one it cannot rebuild), counted exactly, signed into the confirmation page,
and once confirmed run by a job of the queue in batches. Either way the admin log gets one entry per
action, with the filter and the count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import CHANGE, DELETION
from django.core import signing
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import capfirst

from ..conf import home_database, jobq_settings
from ..console import bulk
from ..console.selection import Selection
from ..exceptions import JobqError
from ..models import BulkAction, DeadJob, Job
from .common import OnQueueDatabase, breadcrumbs, log_action

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    _JobModelAdmin = admin.ModelAdmin[Job]
else:  # reads and writes on JOBQ["DATABASE"]
    _JobModelAdmin = OnQueueDatabase

SIGNING_SALT = "django_jobq.console.selection"
CONFIRM_MAX_AGE = 3600  # seconds a "select all" confirmation page stays valid
SHOWN = 20  # jobs listed by name on a confirmation page of ticked jobs
# What each action does, for its confirmation page, its messages and the admin log.
VERBS: dict[str, tuple[str, str]] = {
    BulkAction.Kind.REQUEUE: ("Requeue", "Requeued (-> PENDING)"),
    BulkAction.Kind.CANCEL: ("Cancel", "Cancelled"),
    BulkAction.Kind.DELETE: ("Delete", "Deleted"),
}
NOTES: dict[str, str] = {
    BulkAction.Kind.REQUEUE: "DEAD and CANCELLED jobs go back to PENDING with their attempts reset; their error "
    "history is kept. A job no longer in such a status, or whose dedupe key another job holds, "
    "is left as it is.",
    BulkAction.Kind.CANCEL: "PENDING and WAITING jobs end CANCELLED at once; RUNNING ones are asked to stop and "
    "end CANCELLED when their run ends. Finished jobs are left as they are.",
    BulkAction.Kind.DELETE: "The jobs are deleted for good; a RUNNING job is never deleted.",
}


class ConfirmedActions(_JobModelAdmin):
    """confirm_action: what every job-list action calls."""

    def confirm_action(
        self, request: HttpRequest, queryset: QuerySet[Any], kind: str, form: forms.Form | None = None
    ) -> HttpResponse | None:
        """The confirmation page of ``kind`` over the request's selection, or, once confirmed (a valid
        ``form`` too, if any), the action itself (None: back to the list)."""
        confirmed = request.POST.get("post") == "yes" and (form is None or form.is_valid())
        options = _options(kind, form) if confirmed and form is not None else {}
        if request.POST.get("select_across") == "1":
            return self._all_matching(request, kind, form, options, confirmed)
        ids = list(queryset.values_list("pk", flat=True))
        jobs = bulk.eligible(Job.objects.using(jobq_settings().database).filter(pk__in=ids), kind)
        chosen = list(jobs.order_by("id").values_list("pk", flat=True))
        if not confirmed:
            named = Job.objects.using(jobq_settings().database).filter(pk__in=chosen[:SHOWN]).order_by("id")
            return self._page(request, kind, form, len(chosen), named=list(named), token=None)
        by = _by(request)
        applied = bulk.apply(kind, chosen, options, by)
        self._report(request, kind, applied, len(ids), chosen)
        return None

    def _all_matching(
        self,
        request: HttpRequest,
        kind: str,
        form: forms.Form | None,
        options: dict[str, Any],
        confirmed: bool,
    ) -> HttpResponse | None:
        database = jobq_settings().database
        if database != home_database():  # its BulkAction and its job are the home database's
            self.message_user(
                request,
                f"Nothing was done: an action over every matching job runs on {home_database()!r} only; "
                f"on {database!r}, select the jobs of a page.",
                messages.ERROR,
            )
            return None
        try:
            if confirmed:
                signed = signing.loads(
                    request.POST.get("jobq_selection", ""), salt=SIGNING_SALT, max_age=CONFIRM_MAX_AGE
                )
                if signed.get("kind") != kind:
                    raise signing.BadSignature("another action's selection")
                selection, total = Selection.from_dict(signed["selection"]), int(signed["count"])
            else:
                selection = Selection.from_query(
                    dict(request.GET.lists()), dead=self.model is DeadJob, database=database
                )
                total = bulk.eligible(selection.jobs(database), kind).count()
        except JobqError as exc:
            self.message_user(request, f"Nothing was done: {exc}", messages.ERROR)
            return None
        except (signing.BadSignature, KeyError, TypeError, ValueError):
            self.message_user(
                request, "Nothing was done: the confirmation has expired; select again.", messages.ERROR
            )
            return None
        if not confirmed:
            token = signing.dumps(
                {"kind": kind, "selection": selection.as_dict(), "count": total}, salt=SIGNING_SALT
            )
            return self._page(request, kind, form, total, named=[], token=token, selection=selection)
        if kind == BulkAction.Kind.REQUEUE:
            options["spread"] = jobq_settings().bulk_requeue_spread_seconds
        query = request.GET.urlencode()
        try:  # the queue may refuse the bulk job (JOBQ["QUEUES"][…]["MAX_DEPTH"])
            action = bulk.start(kind, selection, total, options=options, by=_by(request), query=query)
        except JobqError as exc:
            self.message_user(request, f"Nothing was done: {exc}", messages.ERROR)
            return None
        verb = VERBS[kind][0].lower()
        log_action(
            request,
            model=BulkAction,
            object_id=action.pk,
            object_repr=str(action),
            flag=DELETION if kind == BulkAction.Kind.DELETE else CHANGE,
            message=f"Bulk {verb} of {total} job(s) matching ?{query} ({selection.describe()}), run by job {action.job_id}",
        )
        page = reverse(f"{self.admin_site.name}:django_jobq_bulkaction_change", args=[action.pk])
        self.message_user(
            request,
            format_html(
                'Bulk {} of {} job(s) started in the background: <a href="{}">its progress</a>.',
                verb,
                total,
                page,
            ),
            messages.SUCCESS,
        )
        return None

    def _report(
        self, request: HttpRequest, kind: str, applied: bulk.Applied, selected: int, chosen: list[int]
    ) -> None:
        """One admin log entry for the action on ticked jobs, and what it did in words."""
        done = VERBS[kind][1]
        if applied.changed:
            ids = ", ".join(map(str, chosen[:200])) + (", …" if len(chosen) > 200 else "")
            one = len(chosen) == 1
            log_action(
                request,
                model=Job,
                object_id=chosen[0] if one else None,
                object_repr=f"job {chosen[0]}" if one else f"{applied.changed} jobs",
                flag=DELETION if kind == BulkAction.Kind.DELETE else CHANGE,
                message=f"{done}: {applied.changed} of {len(chosen)} job(s) (ids {ids}); list ?{request.GET.urlencode()}",
            )
        if kind == BulkAction.Kind.CANCEL:
            pending = applied.changed - applied.asked
            text = f"Cancelled {pending} pending job(s); asked {applied.asked} running job(s) to stop."
        else:
            text = f"{done.split(' ')[0]} {applied.changed} job(s)."
        self.message_user(request, text, messages.SUCCESS if applied.changed else messages.WARNING)
        left = selected - applied.changed
        if left:
            self.message_user(
                request,
                f"{left} job(s) left unchanged: not in a status this action changes, changed or locked "
                "at this moment, or (requeue) their dedupe key is held by another job.",
                messages.WARNING,
            )

    def _page(
        self,
        request: HttpRequest,
        kind: str,
        form: forms.Form | None,
        count: int,
        *,
        named: list[Job],
        token: str | None,
        selection: Selection | None = None,
    ) -> TemplateResponse:
        opts = self.opts
        verb = VERBS[kind][0]
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
                (verb, None),
            ),
            "title": f"{verb} {count} job{'s' if count != 1 else ''}?",
            "opts": opts,
            "verb": verb,
            "count": count,
            "note": NOTES[kind],
            "named": named,
            "more": count - len(named),
            "selection": selection.describe() if selection is not None else None,
            "background": token is not None,
            "batch": jobq_settings().bulk_batch,
            "spread": jobq_settings().bulk_requeue_spread_seconds
            if kind == BulkAction.Kind.REQUEUE
            else None,
            "form": form,
            "token": token,
            "action": request.POST.get("action", ""),
            "select_across": request.POST.get("select_across", "0"),
            "selected": request.POST.getlist(ACTION_CHECKBOX_NAME),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/django_jobq/confirm_action.html", context)


def _options(kind: str, form: forms.Form) -> dict[str, Any]:
    """A requeue form's run_at (ISO text: a bulk action stores it) and priority; None: kept."""
    run_at, priority = form.cleaned_data.get("run_at"), form.cleaned_data.get("priority")
    return {"run_at": None if run_at is None else run_at.isoformat(), "priority": priority}


def _by(request: HttpRequest) -> str:
    user = request.user.get_username() or f"user {request.user.pk}"
    return f"admin {user}"[:200]
