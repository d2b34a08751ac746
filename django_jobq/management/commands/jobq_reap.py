import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_jobq.management import metrics_options
from django_jobq.reaper import Reaper


class Command(BaseCommand):
    help = "Return expired leases to the queue and prune old jobs; one reaper acts across all replicas."

    def add_arguments(self, parser: CommandParser) -> None:
        metrics_options.add_arguments(parser)
        parser.add_argument(
            "--once",
            action="store_true",
            help="one pass (more while a backlog remains), then exit (for cron)",
        )
        parser.add_argument(
            "--interval", type=float, default=None, help='seconds between passes (JOBQ["REAP_INTERVAL"])'
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with metrics_options.serving(options):
            self._run(options)

    def _run(self, options: dict[str, Any]) -> None:
        reaper = Reaper(interval=options["interval"])
        if options["once"]:
            if not reaper.acquire():
                self.stdout.write("another reaper is acting; nothing done")
                return
            try:
                result = reaper.run_until_clear()
            finally:
                reaper.release()
            self.stdout.write(
                f"reaped {len(result.reaped)}, pruned {result.pruned_done} done, {result.pruned_dead} dead and "
                f"{result.pruned_cancelled} cancelled job(s)"
                f", {result.pruned_marks} expired inbound mark(s)"
                f" and {result.pruned_rates} idle rate-limit key(s)"
            )
            return
        stopping = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopping.set())
        reaper.run(stopping)
