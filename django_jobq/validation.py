"""Checks on what callers pass in; each raises an InvalidJob subclass before anything is written."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from .exceptions import InvalidJob, InvalidPayload, PayloadTooLarge

PRIORITY_MIN, PRIORITY_MAX = -32768, 32767  # the SMALLINT column's range
MAX_NAME_LENGTH = 200  # task and queue names
MAX_DEDUPE_KEY_LENGTH = 1000
MAX_ERROR_LENGTH = 20_000  # stored error text, tracebacks included, is cut to this


def _reject(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dump_json(value: Any, *, what: str = "payload") -> str:
    """Strict JSON text for ``value`` (no NaN/Infinity, no custom objects, string keys only)."""
    try:
        text = json.dumps(value, allow_nan=False, default=_reject, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"{what} must be JSON: {exc}") from None
    _check_keys(value, what)
    return text


def _check_keys(value: Any, what: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidPayload(f"{what} must be JSON: object key {key!r} is not a string")
            _check_keys(item, what)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_keys(item, what)


def payload_json(payload: Any, max_bytes: int) -> str:
    """The payload as JSON text: a JSON object no larger than ``max_bytes`` once encoded."""
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise InvalidPayload(f"payload must be a JSON object (dict), not {type(payload).__name__}")
    text = dump_json(payload)
    size = len(text.encode())
    if size > max_bytes:
        raise PayloadTooLarge(
            f"payload is {size} bytes; the limit is {max_bytes} (JOBQ['MAX_PAYLOAD_BYTES'])"
        )
    return text


def name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidJob(f"{what} must be a non-empty string, not {value!r}")
    if len(value) > MAX_NAME_LENGTH or value != value.strip():
        raise InvalidJob(f"{what} must be at most {MAX_NAME_LENGTH} characters without surrounding spaces")
    return value


def integer(value: Any, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidJob(f"{what} must be an integer in [{low}, {high}], not {value!r}")
    return value


def priority(value: Any) -> int:
    return integer(value, "priority", PRIORITY_MIN, PRIORITY_MAX)


def max_attempts(value: Any) -> int:
    return integer(value, "max_attempts", 1, 1_000_000)


def seconds(value: Any, what: str) -> float:
    """A non-negative duration in seconds, from a number or a timedelta."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise InvalidJob(f"{what} must be a non-negative number of seconds or a timedelta, not {value!r}")
    return float(value)


def aware(value: Any, what: str) -> dt.datetime:
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise InvalidJob(f"{what} must be a timezone-aware datetime, not {value!r}")
    return value


def dedupe_key(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_DEDUPE_KEY_LENGTH:
        raise InvalidJob(
            f"dedupe_key must be a non-empty string of at most {MAX_DEDUPE_KEY_LENGTH} characters"
        )
    return value


def error_text(error: Any) -> str:
    text = error if isinstance(error, str) else repr(error)
    return text if len(text) <= MAX_ERROR_LENGTH else text[: MAX_ERROR_LENGTH - 15] + "\n…[truncated]"
