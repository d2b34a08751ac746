"""Terms every SQLite statement shares: the clock, time arithmetic, arrays, the status codes.

Statements go through Django's SQLite backend, which turns %(name)s into :name (so a literal % is
written %%). Times are text in Django's own format, UTC 'YYYY-MM-DD HH:MM:SS.ffffff' (sqlite_engine.sqlite_time):
the ORM and the admin read what the statements write, and text order is time order. Arithmetic goes
through julianday() and keeps millisecond resolution. Durations are integer microseconds (Django's
DurationField on SQLite). A list parameter travels as a JSON array and is read with json_each().
"""

from ...status import CANCELLED, DEAD, DONE, PENDING, RUNNING, WAITING  # the codes, from status.JobStatus

__all__ = [
    "CANCELLED",
    "DEAD",
    "DONE",
    "NOW",
    "PENDING",
    "RUNNING",
    "WAITING",
    "each",
    "micros",
    "plus",
    "ts",
    "window_over",
]

_FORMAT = "'%%Y-%%m-%%d %%H:%%M:%%f000'"  # %f is SS.SSS; three zeros make the six digits Django writes


def ts(expr: str) -> str:
    """``expr`` (a time value SQLite understands: text, a julian day number, 'now') as a time text."""
    return f"strftime({_FORMAT}, {expr})"


# The database clock, or the bound %(now)s of JOBQ["CLOCK"] = "python" (tests that move time).
NOW = f"COALESCE(%(now)s, {ts(repr('now'))})"


def plus(time: str, seconds: str) -> str:
    """The time text ``seconds`` (an expression, may be negative or fractional) after ``time``."""
    return ts(f"julianday({time}) + ({seconds}) / 86400.0")


def micros(seconds: str) -> str:
    """Seconds (NULL stays NULL) as a DurationField value: integer microseconds."""
    return f"CAST(round(({seconds}) * 1000000.0) AS INTEGER)"


def each(param: str) -> str:
    """The elements of a list parameter, as a subquery of one column."""
    return f"(SELECT value FROM json_each(%({param})s))"


def window_over(alias: str) -> str:
    """``alias`` is finished and its key's window has passed (at the window's end exactly, too)."""
    window = (
        f"COALESCE(CASE {alias}.status WHEN {DONE} THEN {alias}.dedupe_done ELSE {alias}.dedupe_dead END, 0)"
    )
    return f"{alias}.status IN ({DONE}, {DEAD}) AND {plus(f'{alias}.finished_at', f'{window} / 1000000.0')} <= {NOW}"
