"""The job list's search box: one term names jobs by id, task (or its beginning), dedupe key, tag
(``tag:tenant:42``), workflow (``workflow:42``) or payload containment (a JSON object, ``{"order_id": 42}``).

A term of digits only is a job id and nothing else: ``id = N`` alone is one probe of the primary key,
where ``id = N OR task LIKE 'N%' OR dedupe_key = 'N'`` reads the whole table (no index serves the OR)."""

from __future__ import annotations

import json
from typing import Any

from django.db import connections
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTransform

from .. import validation
from ..exceptions import JobqError

TAG_PREFIX = "tag:"
WORKFLOW_PREFIX = "workflow:"
HELP = (
    'A job id (a number), a task name (or its beginning), a dedupe key, "tag:NAME" for the jobs carrying a tag, '
    '"workflow:ID" for the jobs of a workflow, '
    'or a JSON object for the jobs whose payload contains it: {"order_id": 42}.'
)


class BadSearch(ValueError):
    """A search term that looks like a tag or a JSON object but is not a valid one."""


def search(queryset: QuerySet[Any], term: str) -> QuerySet[Any]:
    """The jobs of ``queryset`` that ``term`` names; BadSearch for a malformed tag or JSON object."""
    vendor = connections[queryset.db].vendor
    if term.startswith(TAG_PREFIX):
        return queryset.filter(tagged(term[len(TAG_PREFIX) :].strip(), vendor))
    if term.startswith(WORKFLOW_PREFIX):
        return queryset.filter(workflow_id=workflow_id(term[len(WORKFLOW_PREFIX) :].strip()))
    if term.startswith("{"):
        return payload_contains(queryset, term, vendor)
    if term.isdigit() and len(term) < 19:  # a job id: one probe of the primary key
        return queryset.filter(id=int(term))
    return queryset.filter(Q(task__startswith=term) | Q(dedupe_key=term))


def workflow_id(text: str) -> int:
    """The id of "workflow:ID" (the jobq_job_workflow index); BadSearch unless it is a positive integer."""
    if not text.isdigit() or len(text) >= 19 or int(text) < 1:
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
