"""OpenTelemetry traces (``pip install django-jobq[otel]``; the project configures the SDK).

Enqueue keeps the caller's trace context in the job (``trace_context``: the W3C ``traceparent`` and
``tracestate`` the configured propagator writes), when there is a valid current span; the task
middleware ``django_jobq.tracing.middleware`` (JOBQ["MIDDLEWARE"]) runs each run in a ``process``
span of kind CONSUMER, linked to that context: each retry is a span of its own, linked to the same
origin. Without opentelemetry-api installed both do nothing, at the cost of one failed import; enqueue
loads the API only once something in the process did (a configured SDK, an instrumentation)."""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any

from .outcomes import Cancelled, Discard, Snooze
from .validation import dump_json

_api: Any = None  # the opentelemetry modules, imported once; False: not installed
_tracer: Any = None  # the API's proxy tracer: it follows the provider the project sets, even later
SYSTEM = "django_jobq"  # messaging.system


def _otel() -> Any:
    global _api, _tracer
    if _api is None:
        try:
            from opentelemetry import context, propagate, trace
        except ImportError:
            _api = False
        else:
            _tracer = trace.get_tracer("django_jobq")
            _api = (context, propagate, trace)
    return _api


def carrier() -> str | None:
    """The current trace context as the JSON a job keeps; None without a valid current span."""
    if "opentelemetry.trace" not in sys.modules:
        # No span can be current in a process that never loaded the API: nothing to keep, and no
        # reason for every process that enqueues (a worker's tasks too) to load it.
        return None
    api = _otel()
    if not api:
        return None
    _, propagate, trace = api
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    propagate.inject(headers)
    if not headers:
        return None
    try:
        return dump_json({k: v for k, v in headers.items() if isinstance(k, str) and isinstance(v, str)})
    except Exception:  # a propagator that writes what no job can store: the job goes untraced
        return None


def _origin(job: Any, propagate: Any, trace: Any) -> list[Any]:
    """The link to the span that enqueued ``job`` (none when it kept no valid context)."""
    stored = getattr(job, "trace_context", None)
    if stored is None:
        return []
    if isinstance(stored, str):
        try:
            stored = json.loads(stored)
        except ValueError:
            return []
    if not isinstance(stored, dict):
        return []
    origin = trace.get_current_span(propagate.extract({str(k): str(v) for k, v in stored.items()}))
    span_context = origin.get_span_context()
    return [trace.Link(span_context)] if span_context.is_valid else []


def middleware(job: Any, context: Any, call_next: Any) -> Any:
    """Run ``call_next()`` in a ``process <queue>`` span (an ``async def`` task: the whole await)."""
    api = _otel()
    if not api:
        return call_next()
    otel_context, propagate, trace = api
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return call_next()  # no SDK configured: every span would be a no-op; skip building one
    span = _tracer.start_span(
        f"process {job.queue}",
        kind=trace.SpanKind.CONSUMER,
        links=_origin(job, propagate, trace),
        attributes={
            "messaging.system": SYSTEM,
            "messaging.destination.name": str(job.queue),
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.message.id": str(job.id),
            "jobq.task": str(job.task),
            "jobq.attempt": int(getattr(context, "attempt", 0) or 0),
        },
    )
    if database := getattr(getattr(job, "_state", None), "db", None):  # where it was claimed from
        span.set_attribute("jobq.database", str(database))
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        result = call_next()
    except BaseException as exc:
        _failed(span, exc, trace)
        span.end()
        raise
    finally:
        otel_context.detach(token)
    if inspect.isawaitable(result):
        return _awaited(span, result, otel_context, trace)
    span.end()
    return result


async def _awaited(span: Any, awaitable: Any, otel_context: Any, trace: Any) -> Any:
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        return await awaitable
    except BaseException as exc:
        _failed(span, exc, trace)
        raise
    finally:
        otel_context.detach(token)
        span.end()


def _failed(span: Any, exc: BaseException, trace: Any) -> None:
    if isinstance(exc, Snooze | Discard | Cancelled):  # an outcome the task chose, not an error
        span.set_attribute("jobq.outcome", type(exc).__name__.lower())
        return
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))
