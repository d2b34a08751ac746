"""The metrics options every long-running command takes: --metrics-port, --metrics-addr, --metrics-db."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import CommandError, CommandParser


def add_arguments(parser: CommandParser) -> None:
    parser.add_argument(
        "--metrics-port", type=int, default=None,
        help="serve Prometheus metrics at http://ADDR:PORT/metrics (default: no endpoint)",
    )  # fmt: skip
    parser.add_argument(
        "--metrics-addr", default="0.0.0.0", help="the address --metrics-port listens on (default: 0.0.0.0)"
    )
    parser.add_argument(
        "--metrics-db", action="store_true",
        help="also serve the queue's figures read from the database (depth, lag, dead letters, workers)",
    )  # fmt: skip


@contextmanager
def serving(options: dict[str, Any]) -> Iterator[None]:
    """The endpoint the options ask for, while the command runs."""
    server = start(options)
    try:
        yield
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def start(options: dict[str, Any]) -> Any:
    """Start the endpoint the options ask for (and count this process's runs); the server, or None."""
    port = options.get("metrics_port")
    if port is None:
        if options.get("metrics_db"):
            raise CommandError("--metrics-db needs --metrics-port")
        return None
    if not 1 <= port <= 65535:
        raise CommandError(f"--metrics-port must be in [1, 65535], not {port}")
    # prometheus-client is loaded here, with an endpoint to serve, never by a process without one.
    from .. import metrics
    from ..metrics import worker as worker_metrics

    worker_metrics.connect()
    if options.get("metrics_db"):
        metrics.enable_database_metrics()
    try:
        return metrics.serve(port, options["metrics_addr"])
    except (OSError, ValueError) as exc:  # taken, not ours to bind, not an address
        raise CommandError(f"cannot serve metrics on {options['metrics_addr']}:{port}: {exc}") from None
