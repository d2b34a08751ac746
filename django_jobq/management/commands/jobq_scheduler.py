import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobq.exceptions import ConfigurationError
from django_jobq.management import metrics_options
from django_jobq.scheduler import BATCH, Scheduler


class Command(BaseCommand):
    help = "Publish the due ticks of every schedule; each tick once, however many schedulers run."

    def add_arguments(self, parser: CommandParser) -> None:
        metrics_options.add_arguments(parser)
        parser.add_argument("--once", action="store_true", help="sync and one pass, then exit (for cron)")
        parser.add_argument(
            "--interval", type=float, default=None, help="seconds between passes (default: 1)"
        )
        parser.add_argument(
            "--batch", type=int, default=BATCH, help=f"schedules locked per transaction (default: {BATCH})"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with metrics_options.serving(options):
            self._run(options)

    def _run(self, options: dict[str, Any]) -> None:
        try:
            scheduler = Scheduler(interval=options["interval"], batch=options["batch"])
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        if options["once"]:
            scheduler.sync()
            result = scheduler.run_once()
            self.stdout.write(
                f"published {result.jobs} job(s) for {len(result.published)} schedule(s)"
                f", started {len(result.started)}, failed {len(result.failed)}"
            )
            return
        stopping = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopping.set())
        scheduler.run(stopping)
