"""Enqueueing jobs with dependencies: a graph of new jobs (the nodes, each after earlier nodes and/or
existing jobs) written in one transaction, edges included. The statements are sql/*/workflows.py;
a finished job's dependents are settled by the database's trigger (migration 0009)."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from .. import fairness, tracing, validation
from ..conf import jobq_settings
from ..exceptions import DependencyFailed, DependencyNotFound, InvalidJob, SpansDatabases, WorkflowTooLarge
from ..shards import choose, database_of_job, on_shard, shared_databases
from ..status import CANCELLED, DEAD, FINISHED
from .base import retrying_conflicts
from .producing_many import BulkProducerManager

POLICIES = ("cancel", "run")
MAX_DEPENDENCIES = 50_000  # dependencies of one job (a group's callback: its members)
MAX_GRAPH_JOBS = 50_000  # jobs enqueued in one graph (one workflow)
MAX_GRAPH_BYTES = 8 * 1024 * 1024  # their payloads together, as JSON text


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One job of a graph. ``after``: indexes of earlier nodes of the same graph it waits for;
    ``depends_on``: ids of existing jobs it waits for; ``on_dependency_failure``: "cancel" (it is
    cancelled when one of them ends DEAD or CANCELLED) or "run" (it runs anyway)."""

    task: str
    payload: dict[str, Any] | None = None
    queue: str | None = None
    priority: int | None = None
    run_at: dt.datetime | None = None
    max_attempts: int | None = None
    concurrency_key: str | None = None
    tags: Sequence[str] | None = None
    after: tuple[int, ...] = ()
    depends_on: tuple[int, ...] = ()
    on_dependency_failure: str = "cancel"


@dataclass(frozen=True, slots=True)
class EnqueuedGraph:
    workflow_id: int | None
    ids: list[int] = field(default_factory=list)  # the nodes' job ids, in the nodes' order


def dependency_ids(depends_on: Any) -> tuple[int, ...]:
    """Existing job ids, checked: positive integers, at most MAX_DEPENDENCIES, repeats dropped."""
    if isinstance(depends_on, str | bytes) or not isinstance(depends_on, Sequence | set | frozenset):
        raise InvalidJob(f"depends_on must be a list of job ids, not {type(depends_on).__name__}")
    if len(depends_on) > MAX_DEPENDENCIES:
        raise WorkflowTooLarge(
            f"a job may depend on at most {MAX_DEPENDENCIES:,} jobs, not {len(depends_on):,}"
        )
    ids = [validation.integer(i, "depends_on", 1, (1 << 63) - 1) for i in depends_on]
    return tuple(dict.fromkeys(ids))


def policy(value: Any) -> str:
    if value not in POLICIES:
        raise InvalidJob(f"on_dependency_failure must be 'cancel' or 'run', not {value!r:.100}")
    return str(value)


