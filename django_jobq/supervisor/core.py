"""The supervisor: keeps --processes worker processes running, each a fresh interpreter with a worker
id of its own (``<supervisor id>/<n>``, n counting up). A process that ends unasked is started again
(with backoff while they die young; too many within the window ends the supervisor); one over
--max-jobs or --max-memory, or every one on SIGHUP, is replaced: the new process starts first and the
old one drains once the new one runs. It opens no database connection: each process records what the
supervisor tells it of itself (state(): restarts, the last exit) with its own heartbeat."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import logging
import os
import select
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import children, link, memory
from .children import MAX_JOBS, MEMORY, RELOAD, Child
from .policy import EXIT_RESTART_LIMIT, RestartPolicy, Verdict

logger = logging.getLogger("django_jobq.supervisor")

EXIT_STUCK = 3  # a worker's exit status when a lane stayed wedged (django_jobq.worker.EXIT_STUCK)
RETIRE_SECONDS = 30.0  # a process over --max-memory stops by then even if its replacement is not ready
HARD_STOP_SECONDS = 10.0  # after a second SIGTERM/SIGINT, processes still running then are killed
SAMPLE_SECONDS = 1.0  # between two readings of the processes' resident memory
TICK_SECONDS = 0.25  # the longest the loop sleeps (signals and messages wake it at once)
REASONS = {MAX_JOBS: "recycled after --max-jobs", MEMORY: "recycled for memory", RELOAD: "reloaded"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What the supervisor keeps running (built and checked by options.plan)."""

    supervisor_id: str
    processes: int
    max_restarts: int
    restart_window: float
    max_memory: float | None = None  # MiB of resident memory per process
    max_jobs: int | None = None  # only shown: the processes count their jobs themselves
    burst: bool = False  # a process that exits 0 unasked is done, not replaced
    grace: float = 30.0  # only shown: the processes drain within it
    metrics_port: int | None = None  # serve the processes' figures there (supervisor/metrics.py)
    metrics_addr: str = "0.0.0.0"


