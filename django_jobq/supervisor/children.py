"""A worker process a supervisor started: the process, its end of the socket pair shared with it, the
lines it sent (``ready``, ``recycle``), and how it ended."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .link import FD_ENV

# A child's reasons to be replaced while it still serves (it stops once its replacement is ready).
MAX_JOBS, MEMORY, RELOAD = "max-jobs", "memory", "reload"


@dataclass(eq=False)
class Child:
    """One worker process, from its start to its exit."""

    worker_id: str
    proc: subprocess.Popen[bytes]
    sock: socket.socket | None  # the supervisor's end; None once the child closed its end
    started_at: float  # monotonic
    step: int  # the restart policy's backoff step when it started
    generation: int  # the supervisor's reload generation when it started (SIGHUP moves it on)
    ready: bool = False  # the worker runs: it has claimed its id and started its threads
    retiring: str | None = None  # why it is being replaced (MAX_JOBS, MEMORY, RELOAD)
    retire_by: float | None = None  # stopped by then even if its replacement is not ready
    replacement: Child | None = None  # the process started to take its place
    replaces: Child | None = None  # the process this one takes the place of
    stopping: str | None = None  # why the supervisor sent it SIGTERM
    terms: int = 0  # stop signals sent: the first (SIGTERM) drains, the second (SIGINT) stops it at once
    metrics_port: int | None = None  # where it serves its figures (127.0.0.1), once it said so
    _pending: bytes = field(default=b"", repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def serving(self) -> bool:
        """It counts towards the wanted number of processes: neither being replaced nor stopping."""
        return self.retiring is None and self.stopping is None

    def __str__(self) -> str:
        return f"{self.worker_id} (pid {self.pid})"

    def read(self) -> list[str]:
        """The complete lines the child sent since the last call; at the end of its socket (it exited
        or closed it) the socket is closed and ``sock`` set to None."""
        if self.sock is None:
            return []
        try:
            data = self.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            data = b""
        if not data:
            self.close()
            return []
        *lines, self._pending = (self._pending + data).split(b"\n")
        self._pending = self._pending[-256:]  # a line is a word; never let one grow without bound
        return [line.decode("ascii", "replace").strip() for line in lines]

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def terminate(self) -> None:
        """SIGTERM: a first one drains; the second stops at once (releasing the running jobs), sent
        as SIGINT, which jobq_worker takes alike: two deliveries of one signal that arrive before
        the process's Python handler runs are folded into one call, and the worker would drain
        (until it is killed, its jobs left to their leases) where it was told to stop at once."""
        self.terms += 1
        self._signal(signal.SIGTERM if self.terms == 1 else signal.SIGINT)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # ended, not yet reaped
                self.proc.send_signal(sig)

    def status(self) -> str:
        """``exited 0`` or ``killed by SIGKILL``."""
        code = self.proc.returncode
        if code is not None and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited {code}"


def spawn(argv: Sequence[str], env: Mapping[str, str]) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start ``argv`` as a fresh interpreter (fork and exec, nothing of this process's state carried
    over) with one end of a new socket pair, its descriptor in the environment as FD_ENV, in a
    process group of its own (a terminal's Ctrl-C reaches only the supervisor, which forwards it).
    Returns the process and the supervisor's end, non-blocking."""
    ours, theirs = socket.socketpair()
    try:
        proc = subprocess.Popen(
            list(argv),
            env={**env, FD_ENV: str(theirs.fileno())},
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            process_group=0,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    ours.setblocking(False)
    return proc, ours


def environment() -> dict[str, str]:
    """This process's environment for a child, with this interpreter's first import path (a
    manage.py's directory) ahead on PYTHONPATH, as ``python -m django`` starts from the working
    directory instead."""
    env = {k: v for k, v in os.environ.items() if k != FD_ENV}
    first = sys.path[0] if sys.path else ""
    if first:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (first, env.get("PYTHONPATH", "")) if p)
    return env
