"""A worker process of one system: ``python -m bench.worker SYSTEM --database URL --slots N ...``.

Started (and stopped with SIGTERM) by the measurement process; it writes its ready file once its
system's worker is configured and about to start its loop.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from pathlib import Path

from bench.systems import SYSTEMS


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.worker")
    parser.add_argument("system", choices=sorted(SYSTEMS))
    parser.add_argument("--database", required=True)
    parser.add_argument("--slots", type=int, required=True, help="concurrency of this process")
    parser.add_argument("--total", type=int, required=True, help="concurrency of all processes together")
    parser.add_argument("--ready", type=Path, required=True)
    args = parser.parse_args(argv)

    def ready() -> None:
        tmp = args.ready.with_suffix(".tmp")
        tmp.write_text(str(os.getpid()))
        tmp.rename(args.ready)

    _exit_with_parent()
    SYSTEMS[args.system](args.database).serve(args.slots, args.total, ready)


def _exit_with_parent() -> None:
    """If the measurement process dies without stopping us, end this worker's process group (this
    process and any pool it started), so no worker outlives its measurement."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="bench-parent-watch", daemon=True).start()


if __name__ == "__main__":
    main()
