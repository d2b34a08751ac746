"""When a supervisor starts a worker process again: at once after an unplanned exit, with exponential
backoff once processes are in a crash loop (several unplanned exits within the window, dying soon after
they start), and the limit on restarts within that window. Pure logic; the caller passes the time."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

EARLY_EXIT_SECONDS = 10.0  # a process that ends sooner than this after its start died young
CRASH_LOOP_EXITS = 3  # unplanned exits within the window, the last of a process that died young: a crash loop
BACKOFF_FIRST = 1.0  # seconds before the first start again of a crash loop; doubled at each step
BACKOFF_CAP = 30.0  # the longest wait between starts
EXIT_RESTART_LIMIT = 4  # the supervisor's exit status after more than --max-restarts in --restart-window


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What to do about one unplanned exit."""

    delay: float  # seconds until processes may be started again
    step: int  # the backoff step now (0: not in a crash loop)
    new_step: bool  # this exit began a new step of a crash loop (logged once per step)
    recent: int  # unplanned exits within the window, this one included
    give_up: bool  # more than max_restarts within the window: stop everything


class RestartPolicy:
    """Counts unplanned exits. A process is started again at once, unless processes are in a crash
    loop: it begins at an exit within ``early`` seconds of its process's start that makes
    ``loop_exits`` unplanned exits within ``window`` seconds, and goes on while processes die that
    young. Each such exit moves the backoff one step up (first ``first`` seconds, doubling, at most
    ``cap``), once per step: processes started before the current step began (siblings dying of the
    same cause) do not move it again. An exit after a longer life ends the crash loop (the backoff is
    reset). More than ``max_restarts`` unplanned exits within ``window`` seconds: give up."""

    def __init__(
        self,
        *,
        max_restarts: int,
        window: float,
        early: float = EARLY_EXIT_SECONDS,
        loop_exits: int = CRASH_LOOP_EXITS,
        first: float = BACKOFF_FIRST,
        cap: float = BACKOFF_CAP,
    ) -> None:
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, not {max_restarts}")
        if not window > 0:
            raise ValueError(f"window must be > 0, not {window}")
        if not (early >= 0 and loop_exits >= 1 and 0 < first <= cap):
            raise ValueError("need early >= 0, loop_exits >= 1 and 0 < first <= cap")
        self.max_restarts, self.window = max_restarts, window
        self.early, self.loop_exits, self.first, self.cap = early, loop_exits, first, cap
        self.step = 0  # the current backoff step; a process records it as it starts
        self.not_before = float("-inf")  # no process starts before this time
        self._exits: deque[float] = deque()

    def backoff(self, step: int) -> float:
        """The wait before starting again at ``step`` (0: none)."""
        return 0.0 if step <= 0 else min(self.cap, self.first * 2 ** (step - 1))

    def may_start(self, now: float) -> bool:
        return now >= self.not_before

    def unplanned_exit(self, *, now: float, started_at: float, step_at_start: int) -> Verdict:
        """Record a process that ended without being asked to (crash, signal, stuck lane): started at
        ``started_at`` when the backoff was at ``step_at_start``."""
        self._exits.append(now)
        while self._exits and self._exits[0] <= now - self.window:
            self._exits.popleft()
        new_step = False
        if now - started_at >= self.early:
            self.step = 0
        elif (self.step > 0 or len(self._exits) >= self.loop_exits) and step_at_start >= self.step:
            self.step += 1
            new_step = True
            self.not_before = max(self.not_before, now + self.backoff(self.step))
        return Verdict(
            delay=max(0.0, self.not_before - now),
            step=self.step,
            new_step=new_step,
            recent=len(self._exits),
            give_up=len(self._exits) > self.max_restarts,
        )
