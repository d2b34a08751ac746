"""When a schedule fires next: the DST rules of docs/scheduling.md around the cronsim parser.

cronsim parses the expression and walks naive wall-clock times (it never sees a time zone here);
this module maps each wall-clock match onto UTC instants in the schedule's IANA zone:

* an ordinary wall time is one instant;
* a wall time skipped by a spring-forward gap runs once, at the first instant after the gap;
* a wall time repeated by a fall-back runs once, at its first occurrence (fold=0);
* except that an expression firing in every hour of the day ("*/15 * * * *", "0 * * * *") follows
  real time: it fires at every instant whose wall time matches, so the repeated hour's ticks fire in
  both passes and a gap's missing wall times are not substituted (Vixie cron's rule for such jobs).
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import zoneinfo
from typing import NamedTuple

from .exceptions import InvalidJob

MAX_SPEC_LENGTH = 200
MAX_TIMEZONE_LENGTH = 64  # the longest IANA name has 32 characters

_UTC = dt.UTC
_SECOND = dt.timedelta(seconds=1)
_ALL_HOURS = frozenset(range(24))
_FIELDS = "minute hour day-of-month month day-of-week"
# "H:MM" or "HH:MM", ASCII digits only (\d would accept other scripts' digits).
_DAILY = re.compile(r"([01]?[0-9]|2[0-3]):([0-5][0-9])")
_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,#-]+")
_BLANKS = re.compile(r"[ \t]+")
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*")
# Present in the zone database's directory but not a place's zone: "localtime" is the server's own.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
# Validation asks cronsim for a first match after this instant: an expression it cannot match within
# its 50-year horizon (e.g. "* * */20 * 1L": the 1st or 21st that is also a month's last Monday) never fires.
_PROBE = dt.datetime(2000, 1, 1)


class Spec(NamedTuple):
    """A validated schedule spec."""

    text: str  # normalised: "HH:MM", or the five fields upper-cased and single-spaced
    expr: str  # the cron expression handed to cronsim
    every_hour: bool  # fires in every hour of the day: follows real time through DST changes


def _show(value: str) -> str:
    """``value`` for an error message: its repr, or its length if it is too long to quote."""
    return repr(value) if len(value) <= MAX_SPEC_LENGTH else f"of {len(value)} characters"


def validate_spec(spec: object) -> str:
    """The normalised form of ``spec`` (a 5-field cron expression or a daily "HH:MM" time), or
    InvalidJob saying what is wrong with it."""
    return parse_spec(spec).text


def parse_spec(spec: object) -> Spec:
    """``spec`` checked and parsed; InvalidJob if it is not a valid cron expression or "HH:MM"."""
    if not isinstance(spec, str):
        raise InvalidJob(
            f"schedule spec must be a str (cron expression or 'HH:MM'), not {type(spec).__name__}"
        )
    if len(spec) > MAX_SPEC_LENGTH:
        raise InvalidJob(f"schedule spec of {len(spec)} characters is longer than {MAX_SPEC_LENGTH}")
    if "\x00" in spec:
        raise InvalidJob(f"schedule spec {spec!r} must not contain NUL characters")
    if not spec.isascii():
        raise InvalidJob(f"schedule spec {spec!r} must be ASCII (digits, names, * / , - #)")
    return _parse(spec)


@functools.lru_cache(maxsize=1024)
def _parse(spec: str) -> Spec:
    text = spec.strip(" \t")
    if ":" in text:
        match = _DAILY.fullmatch(text)
        if match is None:
            raise InvalidJob(
                f"daily time {spec!r} must be 'HH:MM' (or 'H:MM'): hour 0-23, two-digit minute 00-59"
            )
        hour, minute = int(match[1]), int(match[2])
        return Spec(f"{hour:02d}:{minute:02d}", f"{minute} {hour} * * *", every_hour=False)
    fields = _BLANKS.split(text) if text else []
    if len(fields) != 5:
        raise InvalidJob(
            f"cron expression {spec!r} has {len(fields)} field{'' if len(fields) == 1 else 's'}; "
            f"it needs 5 ({_FIELDS}), without seconds or years"
        )
    for field in fields:
        if not _CRON_FIELD.fullmatch(field):
            raise InvalidJob(f"cron expression {spec!r}: unexpected character in {field!r}")
    expr = " ".join(fields).upper()
    from cronsim import CronSim, CronSimError  # loaded with the first schedule, not by every process

    try:
        parsed = CronSim(expr, _PROBE)
        next(parsed)
    except CronSimError as exc:
        raise InvalidJob(f"cron expression {spec!r}: {str(exc).lower()} ({_FIELDS})") from None
    except StopIteration:
        raise InvalidJob(f"cron expression {spec!r} never fires") from None
    return Spec(expr, expr, every_hour=parsed.hours >= _ALL_HOURS)


def validate_timezone(name: object) -> str:
    """``name`` if it is a known IANA time zone (e.g. "Europe/Berlin", "UTC"), else InvalidJob."""
    if not isinstance(name, str):
        raise InvalidJob(f"time zone must be an IANA name (str), not {type(name).__name__}")
    if not name:
        raise InvalidJob("time zone must not be empty: give an IANA name such as 'Europe/Berlin'")
    if len(name) > MAX_TIMEZONE_LENGTH or not name.isascii() or not _ZONE_NAME.fullmatch(name):
        raise InvalidJob(f"time zone {_show(name)} is not an IANA name such as 'Europe/Berlin'")
    known = _known_zones()
    if not known:
        raise InvalidJob("no time zone database found: install the tzdata package")
    if name in _NOT_ZONES or name not in known:
        near = [zone for zone in known if zone.lower() == name.lower() and zone not in _NOT_ZONES]
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise InvalidJob(f"unknown time zone {name!r}{hint}")
    return name


@functools.cache
def _known_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _zone(name: object) -> zoneinfo.ZoneInfo:
    key = validate_timezone(name)
    try:
        return zoneinfo.ZoneInfo(key)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidJob(f"time zone {key!r} cannot be loaded: {exc}") from None


def _instant(after: object) -> dt.datetime:
    if not isinstance(after, dt.datetime):
        raise InvalidJob(f"after must be a datetime, not {type(after).__name__}")
    if after.tzinfo is None or after.utcoffset() is None:
        raise InvalidJob("after must be an aware datetime: a naive one names no instant")
    try:
        return after.astimezone(_UTC)
    except OverflowError:
        raise InvalidJob(f"after {after.isoformat()} is out of range") from None


def next_run(spec: str, after: dt.datetime, tz: str) -> dt.datetime:
    """The first run of ``spec`` in zone ``tz`` strictly after ``after``, as an aware UTC datetime.

    ``spec`` is a 5-field cron expression or a daily "HH:MM" time, both read on ``tz``'s wall clock;
    ``after`` is an aware datetime; ``tz`` an IANA name. Bad arguments raise InvalidJob.
    """
    parsed = parse_spec(spec)
    zone = _zone(tz)
    instant = _instant(after)
    try:
        local = instant.astimezone(zone)
        if parsed.every_hour:
            found = _next_in_real_time(parsed.expr, instant, local, zone)
        else:
            found = _next_on_wall_clock(parsed.expr, instant, local, zone)
    except (OverflowError, ValueError) as exc:  # cronsim or datetime walking past year 9999
        raise InvalidJob(f"schedule {parsed.text!r} has no run after {after.isoformat()}: {exc}") from None
    if found is None:
        raise InvalidJob(f"schedule {parsed.text!r} has no run within 50 years after {after.isoformat()}")
    return found


def _next_on_wall_clock(
    expr: str, after: dt.datetime, local: dt.datetime, zone: zoneinfo.ZoneInfo
) -> dt.datetime | None:
    """Each matching wall time runs once: its only or first instant, or the gap's end if it has none.

    That mapping never decreases as the wall time grows, so the first match whose instant lies
    after ``after`` is the answer; matches of a repeated hour seen again from its second pass map
    to instants already past, and are skipped.
    """
    from cronsim import CronSim

    for wall in CronSim(expr, local.replace(tzinfo=None, fold=0)):
        found = _instants(wall, zone)
        instant = found[0] if found else _gap_end(wall, zone)
        if instant > after:
            return instant
    return None


def _next_in_real_time(
    expr: str, after: dt.datetime, local: dt.datetime, zone: zoneinfo.ZoneInfo
) -> dt.datetime | None:
    """The first instant after ``after`` whose wall time matches, whichever pass of a fold it is in.

    From the first pass of a repeated span, the second pass (a later instant) shows wall times up to
    the span's length *earlier* than ``after``'s, so the walk starts that much earlier and takes the
    smallest instant found by the time it passes ``after``'s own wall time.
    """
    wall = local.replace(tzinfo=None, fold=0)
    start = wall
    if local.fold == 0:
        repeated = _offset(wall, zone, 0) - _offset(wall, zone, 1)
        if repeated > dt.timedelta(0):
            start = wall - repeated
    best: dt.datetime | None = None
    from cronsim import CronSim

    for candidate in CronSim(expr, start):
        for instant in _instants(candidate, zone):
            if instant > after and (best is None or instant < best):
                best = instant
        if best is not None and candidate > wall:
            return best
    return best


def _offset(wall: dt.datetime, zone: zoneinfo.ZoneInfo, fold: int) -> dt.timedelta:
    return wall.replace(tzinfo=zone, fold=fold).utcoffset() or dt.timedelta(0)


def _instants(wall: dt.datetime, zone: zoneinfo.ZoneInfo) -> list[dt.datetime]:
    """The UTC instants whose wall time in ``zone`` is ``wall``, earliest first: none inside a
    spring-forward gap, two inside a fall-back's repeated span, else one."""
    found: list[dt.datetime] = []
    for fold in (0, 1):
        instant = wall.replace(tzinfo=zone, fold=fold).astimezone(_UTC)
        if instant not in found and instant.astimezone(zone).replace(tzinfo=None, fold=0) == wall:
            found.append(instant)
    return sorted(found)


def _gap_end(wall: dt.datetime, zone: zoneinfo.ZoneInfo) -> dt.datetime:
    """The first instant after the gap that skips ``wall``: the transition, found by bisection
    between ``wall`` read with the offset after the gap (an instant before it) and with the offset
    before it (an instant after it). Transitions fall on whole seconds."""
    lo, hi = sorted(wall.replace(tzinfo=zone, fold=fold).astimezone(_UTC) for fold in (0, 1))
    before = lo.astimezone(zone).utcoffset()
    while hi - lo > _SECOND:
        middle = lo + _SECOND * ((hi - lo) // _SECOND // 2)
        if middle.astimezone(zone).utcoffset() == before:
            lo = middle
        else:
            hi = middle
    return hi
