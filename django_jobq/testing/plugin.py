"""pytest fixtures (``pytest_plugins = ["django_jobq.testing.plugin"]`` in a conftest.py). Use them
with pytest-django's database access (``db``, ``transactional_db`` or ``@pytest.mark.django_db``)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from . import assert_enqueued, assert_not_enqueued, drain, eager, enqueued, run_jobs


@pytest.fixture
def jobq() -> SimpleNamespace:
    """``jobq.run()``, ``jobq.drain()``, ``jobq.enqueued()``, ``jobq.assert_enqueued()``,
    ``jobq.assert_not_enqueued()`` and ``jobq.eager()``: django_jobq.testing's helpers."""
    return SimpleNamespace(
        run=run_jobs, drain=drain, enqueued=enqueued, assert_enqueued=assert_enqueued,
        assert_not_enqueued=assert_not_enqueued, eager=eager,
    )  # fmt: skip


@pytest.fixture
def jobq_eager() -> Iterator[None]:
    """Eager mode for the whole test: every enqueue returns after the due jobs ran."""
    with eager():
        yield