class Supervisor:
    """Run with ``run()`` in the main thread (it handles SIGTERM, SIGINT and SIGHUP); ``argv(worker_id)``
    is the command line of one worker process."""

    def __init__(
        self, plan: Plan, argv: Callable[[str], list[str]], env: Mapping[str, str] | None = None
    ) -> None:
        self.plan, self.argv = plan, argv
        self.env = dict(children.environment() if env is None else env)
        if plan.metrics_port is not None:  # each process serves its figures on a port of its own
            self.env[link.METRICS_ENV] = "1"
        self.policy = RestartPolicy(max_restarts=plan.max_restarts, window=plan.restart_window)
        self.children: list[Child] = []
        self.target = plan.processes  # processes wanted; --burst lowers it as processes finish
        self.generation = 0  # moved on by SIGHUP: processes of an older one are replaced
        self.stopping: str | None = None  # why the supervisor stops
        self.exit_code = 0
        self.started = self.unplanned = 0
        self.recycled: Counter[str] = Counter()
        self._numbers = itertools.count(1)
        self._signals: list[int] = []
        self._hard = False
        self._kill_at: float | None = None
        self._next_sample = 0.0
        self.started_at = dt.datetime.now(dt.UTC)
        self.last_exit: str | None = None  # the last worker process's end, for state()

    @property
    def id(self) -> str:
        return self.plan.supervisor_id

    def banner(self) -> str:
        p = self.plan
        recycle = [f"after --max-jobs {p.max_jobs}"] if p.max_jobs is not None else []
        if p.max_memory is not None:
            recycle.append(f"above --max-memory {p.max_memory:g} MiB")
        return (
            f"supervisor {self.id} started: {p.processes} worker process(es) ({self.id}/1, ...)"
            + (f", each replaced {' or '.join(recycle)}" if recycle else "")
            + f"; at most {p.max_restarts} unplanned exit(s) within {p.restart_window:g}s"
            + (", --burst" if p.burst else "")
        )

    def state(self) -> dict[str, Any]:
        """What each worker process records of its supervisor (link.STATE): the admin's workers page
        and jobq_stats group the processes under it."""
        return {
            "id": self.id, "host": socket.gethostname(), "pid": os.getpid(),
            "started_at": self.started_at.isoformat(timespec="seconds"), "processes": self.target,
            "started": self.started, "restarts": self.unplanned, "recycled": sum(self.recycled.values()),
            "last_exit": self.last_exit,
        }  # fmt: skip

    def metrics_ports(self) -> list[tuple[str, int | None]]:
        """(worker id, local metrics port) of each running process, the port None until the process
        has said it (read by the endpoint's thread: a copy of the list)."""
        return [(c.worker_id, c.metrics_port) for c in list(self.children)]

    def _broadcast(self) -> None:
        """Send state() to every process (one that does not read it now gets the next one)."""
        line = b"state " + json.dumps(self.state(), separators=(",", ":")).encode() + b"\n"
        for child in self.children:
            if child.sock is not None:
                with contextlib.suppress(OSError):  # BlockingIOError: its buffer is full; gone: it ends
                    child.sock.send(line)

    def summary(self) -> str:
        """One line: what happened, for the end of the run."""
        recycled = ", ".join(f"{n} {REASONS[why]}" for why, n in sorted(self.recycled.items()))
        return (
            f"supervisor {self.id} stopped ({self.stopping or 'every worker finished'}): "
            f"{self.started} worker process(es) started, {self.unplanned} unplanned exit(s)"
            + (f", {recycled}" if recycled else "")
            + f"; exit status {self.exit_code}"
        )

    # -- the loop --------------------------------------------------------------------------------------
    def run(self) -> int:
        """Supervise until stopped (or, with --burst, until every process has finished); the exit
        status: 0, or EXIT_RESTART_LIMIT."""
        wake, woken = socket.socketpair()
        wake.setblocking(False)
        woken.setblocking(False)
        previous_fd = signal.set_wakeup_fd(wake.fileno())
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        server = None
        try:
            if self.plan.metrics_port is not None:
                from . import metrics  # prometheus-client, only for an endpoint

                server = metrics.serve(self, self.plan.metrics_port, self.plan.metrics_addr)
            logger.info(self.banner())
            while self._step(woken):
                pass
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_fd)
            wake.close()
            woken.close()
            for child in self.children:  # only after an error: the processes see the end and drain
                child.close()
        return self.exit_code

    def _on_signal(self, signum: int, frame: object) -> None:
        self._signals.append(signum)  # handled by the loop, woken by the wake-up descriptor

    def _step(self, woken: socket.socket) -> bool:
        """One turn of the loop; False when there is nothing left to supervise."""
        socks = {c.sock: c for c in self.children if c.sock is not None}
        quick = any(c.sock is None for c in self.children)  # ended its link: its exit is near
        readable, _, _ = select.select([woken, *socks], [], [], 0.05 if quick else TICK_SECONDS)
        if woken in readable:
            try:
                while woken.recv(512):
                    pass
            except BlockingIOError:
                pass
        now = time.monotonic()
        while self._signals:
            self._on(self._signals.pop(0), now)
        for sock in readable:
            if (child := socks.get(sock)) is not None:
                for line in child.read():
                    self._message(child, line, now)
        for child in [c for c in self.children if c.proc.poll() is not None]:
            self._ended(child, now)
        if self.stopping is None:
            self._sample(now)
            self._roll()
            self._stop_replaced(now)
            self._fill(now)
        elif self._kill_at is not None and now >= self._kill_at:
            self._kill_all(f"still running {HARD_STOP_SECONDS:g}s after the second signal")
        return bool(self.children) or (self.stopping is None and self.target > 0)

    # -- signals ---------------------------------------------------------------------------------------
    def _on(self, signum: int, now: float) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            if self.stopping is None:
                self.generation += 1
                logger.info("supervisor %s: SIGHUP: replacing its %d worker process(es) one at a time",
                            self.id, len(self.children))  # fmt: skip
        elif self.stopping is None:
            self._stop(name, 0)
        elif not self._hard:
            self._hard = True
            self._kill_at = now + HARD_STOP_SECONDS
            logger.warning("supervisor %s: second %s: its worker processes stop at once and put their "
                           "running jobs back to PENDING", self.id, name)  # fmt: skip
            for child in self.children:
                while child.terms < 2:
                    child.terminate()
        else:
            self._kill_all(f"third {name}")

    def _stop(self, why: str, code: int) -> None:
        self.stopping, self.exit_code = why, code
        waiting = [c for c in self.children if c.terms == 0]
        if self.children:
            logger.info("supervisor %s: %s: stopping %d worker process(es); each finishes its running jobs "
                        "within --grace %gs", self.id, why, len(self.children), self.plan.grace)  # fmt: skip
        for child in waiting:
            child.stopping = child.stopping or "stop"
            child.terminate()

    def _kill_all(self, why: str) -> None:
        self._kill_at = None
        for child in self.children:
            logger.warning("supervisor %s: killing worker %s (%s); a job it still held is run again once "
                           "its lease expires", self.id, child, why)  # fmt: skip
            child.kill()

    # -- the processes ---------------------------------------------------------------------------------
    def _message(self, child: Child, line: str, now: float) -> None:
        if line == "ready":
            child.ready = True
            logger.info("supervisor %s: worker %s ready after %.1fs", self.id, child, now - child.started_at)
        elif line == "recycle":
            if self.stopping is None and child.serving:
                child.retiring = MAX_JOBS
                logger.info("supervisor %s: worker %s did --max-jobs %s job(s); starting its replacement",
                            self.id, child, self.plan.max_jobs)  # fmt: skip
        elif line.startswith("metrics ") and line[8:].isdigit() and 0 < int(line[8:]) < 65536:
            child.metrics_port = int(line[8:])
        elif line:
            logger.warning("supervisor %s: worker %s said %r", self.id, child, line[:80])

    def _fill(self, now: float) -> None:
        """Start the processes missing from the wanted number, unless the backoff holds them back."""
        missing = self.target - sum(c.serving for c in self.children)
        while missing > 0 and self.policy.may_start(now) and self.stopping is None:
            self._start(now)
            missing -= 1

    def _start(self, now: float) -> None:
        worker_id = f"{self.id}/{next(self._numbers)}"
        try:
            proc, sock = children.spawn(self.argv(worker_id), self.env)
        except OSError as exc:
            logger.error("supervisor %s: could not start worker %s: %s", self.id, worker_id, exc)
            self.unplanned += 1
            self._after(self.policy.unplanned_exit(now=now, started_at=now, step_at_start=self.policy.step))
            return
        child = Child(worker_id, proc, sock, now, self.policy.step, self.generation)
        retiree = next(
            (c for c in self.children if c.retiring and not c.stopping and not c.replacement), None
        )
        if retiree is not None:
            retiree.replacement, child.replaces = child, retiree
        self.children.append(child)
        self.started += 1
        self._broadcast()
        logger.info("supervisor %s: started worker %s%s", self.id, child,
                    f" to replace {retiree.worker_id} ({retiree.retiring})" if retiree else "")  # fmt: skip

    def _sample(self, now: float) -> None:
        """Replace a process above --max-memory: it stops once its replacement runs, or at the latest
        RETIRE_SECONDS later (also when it was already being replaced for another reason)."""
        if self.plan.max_memory is None or now < self._next_sample:
            return
        self._next_sample = now + SAMPLE_SECONDS
        for child in self.children:
            if child.stopping is not None or child.retire_by is not None:
                continue
            rss = memory.rss_mib(child.pid)
            if rss is None or rss <= self.plan.max_memory:
                continue
            then = "starting its replacement" if child.retiring is None else "it stops once replaced"
            child.retiring, child.retire_by = child.retiring or MEMORY, now + RETIRE_SECONDS
            logger.warning("supervisor %s: worker %s uses %.0f MiB, above --max-memory %g MiB; %s",
                           self.id, child, rss, self.plan.max_memory, then)  # fmt: skip

    def _roll(self) -> None:
        """After SIGHUP: replace the processes of older generations one at a time."""
        if any(c.retiring == RELOAD and not c.stopping for c in self.children):
            return
        stale = next((c for c in self.children if c.generation < self.generation and c.serving), None)
        if stale is not None:
            stale.retiring = RELOAD
            logger.info("supervisor %s: reloading worker %s; starting its replacement", self.id, stale)

    def _stop_replaced(self, now: float) -> None:
        """SIGTERM each process being replaced whose replacement runs (or, over --max-memory, has
        not come up in RETIRE_SECONDS)."""
        for child in self.children:
            if child.retiring is None or child.stopping is not None:
                continue
            if child.replacement is not None and child.replacement.ready:
                why = f"{child.replacement.worker_id} runs in its place"
            elif child.retire_by is not None and now >= child.retire_by:
                why = f"its replacement did not come up within {RETIRE_SECONDS:g}s"
            else:
                continue
            logger.info("supervisor %s: stopping worker %s (%s): %s", self.id, child,
                        REASONS[child.retiring], why)  # fmt: skip
            child.stopping = child.retiring
            child.terminate()

    def _ended(self, child: Child, now: float) -> None:
        try:
            self._account(child, now)
        finally:
            self._broadcast()

    def _account(self, child: Child, now: float) -> None:
        self.children.remove(child)
        child.close()
        if child.replaces is not None:  # the process it was to replace waits for another
            child.replaces.replacement = None
        if child.replacement is not None:
            child.replacement.replaces = None
        lived, status, code = now - child.started_at, child.status(), child.proc.returncode
        self.last_exit = f"{child.worker_id} {status} after {lived:.1f}s"
        if child.stopping is not None or self.stopping is not None:
            why = REASONS.get(child.stopping or "", "stopped")
            self.last_exit += f" ({why})"
            if child.stopping in REASONS:
                self.recycled[child.stopping] += 1
            logger.info("supervisor %s: worker %s %s after %.1fs (%s)", self.id, child, status, lived, why)
            return
        if self.plan.burst and code == 0:
            self.last_exit += " (nothing left to do, --burst)"
            self.target -= 1
            logger.info("supervisor %s: worker %s exited 0 after %.1fs: nothing left to do (--burst)",
                        self.id, child, lived)  # fmt: skip
            return
        reason = "stuck lane" if code == EXIT_STUCK else "crash" if code else "ended unasked"
        self.last_exit += f" ({reason})"
        self.unplanned += 1
        verdict = self.policy.unplanned_exit(now=now, started_at=child.started_at, step_at_start=child.step)
        logger.warning("supervisor %s: worker %s %s after %.1fs (%s); %d unplanned exit(s) within %gs "
                       "(--max-restarts %d)", self.id, child, status, lived, reason, verdict.recent,
                       self.plan.restart_window, self.plan.max_restarts)  # fmt: skip
        self._after(verdict)

    def _after(self, verdict: Verdict) -> None:
        if verdict.give_up:
            logger.error("supervisor %s: more than --max-restarts %d unplanned exits within %gs; giving up",
                         self.id, self.plan.max_restarts, self.plan.restart_window)  # fmt: skip
            self._stop("too many restarts", EXIT_RESTART_LIMIT)
        elif verdict.new_step:
            logger.warning("supervisor %s: crash loop: %d unplanned exits within %gs, worker processes "
                           "ending within %gs of starting; next start in %gs", self.id, verdict.recent,
                           self.plan.restart_window, self.policy.early, verdict.delay)  # fmt: skip
