"""A supervised worker's side of the socket its supervisor gave it: it says ``ready`` once the worker
runs and ``recycle`` once it has finished --max-jobs jobs (it keeps working until the supervisor,
its replacement started, sends SIGTERM); it hears ``state {json}`` lines, the supervisor's own
figures (its id, restarts, last exit), which the worker's heartbeat records for the admin and
jobq_stats; at the socket's end (the supervisor is gone, even killed) it drains and exits, so no
orphan keeps claiming jobs."""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import threading
from typing import Any, Protocol

logger = logging.getLogger("django_jobq.supervisor")

FD_ENV = "JOBQ_SUPERVISOR_FD"  # the descriptor of a supervised worker's socket
METRICS_ENV = "JOBQ_SUPERVISOR_METRICS"  # "1": serve this process's figures on a local port, say which
READY, RECYCLE = b"ready\n", b"recycle\n"
STATE = b"state "  # + a JSON object + newline, from the supervisor
MAX_LINE = 4096  # bytes: a longer line from the supervisor is dropped
POLL_SECONDS = 0.2


class Supervised(Protocol):
    """What the link needs of a worker (django_jobq.worker.Worker)."""

    worker_id: str
    supervision: dict[str, Any] | None
    started: threading.Event
    stopping: threading.Event
    finished: threading.Event

    @property
    def processed(self) -> int: ...

    def stop(self) -> None: ...


def from_environment() -> socket.socket | None:
    """The socket named by FD_ENV (removed from the environment, so that nothing this process starts
    inherits a stale descriptor), or None when no supervisor started this process. ValueError when the
    variable names no open socket."""
    value = os.environ.pop(FD_ENV, None)
    if value is None:
        return None
    try:
        fd = int(value)
        sock = socket.socket(fileno=fd)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{FD_ENV}={value!r} names no open socket: {exc}") from None
    os.set_inheritable(fd, False)
    return sock


class Link(threading.Thread):
    """The thread that talks to the supervisor for ``worker``; ``recycle_after`` is --max-jobs."""

    def __init__(
        self,
        sock: socket.socket,
        worker: Supervised,
        recycle_after: int | None,
        metrics_port: int | None = None,
    ) -> None:
        super().__init__(name="jobq-supervisor-link", daemon=True)
        self.sock, self.worker, self.recycle_after = sock, worker, recycle_after
        self.metrics_port = metrics_port
        self._pending = b""

    def run(self) -> None:
        worker, ready_sent, recycle_sent = self.worker, False, False
        try:
            while not worker.finished.is_set():
                if not ready_sent and worker.started.is_set():
                    if self.metrics_port is not None:
                        self._send(f"metrics {self.metrics_port}\n".encode())
                    ready_sent = self._send(READY)
                if (
                    not recycle_sent
                    and self.recycle_after is not None
                    and worker.processed >= self.recycle_after
                ):
                    logger.info("worker %s: %d job(s) done, asking the supervisor to replace it",
                                worker.worker_id, worker.processed)  # fmt: skip
                    recycle_sent = self._send(RECYCLE)
                readable, _, _ = select.select([self.sock], [], [], POLL_SECONDS)
                if readable:
                    data = self.sock.recv(MAX_LINE)
                    if not data:
                        self._orphaned()
                        return
                    self._heard(data)
        except OSError:  # the supervisor's end is gone
            self._orphaned()
        finally:
            self.sock.close()

    def _heard(self, data: bytes) -> None:
        """Keep the latest ``state`` the supervisor sent (a malformed or oversized line is dropped)."""
        *lines, self._pending = (self._pending + data).split(b"\n")
        if len(self._pending) > MAX_LINE:
            self._pending = b""
        for line in lines:
            if line.startswith(STATE) and len(line) <= MAX_LINE:
                try:
                    state = json.loads(line[len(STATE) :])
                except ValueError:
                    continue
                if isinstance(state, dict):
                    self.worker.supervision = state

    def _send(self, line: bytes) -> bool:
        self.sock.sendall(line)
        return True

    def _orphaned(self) -> None:
        if not self.worker.stopping.is_set():
            logger.warning("worker %s: its supervisor is gone; draining and exiting", self.worker.worker_id)
            self.worker.stop()
