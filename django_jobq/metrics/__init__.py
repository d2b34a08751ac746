"""Prometheus metrics (prometheus-client): what this process's workers did, and, on request, the
queue's figures read from the database.

``REGISTRY`` holds them: the worker's counters and histograms (``metrics.worker``, fed by the worker's
signals once ``metrics.worker.connect()`` ran), the process's own (CPU, memory, file descriptors), and
the database collector (``metrics.database``) once ``enable_database_metrics()`` ran. ``serve()``
exposes it on a port (``jobq_worker --metrics-port``); ``django_jobq.metrics.urls`` from a Django view.
Each process serves its own figures: Prometheus scrapes every worker process as a target of its own
and sums across them (``sum by (queue) (rate(jobq_jobs_succeeded_total[5m]))``).
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, start_http_server

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

_lock = threading.Lock()
_database: Any = None


def enable_database_metrics() -> None:
    """Add the database collector (queue depth, lag, dead letters, workers, sizes) to REGISTRY, once."""
    global _database
    from .database import DatabaseCollector

    with _lock:
        if _database is None:
            _database = DatabaseCollector()
            REGISTRY.register(_database)


def database_collector() -> Any:
    """The database collector enable_database_metrics() registered (None before)."""
    return _database


def serve(port: int, addr: str = "0.0.0.0") -> Any:
    """Serve REGISTRY at http://addr:port/metrics on a daemon thread; the server (``shutdown()``)."""
    server, _thread = start_http_server(port, addr=addr, registry=REGISTRY)
    return server
