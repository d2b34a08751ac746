"""Retry delays: a deterministic exponential ceiling and full jitter below it."""

import random


def compute_backoff(attempt: int, base: float = 5, cap: float = 600) -> float:
    """The ceiling for the delay after failed ``attempt`` (1-based): base, 2·base, 4·base, … capped."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    # Bound the exponent so huge attempt numbers cannot overflow a float.
    return float(min(cap, base * 2 ** min(attempt - 1, 64)))


def full_jitter(
    attempt: int, base: float = 5, cap: float = 600, *, rng: random.Random | None = None
) -> float:
    """A delay drawn uniformly from [0, compute_backoff(attempt)] ("full jitter")."""
    return (rng or random).uniform(0, compute_backoff(attempt, base, cap))


class RetryPolicy:
    """How a task's failures are retried: backoff ceiling and which exceptions give up at once."""

    __slots__ = ("base", "cap", "permanent")

    def __init__(
        self, *, base: float = 5, cap: float = 600, permanent: tuple[type[BaseException], ...] = ()
    ) -> None:
        if base <= 0 or cap <= 0:
            raise ValueError("base and cap must be positive")
        self.base, self.cap, self.permanent = base, cap, tuple(permanent)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the retry that follows failed ``attempt``."""
        return full_jitter(attempt, self.base, self.cap, rng=rng)

    def __repr__(self) -> str:
        return f"RetryPolicy(base={self.base}, cap={self.cap}, permanent={self.permanent})"
