"""Checks on what callers pass in; each raises an InvalidJob subclass before anything is written.

PostgreSQL refuses some values that Python accepts: NUL characters (in text and in jsonb strings),
lone surrogates (not encodable as UTF-8) and nesting deep enough to exhaust a recursion limit. Every
value bound for the database passes through one of these checks first, so none of them surfaces as a
database error, and the worker uses the same checks on results and error texts.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable
from typing import Any

from .exceptions import InvalidJob, InvalidPayload, PayloadTooLarge

PRIORITY_MIN, PRIORITY_MAX = -32768, 32767  # the SMALLINT column's range
MAX_NAME_LENGTH = 200  # task, queue and worker names
MAX_DEDUPE_KEY_LENGTH = 1000
MAX_ERROR_LENGTH = 20_000  # stored error text, tracebacks included, is cut to this
MAX_JSON_DEPTH = 100  # nested arrays/objects in a payload or result
MAX_SECONDS = 10 * 366 * 24 * 3600  # delays, leases, backoffs: ten years (PostgreSQL intervals overflow)
# An inbound key in UTF-8: with a namespace of MAX_NAME_LENGTH four-byte characters the pair still fits one
# btree entry (2704 bytes at most; PostgreSQL refuses longer index rows that do not compress).
MAX_INBOUND_KEY_BYTES = 1800
MAX_DEDUPE_KEY_BYTES = 2000  # a job's dedupe key in UTF-8: one btree entry of jobq_job_dedupe
MAX_TAGS = 32  # tags on one job
MAX_TAG_LENGTH = 100  # characters of one tag
MIN_TTL = 1e-6  # a microsecond, the resolution of timestamptz: a shorter window would be no window

# A JSON escape of U+0000 not itself escaped (an even number of backslashes before "\u0000").
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _reject(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


# One encoder for every dump (json.dumps would build a new one per call for these options).
_ENCODER = json.JSONEncoder(allow_nan=False, default=_reject, separators=(",", ":"), ensure_ascii=False)


def dump_json(value: Any, *, what: str = "payload") -> str:
    """Strict JSON text for ``value`` that PostgreSQL's jsonb accepts: no NaN/Infinity, no custom
    objects, string keys only, no NUL, no lone surrogate, at most MAX_JSON_DEPTH levels deep."""
    _check_structure(value, what, 0)
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"{what}{_path_to(value, _not_json)} must be JSON: {exc}") from None
    if "\\u0000" in text and _JSON_NUL.search(text):
        where = _path_to(value, lambda leaf: isinstance(leaf, str) and "\x00" in leaf)
        raise InvalidPayload(
            f"{what}{where} must not contain NUL characters (\\x00), which PostgreSQL cannot store"
        )
    if not _utf8(text):
        where = _path_to(value, lambda leaf: isinstance(leaf, str) and not _utf8(leaf))
        raise InvalidPayload(f"{what}{where} contains a lone surrogate, which is not valid UTF-8")
    return text


def _not_json(leaf: Any) -> bool:
    if leaf is None or isinstance(leaf, bool | str):
        return False
    if isinstance(leaf, float):
        return not math.isfinite(leaf)
    if isinstance(leaf, int):
        try:
            int.__repr__(leaf)
        except ValueError:  # more digits than Python prints
            return True
        return False
    return True


def _path_to(value: Any, bad: Callable[[Any], bool]) -> str:
    """Where in ``value`` the first ``bad`` value (or object key) is, as ``['kwargs']['when']``; "" if
    none is found. Only on the error path: the value was already checked for depth."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for key in item:
                if bad(key):
                    return f"{path} (the key {_shown(key)})"
            stack.extend((item[k], f"{path}[{_shown(k)}]") for k in reversed(list(item)))
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
        elif bad(item):
            return path
    return ""


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (a lone surrogate does not)."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _check_structure(value: Any, what: str, depth: int) -> None:
    if isinstance(value, dict | list | tuple):
        if depth >= MAX_JSON_DEPTH:
            raise InvalidPayload(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidPayload(f"{what} must be JSON: object key {_shown(key)} is not a string")
                _check_structure(item, what, depth + 1)
        else:
            for item in value:
                _check_structure(item, what, depth + 1)


def payload_json(payload: Any, max_bytes: int) -> str:
    """The payload as JSON text: a JSON object no larger than ``max_bytes`` once encoded."""
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise InvalidPayload(f"payload must be a JSON object (dict), not {type(payload).__name__}")
    return sized(dump_json(payload), max_bytes, "payload", "MAX_PAYLOAD_BYTES")


def sized(text: str, max_bytes: int, what: str, setting: str) -> str:
    """``text`` if its UTF-8 encoding fits ``max_bytes``; PayloadTooLarge otherwise."""
    size = len(text) if text.isascii() else len(text.encode())
    if size > max_bytes:
        raise PayloadTooLarge(f"{what} is {size} bytes; the limit is {max_bytes} (JOBQ['{setting}'])")
    return text


def string(value: Any, what: str, max_length: int) -> str:
    """A non-empty string PostgreSQL can store: no NUL, no lone surrogate, at most ``max_length``."""
    if not isinstance(value, str) or not value:
        raise InvalidJob(f"{what} must be a non-empty string, not {_shown(value)}")
    if len(value) > max_length:
        raise InvalidJob(f"{what} must be at most {max_length} characters, not {len(value)}")
    if "\x00" in value:
        raise InvalidJob(f"{what} must not contain NUL characters (\\x00): {value!r}")
    if not _utf8(value):
        raise InvalidJob(f"{what} contains a lone surrogate, which is not valid UTF-8")
    return value


def name(value: Any, what: str) -> str:
    """A task, queue or worker name: non-empty, storable, without surrounding spaces."""
    string(value, what, MAX_NAME_LENGTH)
    if not value.strip() or value != value.strip():
        raise InvalidJob(f"{what} must be non-blank, without surrounding spaces: {value!r}")
    return str(value)


def queue(value: Any) -> str:
    """A queue name jobs can be put in: a name, and not "*" (a worker's lane for every queue)."""
    if value == "*":
        raise InvalidJob('"*" is not a queue name: it stands for every queue in a worker\'s --queues')
    return name(value, "queue")


def integer(value: Any, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidJob(f"{what} must be an integer in [{low}, {high}], not {_shown(value)}")
    return value


def priority(value: Any) -> int:
    return integer(value, "priority", PRIORITY_MIN, PRIORITY_MAX)


def max_attempts(value: Any) -> int:
    return integer(value, "max_attempts", 1, 1_000_000)


def seconds(value: Any, what: str) -> float:
    """A non-negative duration in seconds (at most MAX_SECONDS), from a number or a timedelta."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0 <= value <= MAX_SECONDS  # NaN fails every comparison; inf and huge ints exceed it
    ):
        raise InvalidJob(
            f"{what} must be a number of seconds (or a timedelta) in [0, {MAX_SECONDS}], not {_shown(value)}"
        )
    return float(value)


def aware(value: Any, what: str) -> dt.datetime:
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise InvalidJob(f"{what} must be a timezone-aware datetime, not {_shown(value)}")
    return value


def dedupe_key(value: Any) -> str | None:
    """A job's dedupe key: storable, at most MAX_DEDUPE_KEY_LENGTH characters and MAX_DEDUPE_KEY_BYTES
    bytes in UTF-8 (so that the unique index can always hold it)."""
    if value is None:
        return None
    string(value, "dedupe_key", MAX_DEDUPE_KEY_LENGTH)
    if not value.isascii() and len(value.encode()) > MAX_DEDUPE_KEY_BYTES:
        raise InvalidJob(f"dedupe_key must be at most {MAX_DEDUPE_KEY_BYTES} bytes in UTF-8")
    return str(value)


def concurrency_key(value: Any) -> str | None:
    """A job's concurrency key: the same rules as a dedupe key."""
    if value is None:
        return None
    string(value, "concurrency_key", MAX_DEDUPE_KEY_LENGTH)
    return str(value)


def shard_key(value: Any) -> str | None:
    """A job's shard key (what places it on a spread queue): the same rules as a dedupe key."""
    if value is None:
        return None
    string(value, "shard_key", MAX_DEDUPE_KEY_LENGTH)
    return str(value)


def fairness_key(value: Any) -> str | None:
    """A job's fairness key (the tenant a fair queue shares its starts between): the same rules as a
    dedupe key, and not blank."""
    if value is None:
        return None
    string(value, "fairness_key", MAX_DEDUPE_KEY_LENGTH)
    if not value.strip():
        raise InvalidJob(f"fairness_key must not be blank: {value!r}")
    return str(value)


def tags(value: Any) -> list[str] | None:
    """A job's tags: a list or tuple of at most MAX_TAGS non-blank strings of at most MAX_TAG_LENGTH
    characters without surrounding spaces, storable; repeats dropped, order kept. None or empty: none."""
    if value is None:
        return None
    if not isinstance(value, list | tuple):
        raise InvalidJob(f"tags must be a list of strings, not {_shown(value)}")
    if len(value) > MAX_TAGS:
        raise InvalidJob(f"a job has at most {MAX_TAGS} tags, not {len(value)}")
    checked: dict[str, None] = {}
    for tag in value:
        string(tag, "a tag", MAX_TAG_LENGTH)
        if not tag.strip() or tag != tag.strip():
            raise InvalidJob(f"a tag must be non-blank, without surrounding spaces: {tag!r}")
        checked[tag] = None
    return list(checked) or None


def tags_json(value: Any) -> str | None:
    """A job's tags (checked by tags()) as the JSON array stored in its tags column; None: none."""
    checked = tags(value)
    return None if checked is None else _ENCODER.encode(checked)


def inbound_namespace(value: Any) -> str:
    """The namespace of an inbound delivery (a provider: "stripe", "slack"): a storable string."""
    return string(value, "namespace", MAX_NAME_LENGTH)


def inbound_key(value: Any) -> str:
    """An inbound delivery's key (an event id): storable, at most MAX_DEDUPE_KEY_LENGTH characters and
    MAX_INBOUND_KEY_BYTES bytes in UTF-8."""
    string(value, "key", MAX_DEDUPE_KEY_LENGTH)
    if not value.isascii() and len(value.encode()) > MAX_INBOUND_KEY_BYTES:
        raise InvalidJob(f"key must be at most {MAX_INBOUND_KEY_BYTES} bytes in UTF-8")
    return str(value)


def ttl(value: Any) -> float:
    """A dedupe window in seconds (or a timedelta): at least MIN_TTL, at most MAX_SECONDS."""
    window = seconds(value, "ttl")
    if window < MIN_TTL:
        raise InvalidJob(f"ttl must be positive (at least {MIN_TTL} s), not {_shown(value)}")
    return window


def error_text(error: Any) -> str:
    """Error text as stored: NUL and lone surrogates escaped (never refused: an error must always be
    recordable), cut to MAX_ERROR_LENGTH characters."""
    value = error if isinstance(error, str) else _safe_repr(error)
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    if not value.isascii():
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(value) > MAX_ERROR_LENGTH:
        value = value[: MAX_ERROR_LENGTH - 15] + "\n…[truncated]"
    return value


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # a hostile __repr__
        return f"<unrepresentable {type(value).__name__}: {type(exc).__name__}>"


def _shown(value: Any) -> str:
    """``value`` for an error message: its repr, however hostile, at most 100 characters."""
    text = _safe_repr(value)
    return text if len(text) <= 100 else text[:99] + "…"


MAX_RATE_COUNT = 1_000_000_000  # a rate's count, and a limiter's burst
MIN_RATE_SECONDS = 0.001  # a rate's period: the clock counts microseconds
_RATE = re.compile(r"([0-9]{1,10})/([0-9]{1,9}(?:\.[0-9]{1,6})?)?([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(text: Any) -> tuple[int, float]:
    """``"COUNT/UNIT"`` or ``"COUNT/NUMBERUNIT"`` -> (count, seconds): "10/s" (10, 1.0),
    "100/m" (100, 60.0), "5/h", "1000/d", "3/10s" (3, 10.0), "1/1.5m" (1, 90.0). Units s, m, h, d."""
    match = _RATE.fullmatch(text) if isinstance(text, str) and len(text) <= 30 else None
    if match is None:
        raise InvalidJob(
            'a rate is "COUNT/UNIT" or "COUNT/NUMBERUNIT", UNIT one of s, m, h, d '
            f'(e.g. "10/s", "100/m", "3/10s"), not {text!r}'
        )
    count, number, unit = match.groups()
    if not 1 <= int(count) <= MAX_RATE_COUNT:
        raise InvalidJob(f"a rate's count must be in [1, {MAX_RATE_COUNT}], not {count} (in {text!r})")
    seconds = float(number or 1) * _UNITS[unit]
    if not MIN_RATE_SECONDS <= seconds <= MAX_SECONDS:
        raise InvalidJob(
            f"a rate's period must be in [{MIN_RATE_SECONDS}, {MAX_SECONDS}] seconds, not {text!r}"
        )
    return int(count), seconds
