"""Tags on every engine: what enqueue, enqueue_many and enqueue_or_get store, cancel_many by tags (a
job carrying every tag named), and hostile tags refused before anything is written."""

import pytest

from django_jobq.exceptions import InvalidJob
from django_jobq.managers.producing import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.tasks import get_task

pytestmark = [pytest.mark.contract, pytest.mark.django_db]


def tags_of(job_id: int) -> list[str] | None:
    return Job.objects.get(id=job_id).tags


@pytest.mark.p0
def test_every_enqueue_path_stores_the_tags_in_order_without_repeats():
    one = Job.objects.enqueue("test.noop", tags=["tenant:42", "report", "tenant:42"])
    keyed = Job.objects.enqueue("test.noop", dedupe_key="k1", tags=("a",))
    got, created = Job.objects.enqueue_or_get("test.noop", dedupe_key="k2", tags=["b"])
    few = Job.objects.enqueue_many([NewJob("test.noop", tags=["c", "d"]), NewJob("test.noop")])
    keyed_many = Job.objects.enqueue_many([NewJob("test.noop", dedupe_key="k3", tags=["e"])])
    bulk = Job.objects.enqueue_many([NewJob("test.noop", tags=[f"n:{i % 3}"]) for i in range(150)])  # COPY
    by_task = get_task("test.noop").using(tags=["f"]).enqueue()
    assert tags_of(one) == ["tenant:42", "report"]
    assert (tags_of(keyed), tags_of(got), created) == (["a"], ["b"], True)
    assert [tags_of(i) for i in few] == [["c", "d"], None]
    assert tags_of(keyed_many[0]) == ["e"]
    assert [tags_of(i) for i in bulk[:4]] == [["n:0"], ["n:1"], ["n:2"], ["n:0"]]
    assert tags_of(by_task) == ["f"]
    assert tags_of(Job.objects.enqueue("test.noop", tags=[])) is None  # no tags: NULL, outside the index


def test_a_replaced_holder_keeps_its_own_tags():
    first = Job.objects.enqueue("test.noop", {"n": 1}, dedupe_key="r", tags=["old"])
    assert (
        Job.objects.enqueue("test.noop", {"n": 2}, dedupe_key="r", on_duplicate="replace", tags=["new"])
        == first
    )
    assert tags_of(first) == ["old"] and Job.objects.get(id=first).payload == {"n": 2}


@pytest.mark.p0
def test_cancel_many_by_tags_takes_the_jobs_carrying_every_tag_named():
    both = Job.objects.enqueue("test.noop", tags=["tenant:42", "export"])
    tenant = Job.objects.enqueue("test.noop", queue="mail", tags=["tenant:42"])
    other = Job.objects.enqueue("test.noop", tags=["tenant:7", "export"])
    untagged = Job.objects.enqueue("test.noop")
    counts = Job.objects.cancel_many(tags=["export", "tenant:42"], by="ops")
    assert (counts.cancelled, counts.requested) == (1, 0)
    assert Job.objects.get(id=both).status == JobStatus.CANCELLED
    assert Job.objects.cancel_many(tags=["tenant:42"], queue="default").cancelled == 0  # mail only left
    running = Job.objects.claim("w1", queues=["mail"])
    assert running.id == tenant
    assert Job.objects.cancel_many(tags=["tenant:42"]).requested == 1
    assert Job.objects.cancel_many(ids=[other, untagged], tags=["tenant:7"]).cancelled == 1
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses[other] == JobStatus.CANCELLED and statuses[untagged] == JobStatus.PENDING


HOSTILE = [
    pytest.param("tenant:42", id="a string, not a list"),
    pytest.param(b"x", id="bytes"),
    pytest.param({"tenant": 42}, id="a dict"),
    pytest.param({"a", "b"}, id="a set (no order)"),
    pytest.param([42], id="not a string"),
    pytest.param([None], id="None inside"),
    pytest.param([""], id="empty"),
    pytest.param(["  "], id="blank"),
    pytest.param([" x"], id="surrounding spaces"),
    pytest.param(["a\x00b"], id="NUL"),
    pytest.param(["\ud800"], id="lone surrogate"),
    pytest.param(["x" * 1_000_000], id="1 MB"),
    pytest.param([f"t{i}" for i in range(10_000)], id="10,000 tags"),
    pytest.param([["nested"]], id="nested"),
]


@pytest.mark.p0
@pytest.mark.parametrize("tags", HOSTILE)
def test_hostile_tags_are_refused_before_anything_is_written(tags):
    kept = Job.objects.enqueue("test.noop", tags=["keep"])
    with pytest.raises(InvalidJob):
        Job.objects.enqueue("test.noop", tags=tags)
    with pytest.raises(InvalidJob, match="job 1: "):
        Job.objects.enqueue_many([NewJob("test.noop"), NewJob("test.noop", tags=tags)])
    with pytest.raises(InvalidJob, match="job 1: "):  # the COPY path aborts: nothing of the batch stays
        Job.objects.enqueue_many([NewJob("test.noop")] + [NewJob("test.noop", tags=tags)] * 150)
    with pytest.raises(InvalidJob):
        Job.objects.cancel_many(tags=tags)
    assert list(Job.objects.values_list("id", "status")) == [(kept, JobStatus.PENDING)]


def test_a_claimed_job_carries_its_tags_without_another_query(django_assert_num_queries):
    """Middleware (tenancy, tracing) reads job.tags on the worker: it comes with the claim."""
    Job.objects.enqueue("test.noop", tags=["tenant:42"])
    claimed = Job.objects.claim("w1")
    with django_assert_num_queries(0):
        assert claimed.tags == ["tenant:42"]
