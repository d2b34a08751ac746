import random

import pytest

import django_jobq
from django_jobq import ConfigurationError, RetryPolicy, UnknownTask, compute_backoff
from django_jobq.backoff import full_jitter
from django_jobq.tasks import get_task

pytestmark = [pytest.mark.unit]


@pytest.mark.p0
def test_compute_backoff_is_the_deterministic_ceiling():
    assert [compute_backoff(a) for a in range(1, 6)] == [5, 10, 20, 40, 80]
    assert compute_backoff(10**6) == 600
    assert compute_backoff(3, base=1, cap=3) == 3
    with pytest.raises(ValueError):
        compute_backoff(0)


@pytest.mark.p0
def test_full_jitter_stays_below_the_ceiling_and_spreads():
    rng = random.Random(7)
    draws = [full_jitter(4, rng=rng) for _ in range(500)]
    assert all(0 <= d <= compute_backoff(4) for d in draws)
    assert max(draws) - min(draws) > compute_backoff(4) / 2  # spread over the range, not a fixed delay


def test_retry_policy_delay_uses_its_own_base_and_cap():
    policy = RetryPolicy(base=1, cap=2)
    assert all(0 <= policy.delay(9) <= 2 for _ in range(100))
    with pytest.raises(ValueError):
        RetryPolicy(base=0)


def test_task_registration_and_lookup():
    @django_jobq.task(name="unit.double", queue="math", priority=5, max_attempts=2)
    def double(x: int) -> int:
        return 2 * x

    assert get_task("unit.double") is double
    assert double(x=4) == 8  # still callable directly
    assert (double.queue, double.priority, double.max_attempts) == ("math", 5, 2)
    assert double.using(priority=1).options.priority == 1 and double.options.priority is None
    with pytest.raises(UnknownTask):
        get_task("unit.nothing")


def test_default_name_is_the_dotted_path():
    @django_jobq.task
    def plain() -> None:
        pass

    assert plain.name.endswith("test_default_name_is_the_dotted_path.<locals>.plain")


def test_one_name_cannot_name_two_functions():
    @django_jobq.task(name="unit.clash")
    def first() -> None:
        pass

    with pytest.raises(ConfigurationError, match="already registered"):

        @django_jobq.task(name="unit.clash")
        def second() -> None:
            pass


@pytest.mark.parametrize(
    "options", [{"queue": ""}, {"priority": 10**6}, {"max_attempts": 0}, {"timeout": -1}]
)
def test_bad_task_options_fail_at_definition(options):
    with pytest.raises(django_jobq.JobqError):
        django_jobq.task(name="unit.bad", **options)(lambda: None)


def test_unknown_task_names_the_registered_names_closest_to_it():
    @django_jobq.task  # registered under its default name, module.qualname
    def send_receipt() -> None:
        pass

    with pytest.raises(UnknownTask) as caught:
        get_task("shop.send_receipt")  # the same function name, another module path: suggested first
    assert f"; did you mean {send_receipt.name!r}" in str(caught.value)

    @django_jobq.task(name="unit.shop.tasks.send_refund")
    def send_refund() -> None:
        pass

    with pytest.raises(UnknownTask) as caught:
        get_task("unit.shop.send_refnud")  # a misspelling: the closest spelling
    assert "did you mean 'unit.shop.tasks.send_refund'" in str(caught.value)


def test_unknown_task_says_so_when_nothing_is_close(monkeypatch):
    from django_jobq import registry

    with pytest.raises(UnknownTask, match=r"none with a similar name"):
        get_task("zzzz")
    monkeypatch.setattr(registry, "_registry", {})
    with pytest.raises(UnknownTask, match=r"no task is registered at all"):
        get_task("shop.send_receipt")
