"""The job list's search box: one term names jobs by id, dedupe key (``key:order-17``), tag
(``tag:tenant:42``), workflow (``workflow:42``), queue or task (``queue:emails``, ``task:shop.search``), task
prefix or dedupe key (a bare word), or payload containment (a JSON object, ``{"order_id": 42}``).

A term of digits only is a job id and nothing else: ``id = N`` alone is one probe of the primary key,
where ``id = N OR task LIKE 'N%' OR dedupe_key = 'N'`` reads the whole table (no index serves the OR).
The id, ``key:``, ``tag:`` and ``workflow:`` go to their index. The others have none over every job:
they read every job of the status the list is filtered to when that is RUNNING, WAITING, DEAD or
CANCELLED (its partial index), else only the newest WINDOW jobs (an id range of the primary key): no
search reads the history or the whole backlog."""

from __future__ import annotations

import json
from typing import Any

from django.db import connections
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTransform

from .. import validation
from ..exceptions import JobqError
from ..status import CANCELLED, DEAD, RUNNING, WAITING

TAG_PREFIX = "tag:"
WORKFLOW_PREFIX = "workflow:"
KEY_PREFIX = "key:"
QUEUE_PREFIX = "queue:"
TASK_PREFIX = "task:"
# A search no index serves reads at most the newest this many jobs, unless a status narrows it: one of
# these, whose jobs are few enough to be searched whole through the status's partial index (PENDING is
# the backlog, DONE the history).
WINDOW = 100_000
NARROW_STATUSES = (RUNNING, WAITING, DEAD, CANCELLED)
HELP = (
    'A job id (a number); "key:KEY" for the job holding a dedupe key; "tag:NAME" for the jobs carrying a tag; '
    '"workflow:ID" for the jobs of a workflow; "queue:NAME" or "task:NAME" for the jobs of a queue or task; '
    "a task name's beginning or a dedupe key; "
    'or a JSON object for the jobs whose payload contains it: {"order_id": 42}. The last four search '
    f"the newest {WINDOW:,} jobs, or every job of the status the list is filtered to (Running, Waiting, "
    "Dead or Cancelled)."
)


class BadSearch(ValueError):
    """A search term that looks like a tag or a JSON object but is not a valid one."""


def search(queryset: QuerySet[Any], term: str, *, narrowed: bool = False) -> tuple[QuerySet[Any], bool]:
    """The jobs of ``queryset`` that ``term`` names, and whether the search was cut to the newest
    WINDOW jobs (only when ``narrowed`` is false: no status's partial index bounds the list).
    BadSearch for a malformed tag or JSON object."""
    vendor = connections[queryset.db].vendor
    if term.startswith(TAG_PREFIX):
        return queryset.filter(tagged(term[len(TAG_PREFIX) :].strip(), vendor)), False
    if term.startswith(WORKFLOW_PREFIX):
        return queryset.filter(workflow_id=workflow_id(term[len(WORKFLOW_PREFIX) :].strip())), False
    if term.startswith(KEY_PREFIX):  # the job holding the key: the unique index jobq_job_dedupe
        return queryset.filter(dedupe_key=term[len(KEY_PREFIX) :].strip(), key_released=False), False
    if term.isascii() and term.isdigit() and len(term) < 19:  # a job id: one probe of the primary key
        return queryset.filter(id=int(term)), False
    if term.startswith("{"):
        found = payload_contains(queryset, term, vendor)
    elif term.startswith(QUEUE_PREFIX):
        found = queryset.filter(queue=term[len(QUEUE_PREFIX) :].strip())
    elif term.startswith(TASK_PREFIX):
        found = queryset.filter(task=term[len(TASK_PREFIX) :].strip())
    else:
        found = queryset.filter(Q(task__startswith=term) | Q(dedupe_key=term))
    return (found, False) if narrowed else newest(found)


def window_note() -> str:
    """What the list says when a search was cut to the newest WINDOW jobs."""
    return (
        f"Searched the newest {WINDOW:,} jobs: filter on Running, Waiting, Dead or Cancelled to search "
        "every job of that status."
    )


def newest(queryset: QuerySet[Any]) -> tuple[QuerySet[Any], bool]:
    """``queryset`` cut to the newest WINDOW jobs (ids above the newest id minus WINDOW: one range of
    the primary key), and whether that cut anything off."""
    top = queryset.model._default_manager.using(queryset.db).order_by("-id").values_list("id", flat=True)
    last = top.first()
    if last is None or last <= WINDOW:
        return queryset, False
    return queryset.filter(id__gt=last - WINDOW), True


def workflow_id(text: str) -> int:
    """The id of "workflow:ID" (the jobq_job_workflow index); BadSearch unless it is a positive integer."""
    if not (text.isascii() and text.isdigit()) or len(text) >= 19 or int(text) < 1:
        raise BadSearch(f'"{WORKFLOW_PREFIX}" takes a workflow id, not {text!r:.50}')
    return int(text)


def tagged(tag: str, vendor: str) -> Q:
    """The jobs carrying ``tag``: tags @> '["tag"]' on PostgreSQL (jobq_job_tags), json_each on SQLite."""
    try:
        checked = validation.tags([tag])
    except JobqError as exc:
        raise BadSearch(str(exc)) from None
    assert checked is not None
    if vendor == "postgresql":
        return Q(tags__contains=checked)
    return Q(
        id__in=RawSQL("SELECT j.id FROM jobq_job AS j, json_each(j.tags) AS t WHERE t.value = %s", [tag])
    )


def payload_contains(queryset: QuerySet[Any], text: str, vendor: str) -> QuerySet[Any]:
    """The jobs of ``queryset`` whose payload contains the JSON object ``text``: jsonb @> on
    PostgreSQL; on SQLite, each value of the object (nested objects followed) equal at its path."""
    try:
        wanted = json.loads(text)
        validation.dump_json(wanted, what="the search")
    except (ValueError, JobqError) as exc:
        raise BadSearch(f"the search is not a valid JSON object: {exc}") from None
    if not isinstance(wanted, dict) or not wanted:
        raise BadSearch('a payload search is a non-empty JSON object, e.g. {"order_id": 42}')
    if vendor == "postgresql":
        return queryset.filter(payload__contains=wanted)
    paths = dict(_paths("payload", wanted))
    # Each path an alias of its own: a key is taken as it is, never parsed as a lookup ("a__b", "in").
    named = {f"jobq_path_{n}": path for n, path in enumerate(paths)}
    found: QuerySet[Any] = queryset.alias(**named).filter(
        **{name: paths[path] for name, path in named.items()}
    )
    return found


def _paths(column: Any, wanted: dict[str, Any]) -> Any:
    """(KeyTransform of a path, the value wanted there) for each non-object value of ``wanted``."""
    for key, value in wanted.items():
        at = KeyTransform(key, column)
        if isinstance(value, dict) and value:
            yield from _paths(at, value)
        else:
            yield at, value
