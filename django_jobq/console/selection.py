"""The jobs a list's filter selects, as a value a bulk action can store and rebuild exactly.

An admin list is filtered by its query string (``?status__exact=3&queue=emails&q=task:shop.sync``). A
Selection takes the few parameters the job list and the dead letters offer (the same meaning the
lists give them) and refuses any other: a lookup the address could add (``?payload__contains=…``)
would filter the list but could not be rebuilt in a worker, so an action over it is refused rather than
run over more jobs than were shown. It also fixes the bounds that move with time: the newest job id
when the operator confirmed (later jobs are never selected) and the search window's lower bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from .. import validation
from ..exceptions import BadSelection, JobqError
from ..models import Job
from ..status import DEAD, JobStatus
from .search import NARROW_STATUSES, WINDOW, BadSearch, search, workflow_id

# A list's parameters that do not change which jobs it holds: the sort, the page, "show all", the
# admin's "invalid filter" flag, "show counts".
IGNORED = frozenset({"o", "p", "all", "e", "_facets", "database"})  # database: the page's (admin.databases)
# The parameters each list filters on: the job list's status, queue, task, workflow filters and the
# dead letters' task, exception and queue filters; both search (q).
JOB_LIST = frozenset({"status__exact", "queue", "task", "workflow", "q"})
DEAD_LIST = frozenset({"queue", "task", "exception", "q"})
MAX_ID = (1 << 63) - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    """The jobs of one list filter with ids in (after, until]."""

    dead: bool = False  # the dead-letter list: DEAD jobs only
    status: int | None = None
    queue: str | None = None
    task: str | None = None
    workflow: int | None = None
    exception: str | None = None  # "": none recorded
    search: str = ""
    after: int = 0  # the search window's lower bound (0: none)
    until: int = 0  # the newest job id when the selection was made

    @classmethod
    def from_query(cls, query: Mapping[str, Sequence[str]], *, dead: bool, database: str) -> Selection:
        """The selection of the list (the dead letters if ``dead``) filtered by ``query`` (a QueryDict's
        lists of values), bounded by the newest job now; BadSelection for a parameter it cannot
        rebuild or a value that is not a valid one."""
        allowed = DEAD_LIST if dead else JOB_LIST
        values: dict[str, str] = {}
        for key, given in query.items():
            if key in IGNORED:
                continue
            if key not in allowed:
                raise BadSelection(f"the filter {key!r:.60} cannot be used for an action over every match")
            if isinstance(given, str) or len(given) != 1:
                raise BadSelection(f"the filter {key!r:.60} must be given once")
            values[key] = given[0]
        newest = Job.objects.using(database).order_by("-id").values_list("id", flat=True).first() or 0
        status, workflow = values.get("status__exact"), values.get("workflow")
        if status is not None and (not status.isdigit() or int(status) not in JobStatus.values):
            raise BadSelection(f"status {status!r:.60} is not a job status")
        try:
            workflow_number = None if workflow is None else workflow_id(workflow)
        except BadSearch as exc:
            raise BadSelection(str(exc)) from None
        raw = {
            "dead": dead,
            "status": None if status is None else int(status),
            "queue": values.get("queue"),
            "task": values.get("task"),
            "workflow": workflow_number,
            "exception": values.get("exception"),
            "search": values.get("q", "").strip(),
            "after": 0,
            "until": newest,
        }
        selection = cls.from_dict(raw)
        if selection.search and not selection.narrowed:
            base = Job.objects.using(database).filter(id__lte=newest)
            try:
                _, cut = search(base, selection.search, narrowed=False)
            except BadSearch as exc:
                raise BadSelection(str(exc)) from None
            if cut:  # as the list did: the newest WINDOW jobs only
                selection = dataclasses.replace(selection, after=max(0, newest - WINDOW))
        return selection

    @property
    def narrowed(self) -> bool:
        """Whether a search reads every job of the status (as the list does for NARROW_STATUSES)."""
        return self.status in NARROW_STATUSES

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Selection:
        """A stored selection, every field checked again (a bulk job's payload is data like any other)."""
        if not isinstance(raw, dict) or set(raw) - {f.name for f in dataclasses.fields(cls)}:
            raise BadSelection(f"not a selection: {raw!r:.100}")
        try:
            return cls(
                dead=_flag(raw.get("dead", False)),
                status=_optional(raw.get("status"), lambda v: validation.integer(v, "status", 0, 5)),
                queue=_optional(raw.get("queue"), validation.queue),
                task=_optional(raw.get("task"), lambda v: validation.name(v, "task")),
                workflow=_optional(
                    raw.get("workflow"), lambda v: validation.integer(v, "workflow", 1, MAX_ID)
                ),
                exception=_optional(raw.get("exception"), _exception),
                search=_search(raw.get("search", "")),
                after=validation.integer(raw.get("after", 0), "after", 0, MAX_ID),
                until=validation.integer(raw.get("until", 0), "until", 0, MAX_ID),
            )
        except BadSelection:
            raise
        except JobqError as exc:
            raise BadSelection(str(exc)) from None

    def jobs(self, database: str) -> QuerySet[Job]:
        """The selected jobs, as the list filters them, with ids in (after, until]."""
        jobs = Job.objects.using(database).filter(id__gt=self.after, id__lte=self.until)
        if self.dead:
            jobs = jobs.filter(status=DEAD)
        if self.status is not None:
            jobs = jobs.filter(status=self.status)
        if self.queue is not None:
            jobs = jobs.filter(queue=self.queue)
        if self.task is not None:
            jobs = jobs.filter(task=self.task)
        if self.workflow is not None:
            jobs = jobs.filter(workflow_id=self.workflow)
        if self.exception is not None:
            jobs = (
                jobs.filter(exception__isnull=True)
                if self.exception == ""
                else jobs.filter(exception=self.exception)
            )
        if self.search:
            try:  # the window is the bound ``after``, fixed when the selection was made
                jobs, _ = search(jobs, self.search, narrowed=True)
            except BadSearch as exc:
                raise BadSelection(str(exc)) from None
        return jobs

    def describe(self) -> str:
        """The filter in words, for the admin log and the bulk actions' page."""
        parts = ["dead letters" if self.dead else "jobs"]
        if self.status is not None:
            parts.append(f"status {JobStatus(self.status).label}")
        for name in ("queue", "task", "workflow", "exception"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name} {value!r}" if value != "" else f"{name} none")
        if self.search:
            parts.append(f"search {self.search!r}")
        parts.append(f"ids {self.after + 1}..{self.until}")
        return ", ".join(parts)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadSelection(f"dead must be true or false, not {value!r:.60}")
    return value


def _optional(value: Any, check: Any) -> Any:
    return None if value is None else check(value)


def _exception(value: Any) -> str:
    """An exception filter's value: "" (none recorded) or a storable name."""
    return "" if value == "" else validation.string(value, "exception", validation.MAX_NAME_LENGTH)


def _search(value: Any) -> str:
    """A search term: "" or a storable string (no NUL byte, no lone surrogate) of bounded length."""
    if value == "":
        return ""
    return validation.string(value, "search", 2000)
