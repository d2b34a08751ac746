import django_jobq
from bench import work


@django_jobq.task(name="bench.noop")
def noop() -> None:
    work.noop()


@django_jobq.task(name="bench.sleep")
def sleep() -> None:
    work.sleep()


@django_jobq.task(name="bench.latency")
def latency(key: int) -> None:
    work.record_start(key)


@django_jobq.task(name="bench.spin")
def spin(loops: int) -> int:
    return work.spin(loops)
