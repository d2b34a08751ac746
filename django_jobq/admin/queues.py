"""The dashboard's Pause / Resume buttons: a POST that pauses or resumes one queue through the manager,
allowed by the ``django_jobq.pause_queue`` permission and recorded in the admin log."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import reverse
from django.utils.http import urlencode

from .. import validation
from ..exceptions import InvalidJob, JobqError
from ..models import Job, QueueState
from ..shards import databases_of_queue, every_database
from .common import log

if TYPE_CHECKING:
    _JobModelAdmin = admin.ModelAdmin[Job]
else:
    _JobModelAdmin = admin.ModelAdmin

logger = logging.getLogger("django_jobq")

ACTIONS = {"pause": ("paused", "pause_queue"), "resume": ("resumed", "resume_queue")}  # -> manager method


def may_pause(model_admin: _JobModelAdmin, request: HttpRequest) -> bool:
    """Whoever may view the dashboard and holds django_jobq.pause_queue (every superuser does)."""
    return model_admin.has_view_permission(request) and request.user.has_perm("django_jobq.pause_queue")


def queue_state_view(model_admin: _JobModelAdmin, request: HttpRequest) -> HttpResponse:
    """POST queue=NAME, action=pause|resume; back to the dashboard with a message."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not may_pause(model_admin, request):
        raise PermissionDenied
    action = request.POST.get("action", "")
    if action not in ACTIONS:
        return HttpResponseBadRequest("action must be pause or resume")
    done, method = ACTIONS[action]
    dashboard_url = reverse("admin:django_jobq_dashboard")
    if (shown := request.POST.get("database")) in every_database():  # back to the database shown
        dashboard_url += "?" + urlencode({"database": shown})
    try:
        queue = validation.queue(request.POST.get("queue", ""))
    except InvalidJob as exc:
        model_admin.message_user(request, f"Not a queue name: {exc}", messages.ERROR)
        return HttpResponseRedirect(dashboard_url)
    user = request.user.get_username()
    try:
        changed = getattr(Job.objects, method)(queue, by=user)
    except (JobqError, OperationalError, InterfaceError) as exc:  # a database of the queue is down
        model_admin.message_user(request, f"Queue {queue}: {exc}", messages.ERROR)
        return HttpResponseRedirect(dashboard_url)
    if not changed:
        model_admin.message_user(request, f"Queue {queue} was already {done}.", messages.WARNING)
        return HttpResponseRedirect(dashboard_url)
    logger.info("queue %s %s by %s (admin)", queue, done, user)
    for alias in databases_of_queue(queue):  # its state is kept on each of its databases
        log(request, QueueState.objects.using(alias).filter(name=queue), CHANGE, f"Queue {done}")
    model_admin.message_user(request, f"Queue {queue} {done}.", messages.SUCCESS)
    return HttpResponseRedirect(dashboard_url)
