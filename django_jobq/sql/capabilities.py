"""What each engine can do, declared in one place. A feature an engine lacks is refused where it is
used (ConfigurationError, naming the engine and the feature) or by a system check (jobq.E009), never
replaced by a different behaviour."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..exceptions import ConfigurationError


@dataclass(frozen=True, slots=True)
class Capabilities:
    """One engine's features (docs/reference/engines.md has the table)."""

    engine: str
    listen_notify: bool  # LISTEN/NOTIFY wake-ups across processes (else: polling and in-process wake-ups)
    many_hosts: bool  # workers on several hosts against one database
    queue_caps: bool  # JOBQ["QUEUES"][q]["MAX_RUNNING"]
    max_depth: bool  # JOBQ["QUEUES"][q]["MAX_DEPTH"]
    task_caps: bool  # @task(max_running=..., max_running_per_key=...)
    rate_limits: bool  # django_jobq.ratelimit and @task(rate_limit=...)
    wait_for: bool  # Job.objects.wait_for() / single-flight
    scheduler: bool  # JOBQ["SCHEDULES"], jobq_scheduler
    fair_queues: bool  # JOBQ["QUEUES"][q]["FAIR"]
    shards: bool  # JOBQ["SHARDS"]: queues on other databases, and the outbox that relays to them

    def require(self, feature: str, what: str) -> None:
        """ConfigurationError unless this engine has ``feature``; ``what`` names the call refused."""
        if not getattr(self, feature):
            raise ConfigurationError(
                f"{what} is not available on the {self.engine} engine ({feature}); "
                "see docs/reference/engines.md for what each engine supports"
            )

    def missing(self) -> list[str]:
        return [f.name for f in fields(self) if f.name != "engine" and not getattr(self, f.name)]


POSTGRESQL = Capabilities(
    engine="postgresql", listen_notify=True, many_hosts=True, queue_caps=True, max_depth=True,
    task_caps=True, rate_limits=True, wait_for=True, scheduler=True, fair_queues=True, shards=True,
)  # fmt: skip

SQLITE = Capabilities(
    engine="sqlite", listen_notify=False, many_hosts=False, queue_caps=False, max_depth=False,
    task_caps=False, rate_limits=False, wait_for=False, scheduler=True, fair_queues=True, shards=False,
)  # fmt: skip
