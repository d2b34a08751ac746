"""Workflows: jobs that wait for other jobs. ``chain(a, b, c)``, ``group(a, b, then=c)`` and
``Job.objects.enqueue(..., depends_on=[ids])``; a task reads what it waited for through
``context.dependency_results()``. See docs/guide/workflows.md."""

from .compose import MAX_NESTING, Chain, Group, Signature, chain, graph_nodes, group
from .handle import Workflow, WorkflowStatus

__all__ = [
    "MAX_NESTING", "Chain", "Group", "Signature", "Workflow", "WorkflowStatus", "chain", "graph_nodes",
    "group",
]  # fmt: skip
