"""The registry sits below the models: it must never import a model or a manager."""

import ast
from pathlib import Path

import pytest

import django_jobq.registry as registry

pytestmark = [pytest.mark.unit]

FORBIDDEN = ("models", "managers", "admin", "worker", "backend", "tasks")


def _imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
            names.extend("." * node.level + alias.name for alias in node.names if not node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_registry_imports_no_model_or_manager_outside_type_checking():
    tree = ast.parse(Path(registry.__file__).read_text())
    guarded = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    runtime = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in guarded
    ]
    modules = []
    for node in runtime:
        if isinstance(node, ast.ImportFrom):
            modules.append(node.module or "")
        else:
            modules.extend(alias.name for alias in node.names)
    offending = [m for m in modules if m.split(".")[-1] in FORBIDDEN or m.startswith("django.db")]
    assert modules  # the parse saw the imports
    assert offending == []


def test_every_import_of_the_registry_is_a_plain_module():
    names = _imported_modules(Path(registry.__file__))
    assert ".exceptions" in names
    assert not any(name.endswith(("models", "managers")) for name in names)
