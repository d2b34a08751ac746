"""The worker, split by responsibility: lanes (lanes.py), the dispatcher (dispatch.py), slots and the
job runner (slots.py, runner.py), the heartbeat and watchdog (heartbeat.py), the side writer
(side.py), and the Worker that starts and drains them (core.py)."""

from .core import Worker
from .heartbeat import EXIT_STUCK
from .lanes import ALL_QUEUES, parse_lanes

__all__ = ["ALL_QUEUES", "EXIT_STUCK", "Worker", "parse_lanes"]
