"""Composing jobs: a task signature (a task with its arguments), chains and groups, and how they
become one graph of jobs (managers/graphs.py), enqueued in one transaction."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..exceptions import InvalidJob, WorkflowTooLarge

if TYPE_CHECKING:
    from ..managers.graphs import GraphNode

MAX_NESTING = 32  # chains and groups inside each other, at most


@dataclass(frozen=True, slots=True)
class Signature:
    """A task and the arguments of one job of it, not enqueued yet: ``send_receipt.s(order_id=1)``,
    or ``Signature("shop.send_receipt", {"order_id": 1})`` by name. Options as for enqueue (queue,
    priority, run_at, max_attempts, concurrency_key, tags); a workflow's jobs take no dedupe keys."""

    task: str
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    run_at: dt.datetime | None = None
    max_attempts: int | None = None
    concurrency_key: str | None = None
    tags: Sequence[str] | None = None

    def node(self, after: tuple[int, ...], on_dependency_failure: str) -> GraphNode:
        from ..managers.graphs import GraphNode  # the data layer, loaded when a workflow is built

        return GraphNode(
            self.task, self.payload, queue=self.queue, priority=self.priority, run_at=self.run_at,
            max_attempts=self.max_attempts, concurrency_key=self.concurrency_key, tags=self.tags,
            after=after, on_dependency_failure=on_dependency_failure,
        )  # fmt: skip

    def enqueue(self, *, name: str = "", on_dependency_failure: str = "cancel") -> Any:
        return _enqueue(self, name, on_dependency_failure)


@dataclass(frozen=True, slots=True)
class Chain:
    """Steps run one after another: each waits for the whole of the step before it."""

    steps: tuple[Any, ...]

    def enqueue(self, *, name: str = "", on_dependency_failure: str = "cancel") -> Any:
        return _enqueue(self, name, on_dependency_failure)


@dataclass(frozen=True, slots=True)
class Group:
    """Members run side by side; ``then`` (a signature, chain or group) runs once every member has
    finished, succeeded or not (``then_on_failure="run"``, a batch's callback), or only when all of
    them succeeded (``"cancel"``)."""

    members: tuple[Any, ...]
    then: Any = None
    then_on_failure: str = "run"

    def enqueue(self, *, name: str = "", on_dependency_failure: str = "cancel") -> Any:
        return _enqueue(self, name, on_dependency_failure)


def chain(*steps: Any) -> Chain:
    """``chain(a, b, c)``: b after a, c after b; a step may be a signature, a chain or a group."""
    if not steps:
        raise InvalidJob("chain() needs at least one step")
    return Chain(tuple(steps))


def group(*members: Any, then: Any = None, then_on_failure: str = "run") -> Group:
    """``group(a, b, c, then=callback)``: a, b and c side by side, then the callback, exactly once."""
    if not members:
        raise InvalidJob("group() needs at least one member")
    if then_on_failure not in ("cancel", "run"):
        raise InvalidJob(f"then_on_failure must be 'cancel' or 'run', not {then_on_failure!r:.100}")
    return Group(tuple(members), then, then_on_failure)


def graph_nodes(item: Any, on_dependency_failure: str = "cancel") -> list[GraphNode]:
    """The jobs of ``item`` in an order where each comes after what it waits for."""
    from ..managers.graphs import policy

    nodes: list[GraphNode] = []
    _place(item, (), policy(on_dependency_failure), policy(on_dependency_failure), nodes, 0)
    return nodes


def _place(
    item: Any, after: tuple[int, ...], entry: str, default: str, nodes: list[GraphNode], depth: int
) -> tuple[int, ...]:
    """Append ``item``'s jobs, its first ones waiting for ``after`` under policy ``entry``; the
    indexes of its last ones (what a next step waits for)."""
    if depth > MAX_NESTING:
        raise WorkflowTooLarge(f"chains and groups may be nested at most {MAX_NESTING} deep")
    if isinstance(item, Signature):
        nodes.append(item.node(after, entry))
        return (len(nodes) - 1,)
    if isinstance(item, Chain):
        last = after
        for i, step in enumerate(item.steps):
            last = _place(step, last, entry if i == 0 else default, default, nodes, depth + 1)
        return last
    if isinstance(item, Group):
        ends: tuple[int, ...] = ()
        for member in item.members:
            ends += _place(member, after, entry, default, nodes, depth + 1)
        if item.then is not None:
            ends = _place(item.then, ends, item.then_on_failure, default, nodes, depth + 1)
        return ends
    raise InvalidJob(
        f"a workflow step must be a task signature (task.s(...)), a chain or a group, not {type(item).__name__}"
    )


def _enqueue(item: Any, name: str, on_dependency_failure: str) -> Any:
    from ..models import Job
    from .handle import Workflow

    nodes = graph_nodes(item, on_dependency_failure)
    enqueued = Job.objects.enqueue_graph(nodes, workflow=name or "workflow")
    assert enqueued.workflow_id is not None
    return Workflow(enqueued.workflow_id, enqueued.ids)
