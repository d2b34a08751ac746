import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_jobq.conf import on_database
from django_jobq.database_context import carrying_database
from django_jobq.management import metrics_options
from django_jobq.reaper import Reaper
from django_jobq.shards import every_database


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
        # one reaper per database (django_jobq.shards), each with its own leadership there
        reapers: dict[str, Reaper] = {}
        for alias in every_database():
            with on_database(alias):
                reapers[alias] = Reaper(interval=options["interval"])
        if options["once"]:
            for alias, reaper in reapers.items():
                with on_database(alias):
                    self._once(reaper, alias if len(reapers) > 1 else None)
            return
        stopping = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopping.set())
        if len(reapers) == 1:
            next(iter(reapers.values())).run(stopping)
            return
        threads = []
        for alias, reaper in reapers.items():
            with on_database(alias):
                run = carrying_database(reaper.run)
            threads.append(threading.Thread(target=run, args=(stopping,), name=f"jobq-reaper-{alias}"))
            threads[-1].start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)

    def _once(self, reaper: Reaper, alias: str | None) -> None:
        where = "" if alias is None else f"database {alias!r}: "
        if not reaper.acquire():
            self.stdout.write(f"{where}another reaper is acting; nothing done")
            return
        try:
            result = reaper.run_until_clear()
        finally:
            reaper.release()
        self.stdout.write(
            f"{where}reaped {len(result.reaped)}, pruned {result.pruned_done} done, {result.pruned_dead} dead and "
            f"{result.pruned_cancelled} cancelled job(s)"
            f", {result.pruned_marks} expired inbound mark(s)"
            f" and {result.pruned_rates} idle rate-limit key(s)"
        )
