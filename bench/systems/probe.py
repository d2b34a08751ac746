"""Availability probes for peers whose import can fail after installing (a compiled dependency)."""

from __future__ import annotations

import importlib


def importable(*modules: str) -> str | None:
    """None if every module imports; otherwise the exception, as the reason to skip the system."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            return f"`import {module}` failed: {type(exc).__name__}: {exc}"
    return None
