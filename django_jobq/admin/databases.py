"""The console over several databases (JOBQ["SHARDS"]): each page of jobs, dead letters, workflows
and the dashboard shows one database at a time, chosen by ``?database=ALIAS`` (the list filter "By
database"; a job's or workflow's own pages by the database its id names), and runs wholly on it:
its lists, counts, filters and actions (django_jobq.conf.on_database; the router sends jobq's
models there). A database that cannot be read answers a page that says so, never a server error."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseBase
from django.template.response import TemplateResponse
from django.urls import URLPattern

from ..conf import home_database, jobq_settings, on_database
from ..console.databases import PARAMETER
from ..console.databases import database_query as database_query  # for the pages' links
from ..console.search import WORKFLOW_PREFIX
from ..exceptions import UnknownShard
from ..shards import database_of_job, every_database, shard_number

if TYPE_CHECKING:  # ModelAdmin is generic for the type checker only
    from django.contrib.admin.filters import _ListFilterChoices

    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin

logger = logging.getLogger("django_jobq")


def requested_database(request: HttpRequest, object_id: str | None = None) -> str:
    """The database a console request works on: the one ``object_id`` (a job's or workflow's id)
    names, else ``?database=``, else the one the id searched for names (``?q=ID``, ``?q=workflow:ID``,
    ``?workflow=ID``), else JOBQ["DATABASE"]. An alias that is not one of jobq's databases is
    ignored."""
    if object_id is not None:
        return _database_named_by(object_id)
    asked = request.GET.get(PARAMETER)
    if asked in every_database():
        return str(asked)
    term = request.GET.get("q", "").strip()
    if term.startswith(WORKFLOW_PREFIX):
        term = term[len(WORKFLOW_PREFIX) :].strip()
    return _database_named_by(term or request.GET.get("workflow", ""))


def _database_named_by(text: str) -> str:
    """The database an id (as text) names; JOBQ["DATABASE"] for anything else."""
    if not (text.isascii() and text.isdigit() and len(text) < 20):
        return home_database()
    try:
        return database_of_job(int(text))
    except UnknownShard:
        return home_database()


def label(alias: str) -> str:
    """``jobs2 (shard 1)``."""
    return f"{alias} (shard {shard_number(alias)})"


def on_requested_database(
    request: HttpRequest, object_id: str | None, view: Callable[[], HttpResponseBase]
) -> HttpResponseBase:
    """``view()`` on the request's database, its template rendered there too (a list is read as the
    page renders); unsharded, ``view()`` as it is. A DatabaseError of that database answers a page
    that names it (status 503) and links the other databases."""
    if not jobq_settings().shards:
        return view()
    alias = requested_database(request, object_id)
    try:
        with on_database(alias):
            response = view()
            if isinstance(response, TemplateResponse) and not response.is_rendered:
                response.render()
            return response
    except (OperationalError, InterfaceError) as exc:
        if not _lost(alias):
            raise  # another database's error, or this one's while it answers (a timeout): not an outage
        connections[alias].close()
        logger.warning("console: database %s cannot be read: %s", alias, exc, exc_info=True)
        context = {
            "title": f"Database {alias} cannot be read",
            "alias": label(alias),
            "error": str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
            "others": []  # a job's page is on its own database
            if object_id is not None
            else [(label(other), f"?{PARAMETER}={other}") for other in every_database() if other != alias],
            "back": request.get_full_path() if request.method in ("GET", "HEAD") else request.path,
        }
        page = TemplateResponse(request, "admin/django_jobq/database_down.html", context, status=503)
        return page.render()


def routed(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """``view`` (a console view taking the request, and an ``object_id`` if any) run by
    on_requested_database."""

    @functools.wraps(view)  # keeps what the admin marks its views with (model_admin, csrf_exempt)
    def on_its_database(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        found = kwargs.get("object_id", kwargs.get("workflow_id", args[0] if args else None))
        object_id = None if found is None else str(found)
        return on_requested_database(request, object_id, lambda: view(request, *args, **kwargs))

    return on_its_database


def _lost(alias: str) -> bool:
    """``alias``'s connection is gone (never made, or it no longer answers)."""
    connection = connections[alias]
    if connection.connection is None:
        return True
    try:
        return not connection.is_usable()
    except DatabaseError:
        return True


class DatabaseFilter(admin.SimpleListFilter):
    """ "By database": which of jobq's databases the list shows (no "All": a list is one database's;
    the dashboard adds them up)."""

    title = "database"
    parameter_name = PARAMETER

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(alias, label(alias)) for alias in every_database()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset  # the whole request already works on it (on_requested_database)

    def __init__(self, request: HttpRequest, params: Any, model: Any, model_admin: Any) -> None:
        super().__init__(request, params, model, model_admin)
        self.shown = requested_database(request)

    def choices(self, changelist: Any) -> Iterator[_ListFilterChoices]:
        for alias, title in self.lookup_choices:
            yield {
                "selected": alias == self.shown,
                "query_string": changelist.get_query_string({self.parameter_name: alias}),
                "display": title,
            }


class OnRequestedDatabase(_ModelAdmin):
    """A ModelAdmin of jobs or workflows whose every page works on the requested database (its URLs'
    views wrapped, outermost, so that a subclass's own view code runs there too)."""

    def get_list_filter(self, request: HttpRequest) -> Any:
        found = tuple(super().get_list_filter(request))
        return (DatabaseFilter, *found) if jobq_settings().shards else found

    def get_urls(self) -> list[URLPattern]:
        urls = super().get_urls()
        for url in urls:
            url.callback = routed(url.callback)
        return urls
