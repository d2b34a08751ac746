"""OpenTelemetry traces (django_jobq.tracing) with the SDK's in-memory exporter: enqueue keeps the
caller's trace context; each run is a CONSUMER span linked to it, a retry a span of its own, an async
run traced over its whole await, and the Django Tasks backend's runs alike."""

import time

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from django_jobq import tracing
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.worker import Worker
from tests.testapp import dtasks

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider():
    """One SDK provider for the process (OpenTelemetry sets it once), its spans kept in memory."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider()
        trace.set_tracer_provider(current)
    current.add_span_processor(SimpleSpanProcessor(EXPORTER))
    return current


@pytest.fixture(autouse=True)
def traced(settings, provider):
    settings.JOBQ = {**settings.JOBQ, "MIDDLEWARE": ["django_jobq.tracing.middleware"]}
    EXPORTER.clear()
    yield
    EXPORTER.clear()


def drain(queue: str = "default") -> None:
    for _ in range(50):  # a burst ends when nothing is due: again until retries (50-100 ms) ran
        Worker({queue: 2}, burst=True).run()
        if not Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists():
            return
        time.sleep(0.05)


def runs() -> list:
    return sorted((s for s in EXPORTER.get_finished_spans() if s.name.startswith("process ")),
                  key=lambda s: s.start_time)  # fmt: skip


@pytest.mark.p1
def test_each_run_is_a_consumer_span_linked_to_the_span_that_enqueued_it():
    tracer = trace.get_tracer("shop")
    with tracer.start_as_current_span("checkout") as checkout:
        job_id = Job.objects.enqueue("test.echo", {"n": 1})
        many = Job.objects.enqueue_many([NewJob("test.echo", {"n": i}) for i in range(2)])
    origin = checkout.get_span_context()
    stored = Job.objects.get(id=job_id).trace_context
    assert stored["traceparent"].split("-")[1] == format(origin.trace_id, "032x")
    drain()
    spans = runs()
    assert len(spans) == 3
    for span in spans:
        assert span.kind is SpanKind.CONSUMER and span.name == "process default"
        assert [link.context.span_id for link in span.links] == [origin.span_id]
        assert span.attributes["messaging.system"] == "django_jobq"
        assert span.attributes["messaging.destination.name"] == "default"
        assert span.attributes["messaging.operation.type"] == "process"
        assert span.attributes["jobq.task"] == "test.echo" and span.attributes["jobq.attempt"] == 1
        assert span.attributes["jobq.database"] == "default"  # where the job was claimed from
        assert span.status.status_code is not StatusCode.ERROR
    assert {s.attributes["messaging.message.id"] for s in spans} == {str(i) for i in (job_id, *many)}


@pytest.mark.p1
def test_a_retry_is_a_span_of_its_own_linked_to_the_same_origin_and_the_failure_is_recorded():
    with trace.get_tracer("shop").start_as_current_span("import") as origin:
        Job.objects.enqueue("test.flaky", {"failures": 1})
    drain()
    first, second = runs()
    assert [s.attributes["jobq.attempt"] for s in (first, second)] == [1, 2]
    assert all(s.links[0].context.span_id == origin.get_span_context().span_id for s in (first, second))
    assert first.status.status_code is StatusCode.ERROR and "ConnectionError" in first.status.description
    assert [e.name for e in first.events] == ["exception"]
    assert second.status.status_code is not StatusCode.ERROR and not second.events


def test_an_async_run_is_traced_over_its_whole_await():
    Job.objects.enqueue("test.async_add", {"a": 2, "b": 3})
    drain()
    (span,) = runs()
    assert span.attributes["jobq.task"] == "test.async_add" and not span.links  # enqueued outside a span
    assert Job.objects.get(task="test.async_add").trace_context is None
    assert span.end_time - span.start_time > 0


def test_the_django_tasks_backend_is_traced_too():
    with trace.get_tracer("shop").start_as_current_span("view") as origin:
        result = dtasks.add.enqueue(2, 3)
    drain()
    (span,) = runs()
    assert span.attributes["messaging.message.id"] == result.id
    assert span.links[0].context.span_id == origin.get_span_context().span_id


def test_without_opentelemetry_nothing_is_kept_or_traced(monkeypatch):
    monkeypatch.setattr(tracing, "_api", False)  # as if opentelemetry-api were not installed
    with trace.get_tracer("shop").start_as_current_span("view"):
        job_id = Job.objects.enqueue("test.echo", {"n": 1})
    assert Job.objects.get(id=job_id).trace_context is None
    drain()
    assert Job.objects.get(id=job_id).status == JobStatus.DONE and not runs()


def test_a_forged_trace_context_is_ignored_not_fatal():
    job_id = Job.objects.enqueue("test.echo", {"n": 1})
    Job.objects.filter(id=job_id).update(trace_context={"traceparent": "00-zz-not-a-trace\x01", "x": [1]})
    drain()
    (span,) = runs()
    assert not span.links and Job.objects.get(id=job_id).status == JobStatus.DONE