class GraphManager(BulkProducerManager):
    def enqueue(
        self,
        task: str,
        payload: dict[str, Any] | None = None,
        *,
        depends_on: Sequence[int] | None = None,
        on_dependency_failure: str = "cancel",
        **options: Any,
    ) -> int | None:
        """ProducerManager.enqueue, and with ``depends_on`` (existing job ids) a job that waits: it
        is WAITING until every one of them has finished, then PENDING; when one ends DEAD or
        CANCELLED it is cancelled (``on_dependency_failure="cancel"``) or runs anyway ("run").
        A job with dependencies takes no dedupe key."""
        if not depends_on:
            policy(on_dependency_failure)
            return super().enqueue(task, payload, **options)
        if options.get("dedupe_key") is not None or options.get("on_duplicate", "skip") != "skip":
            raise InvalidJob("a job with dependencies takes no dedupe_key (nor on_duplicate)")
        if options.get("shard_key") is not None:
            raise InvalidJob(
                "a job with dependencies takes no shard_key: it goes beside the jobs it waits for"
            )
        unknown = set(options) - {"queue", "priority", "run_at", "delay", "max_attempts", "concurrency_key",
                                  "tags", "dedupe_key", "on_duplicate", "dedupe_done", "dedupe_dead",
                                  "shard_key"}  # fmt: skip
        if unknown:
            raise TypeError(f"enqueue() got unexpected keyword arguments {sorted(unknown)}")
        run_at = options.get("run_at")
        if (delay := options.get("delay")) is not None:
            start = dt.datetime.now(dt.UTC) if run_at is None else validation.aware(run_at, "run_at")
            run_at = start + dt.timedelta(seconds=validation.seconds(delay, "delay"))
        node = GraphNode(
            task, payload, queue=options.get("queue"), priority=options.get("priority"), run_at=run_at,
            max_attempts=options.get("max_attempts"), concurrency_key=options.get("concurrency_key"),
            tags=options.get("tags"), depends_on=dependency_ids(depends_on),
            on_dependency_failure=on_dependency_failure,
        )  # fmt: skip
        return self.enqueue_graph([node]).ids[0]

    def enqueue_many(self, jobs: Any, *, on_duplicate: str = "skip") -> list[int]:
        """ProducerManager.enqueue_many; a batch where a NewJob has ``depends_on`` is written as one
        graph (those jobs wait for their dependencies; none of the batch may have a dedupe key)."""
        jobs = list(jobs)
        if not any(getattr(job, "depends_on", None) for job in jobs):
            return super().enqueue_many(jobs, on_duplicate=on_duplicate)
        nodes = []
        for index, job in enumerate(jobs):
            if job.dedupe_key is not None:
                raise InvalidJob(f"job {index}: a batch with dependencies takes no dedupe keys")
            if getattr(job, "fairness_key", None) is not None:
                raise InvalidJob(f"job {index}: a batch with dependencies takes no fairness keys")
            if getattr(job, "shard_key", None) is not None:
                raise InvalidJob(f"job {index}: a batch with dependencies takes no shard keys (one database)")
            nodes.append(GraphNode(
                job.task, job.payload, queue=job.queue, priority=job.priority, run_at=job.run_at,
                max_attempts=job.max_attempts, concurrency_key=job.concurrency_key, tags=job.tags,
                depends_on=dependency_ids(job.depends_on or ()),
                on_dependency_failure=job.on_dependency_failure,
            ))  # fmt: skip
        return self.enqueue_graph(nodes).ids

    def enqueue_graph(self, nodes: Sequence[GraphNode], *, workflow: str | None = None) -> EnqueuedGraph:
        """Write ``nodes`` in one transaction (the caller's, if any): a node with unfinished
        dependencies is WAITING, the others PENDING. ``workflow``: a name for a new workflow row that
        groups them (None: no workflow). Refused, nothing written: a node after itself or a later node
        (graphs are built in order, so no cycle can be written), an existing dependency that does not
        exist in this database, or one already DEAD or CANCELLED for a node whose policy is "cancel"."""
        nodes = list(nodes)
        if not nodes:
            raise InvalidJob("a workflow needs at least one job")
        if len(nodes) > MAX_GRAPH_JOBS:
            raise WorkflowTooLarge(f"a workflow holds at most {MAX_GRAPH_JOBS:,} jobs, not {len(nodes):,}")
        name = None if workflow is None else validation.string(workflow, "workflow name", 200)
        rows = self._graph_rows(nodes)
        external = sorted({i for node in nodes for i in node.depends_on})
        queues = {row["queue"] for row in rows}
        # a workflow's jobs share one database: that of the jobs they depend on, else one its queues share
        shared = shared_databases(queues)
        alias = database_of_job(external[0]) if external else choose(shared, None)
        if alias not in shared:
            raise SpansDatabases(
                f"job {external[0]} is on database {alias!r}, which holds none of queue(s) "
                f"{', '.join(sorted(queues))}: a job depends only on jobs of its own database"
            )
        for index, row in enumerate(rows):
            try:
                self._refuse_split_key(row["task"], row["queue"], row["concurrency_key"])
            except InvalidJob as exc:
                raise InvalidJob(f"job {index}: {exc} (a workflow's jobs share one database)") from None
        if elsewhere := sorted(i for i in external if database_of_job(i) != alias):
            raise SpansDatabases(
                f"job(s) {', '.join(map(str, elsewhere[:10]))} are on another database than this "
                f"workflow's queues ({alias!r}): a job depends only on jobs of its own database"
            )
        with on_shard(alias, writes_jobs=True):
            return self._write_graph(nodes, name, rows, external)

    def _write_graph(
        self, nodes: list[GraphNode], name: str | None, rows: list[dict[str, Any]], external: list[int]
    ) -> EnqueuedGraph:
        with transaction.atomic(using=self.connection.alias):
            found = self._flag(external) if external else {}
            if missing := [i for i in external if i not in found]:
                raise DependencyNotFound(
                    f"no job {', '.join(map(str, missing[:10]))}{' …' if len(missing) > 10 else ''} "
                    f"in database {self.connection.alias!r}: nothing was written"
                )
            self._check_room(Counter(row["queue"] for row in rows))
            ids = self._reserve(len(nodes))
            workflow_id = None
            if name is not None:
                workflow_id = int(self._execute(self._sql().INSERT_WORKFLOW, {"name": name})[0][0])
            edges = self._edges(nodes, ids, found)
            waiting = Counter(dependent for dependent, _, resolved in edges if not resolved)
            dependents = {dependency for _, dependency, _ in edges}
            conf = jobq_settings()
            fair = conf.fair_queues()
            params = {
                key: [row[key] for row in rows]
                for key in ("task", "queue", "payload", "priority", "run_at", "max_attempts",
                            "concurrency_key", "tags", "dependency_failure")
            }  # fmt: skip
            self._execute(
                self._sql().INSERT_NODES,
                {
                    "ids": ids, "tasks": params["task"], "queues": params["queue"],
                    "payloads": params["payload"], "priorities": params["priority"],
                    "run_ats": params["run_at"], "max_attempts": params["max_attempts"],
                    "concurrency_keys": params["concurrency_key"], "tags": params["tags"],
                    "waiting_ons": [waiting[i] for i in ids],
                    "has_dependents": [i in dependents for i in ids],
                    "dependency_failures": params["dependency_failure"],
                    "fairness_keys": [fairness.key_for(q, None, fair) for q in params["queue"]],
                    "workflow_id": workflow_id, "trace_context": tracing.carrier(),
                    "notify": conf.notify, "channel": conf.notify_channel,
                },
            )  # fmt: skip
            if edges:
                dependent_ids, dependency_ids_, resolved = (list(c) for c in zip(*edges, strict=True))
                self._execute(
                    self._sql().INSERT_EDGES,
                    {"dependents": dependent_ids, "dependencies": dependency_ids_, "resolved": resolved},
                )
        now = dt.datetime.now(dt.UTC)
        self._wake(sorted({
            row["queue"] for row, i in zip(rows, ids, strict=True)
            if not waiting[i] and (row["run_at"] is None or row["run_at"] <= now)
        }))  # fmt: skip
        return EnqueuedGraph(workflow_id, ids)

    def _graph_rows(self, nodes: list[GraphNode]) -> list[dict[str, Any]]:
        """Each node checked (InvalidJob names its index), as INSERT_NODES writes it."""
        rows, size = [], 0
        for index, node in enumerate(nodes):
            try:
                if not isinstance(node, GraphNode):
                    raise InvalidJob(f"expected a GraphNode, not {type(node).__name__}")
                task, queue, priority, max_attempts = self._options(
                    node.task, node.queue, node.priority, node.max_attempts
                )
                payload = self._payload(task, node.payload)
                size += len(payload)
                if size > MAX_GRAPH_BYTES:
                    raise WorkflowTooLarge(
                        f"a workflow's payloads may hold at most {MAX_GRAPH_BYTES:,} bytes of JSON together"
                    )
                for earlier in node.after:
                    if not isinstance(earlier, int) or isinstance(earlier, bool) or not 0 <= earlier < index:
                        raise InvalidJob(
                            f"a job may only wait for jobs placed before it in the workflow (got {earlier!r:.50}): "
                            "a dependency on itself or on a later job would be a cycle"
                        )
                if len(node.after) + len(node.depends_on) > MAX_DEPENDENCIES:
                    raise WorkflowTooLarge(f"a job may depend on at most {MAX_DEPENDENCIES:,} jobs")
                dependency_ids(node.depends_on)
                rows.append({
                    "task": task, "queue": queue, "priority": priority, "max_attempts": max_attempts,
                    "payload": payload,
                    "run_at": None if node.run_at is None else validation.aware(node.run_at, "run_at"),
                    "concurrency_key": None if node.concurrency_key is None
                    else validation.concurrency_key(node.concurrency_key),
                    "tags": None if node.tags is None else validation.tags_json(node.tags),
                    "dependency_failure": policy(node.on_dependency_failure)
                    if node.after or node.depends_on else None,
                })  # fmt: skip
            except InvalidJob as exc:
                raise type(exc)(f"job {index}: {exc}") from None
        return rows

    def _flag(self, external: list[int]) -> dict[int, int]:
        """The existing dependencies' status, each flagged has_dependents and locked until commit."""
        params = self._notify_params({"ids": external})
        rows = retrying_conflicts(
            self.connection.alias, lambda: self._execute(self._sql().FLAG_DEPENDENCIES, params)
        )
        return {int(row[0]): int(row[1]) for row in rows}

    def _reserve(self, count: int) -> list[int]:
        (value,) = self._execute(self._sql().RESERVE_IDS, {"count": count})[0]
        if isinstance(value, str):  # SQLite: a JSON array
            value = json.loads(value)
        return [int(i) for i in value]

    @staticmethod
    def _edges(nodes: list[GraphNode], ids: list[int], found: dict[int, int]) -> list[tuple[int, int, bool]]:
        """(dependent, dependency, resolved) for every edge; an existing dependency already finished
        is resolved at once, or refuses the graph when it failed and the node's policy is "cancel"."""
        edges = []
        for node, job_id in zip(nodes, ids, strict=True):
            for earlier in dict.fromkeys(node.after):
                edges.append((job_id, ids[earlier], False))
            for dependency in dict.fromkeys(node.depends_on):
                status = found[dependency]
                if status in (DEAD, CANCELLED) and node.on_dependency_failure == "cancel":
                    raise DependencyFailed(
                        f"job {dependency} has already ended {'DEAD' if status == DEAD else 'CANCELLED'}: "
                        "a job that is cancelled when a dependency fails would never run (requeue it "
                        "first, or enqueue with on_dependency_failure='run'); nothing was written"
                    )
                edges.append((job_id, dependency, status in FINISHED))
        return edges
