"""Which ticks of a schedule a scheduler pass publishes: the zone chain, the missed-tick policies and
the tick's key. Pure functions over django_jobq.cron.next_run; no database."""

from __future__ import annotations

import collections
import datetime as dt
import re
from typing import NamedTuple

from django.conf import settings

from . import cron
from .exceptions import InvalidJob

MAX_BACKFILL = 1000
MAX_NAME_LENGTH = 100
KEY_PREFIX = "schedule:"
TICK_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # UTC, whole seconds: every tick falls on one
_TICK_LENGTH = len("2026-01-01T00:00:00Z")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_BACKFILL = re.compile(r"backfill:([0-9]{1,4})")
_JUST_BEFORE = dt.timedelta(microseconds=1)
_FIRST_LOOKBACK = dt.timedelta(hours=1)


class MissedPolicy(NamedTuple):
    """What a pass does with due ticks it comes to late (more than the grace after their time)."""

    text: str  # "skip", "latest" or "backfill:N"
    keep: int | None  # skip: None (on-time ticks only); latest: 1; backfill:N: N


def parse_missed(value: object) -> MissedPolicy:
    """``value`` ("skip", "latest" or "backfill:N", N in 1..MAX_BACKFILL) as a policy, else InvalidJob."""
    if value == "skip":
        return MissedPolicy("skip", None)
    if value == "latest":
        return MissedPolicy("latest", 1)
    match = _BACKFILL.fullmatch(value) if isinstance(value, str) else None
    if match and 1 <= int(match[1]) <= MAX_BACKFILL:
        return MissedPolicy(f"backfill:{int(match[1])}", int(match[1]))
    raise InvalidJob(
        f"missed-tick policy must be 'skip', 'latest' or 'backfill:N' (N from 1 to {MAX_BACKFILL}), "
        f"not {value!r:.100}"
    )


def validate_name(value: object) -> str:
    """A schedule's name: letters, digits and ``_ . -``, at most MAX_NAME_LENGTH characters."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or len(value) > MAX_NAME_LENGTH:
        raise InvalidJob(
            f"schedule name must be 1 to {MAX_NAME_LENGTH} letters, digits, '_', '.' or '-' "
            f"(starting with a letter or digit), not {value!r:.120}"
        )
    return value


def zone_for(own: str | None, default: str | None) -> str:
    """The zone a schedule's wall clock is read in: its own, else JOBQ["TIMEZONE"] (``default``), else
    settings.TIME_ZONE, else UTC. Never the server's zone (the TZ variable, /etc/localtime)."""
    for name in (own, default, getattr(settings, "TIME_ZONE", None)):
        if name:
            return name
    return "UTC"


def tick_key(name: str, tick: dt.datetime) -> str:
    """The dedupe key of the job published for ``tick``: "schedule:NAME:2026-03-29T01:00:00Z"."""
    return f"{KEY_PREFIX}{name}:{tick.astimezone(dt.UTC).strftime(TICK_FORMAT)}"


def tick_of(key: str | None) -> dt.datetime | None:
    """The tick (aware, UTC) a job's dedupe key names, or None when it is not a schedule's key."""
    if not key or not key.startswith(KEY_PREFIX) or len(key) <= len(KEY_PREFIX) + _TICK_LENGTH:
        return None
    try:
        return dt.datetime.strptime(key[-_TICK_LENGTH:], TICK_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def ticks_between(
    spec: str, tz: str, low: dt.datetime, high: dt.datetime, keep: int | None
) -> list[dt.datetime]:
    """The ticks t with low <= t <= high, oldest first; only the last ``keep`` of them if given."""
    found: collections.deque[dt.datetime] = collections.deque(maxlen=keep)
    tick = cron.next_run(spec, low - _JUST_BEFORE, tz)
    while tick <= high:
        found.append(tick)
        tick = cron.next_run(spec, tick, tz)
    return list(found)


def due_ticks(
    spec: str, tz: str, start: dt.datetime, now: dt.datetime, policy: MissedPolicy, grace: dt.timedelta
) -> list[dt.datetime]:
    """The ticks to publish, oldest first, of a schedule due since ``start`` (its next_run_at) at ``now``.

    A tick at most ``grace`` old is on time and always published. Older (missed) ones: none under
    skip; the most recent due tick under latest; the N most recent due ticks under backfill:N (on-time
    ones count among them). The walk looks back from ``now`` in growing steps, so a long outage of a
    frequent schedule costs at most a few times N ticks, never one per tick missed.
    """
    if start > now:
        return []
    if policy.keep is None:
        return ticks_between(spec, tz, max(start, now - grace), now, None)
    lookback = max(grace, _FIRST_LOOKBACK)
    while True:
        low = max(start, now - lookback)
        found = ticks_between(spec, tz, low, now, policy.keep)
        if len(found) >= policy.keep or low == start:
            return found
        lookback *= 4


def validate_cron(value: object) -> str:
    """A 5-field cron expression, normalised; InvalidJob for anything else (a daily time included)."""
    text = cron.validate_spec(value)
    if ":" in text:
        raise InvalidJob(f'{text!r} is a daily time: it goes in "at", a cron expression in "cron"')
    return text


def validate_at(value: object) -> str:
    """A daily "HH:MM" time, normalised; InvalidJob for anything else (a cron expression included)."""
    if isinstance(value, str) and ":" not in value:
        raise InvalidJob(f"daily time {value!r:.100} must be 'HH:MM' (a cron expression goes in \"cron\")")
    return cron.validate_spec(value)
