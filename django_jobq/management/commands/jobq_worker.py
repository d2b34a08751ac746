from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobq.conf import jobq_settings, on_database
from django_jobq.exceptions import ConfigurationError
from django_jobq.management import metrics_options
from django_jobq.supervisor import EXIT_RESTART_LIMIT, link
from django_jobq.supervisor import options as supervision
from django_jobq.worker import Worker, parse_lanes
from django_jobq.worker.group import WorkerGroup
from django_jobq.worker.lanes import lanes_by_database
from django_jobq.worker.startup import banner

if TYPE_CHECKING:
    from django_jobq.reaper import Reaper
    from django_jobq.scheduler import Scheduler
    from django_jobq.supervisor import Plan

# What only some workers use is imported where it is used: the metrics exporter (--metrics-port), the
# reaper (--reap), the scheduler (--scheduler) and the supervising loop (--processes, --max-memory).
# A plain worker's memory holds none of them (tests/unit/test_worker_imports.py).


class Command(BaseCommand):
    help = "Run a worker: claim jobs from the given queues and run them until stopped (SIGTERM drains)."

    def add_arguments(self, parser: CommandParser) -> None:
        metrics_options.add_arguments(parser)
        parser.add_argument(
            "--queues",
            default="*",
            help="QUEUE[:SLOTS],...; '*' is every queue not listed (default: '*', every queue)",
        )
        parser.add_argument(
            "--concurrency", type=int, default=4, help="slots for queues listed without :SLOTS"
        )
        parser.add_argument("--burst", action="store_true", help="exit once no job is due")
        parser.add_argument("--max-jobs", type=int, default=None, help="exit after this many jobs")
        parser.add_argument("--grace", type=float, default=30.0, help="seconds running jobs get on SIGTERM")
        parser.add_argument(
            "--poll-interval", type=float, default=None, help='default: JOBQ["POLL_INTERVAL"]'
        )
        parser.add_argument("--no-listen", action="store_true", help="poll only; no LISTEN/NOTIFY wake-ups")
        parser.add_argument("--reap", action="store_true", help="also run the reaper in this process")
        parser.add_argument(
            "--scheduler", action="store_true", help="also publish due schedules in this process"
        )
        parser.add_argument(
            "--worker-id", default=None,
            help="default: host:pid:random; under --processes, the supervisor's id (default: host:pid)",
        )  # fmt: skip
        parser.add_argument(
            "--processes", type=int, default=1,
            help="run this many worker processes under a supervisor (default: 1, no supervisor)",
        )  # fmt: skip
        parser.add_argument(
            "--max-memory", type=float, default=None, metavar="MIB",
            help="replace a worker process whose resident memory exceeds this (starts a supervisor)",
        )  # fmt: skip
        parser.add_argument(
            "--max-restarts", type=int, default=None,
            help=f"supervisor: exit {EXIT_RESTART_LIMIT} after more unplanned exits than this within "
            f"--restart-window (default: {supervision.DEFAULT_MAX_RESTARTS})",
        )  # fmt: skip
        parser.add_argument(
            "--restart-window", type=float, default=None, metavar="SECONDS",
            help=f"supervisor: the window of --max-restarts (default: {supervision.DEFAULT_RESTART_WINDOW:g})",
        )  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            plan = supervision.plan(options)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if plan is not None:
            self._supervise(plan, options)
            return
        with metrics_options.serving(options):
            self._run(options)

    def _supervise(self, plan: Plan, options: dict[str, Any]) -> None:
        try:
            parse_lanes(options["queues"], options["concurrency"])  # refused here, not by every process
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        from django_jobq.supervisor import Supervisor

        supervisor = Supervisor(plan, functools.partial(supervision.worker_argv, options))
        if not logging.getLogger("django_jobq.supervisor").isEnabledFor(logging.INFO):
            self.stdout.write(supervisor.banner())
        code = supervisor.run()
        self.stdout.write(supervisor.summary())
        if code:
            sys.exit(code)  # EXIT_RESTART_LIMIT: too many unplanned exits; let the platform see it

    def _run(self, options: dict[str, Any]) -> None:
        try:
            sock = link.from_environment()  # a supervisor started this process
        except ValueError as exc:
            raise CommandError(str(exc)) from None

        def make(lanes: dict[str, int], worker_id: str | None) -> Worker:
            # one scheduler (it works on the home database, whichever worker runs it): the first's
            return Worker(
                lanes,
                worker_id=worker_id or options["worker_id"],
                burst=options["burst"],
                # Supervised, --max-jobs asks for a replacement and the worker runs on until SIGTERM.
                max_jobs=options["max_jobs"] if sock is None else None,
                grace=options["grace"],
                poll_interval=options["poll_interval"],
                listen=not options["no_listen"],
                reaper=_reaper() if options["reap"] else None,
                scheduler=_scheduler() if options["scheduler"] and worker_id is None else None,
            )

        database: str | None = None
        worker: Worker | WorkerGroup
        try:
            lanes = parse_lanes(options["queues"], options["concurrency"])
            by_database = lanes_by_database(lanes) if jobq_settings().shards else {}
            if len(by_database) > 1:  # queues on several databases (docs/operations/shards.md)
                worker = WorkerGroup(by_database, make)
            else:
                database = next(iter(by_database), None)
                with on_database(database):
                    worker = make(lanes, None)
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        with on_database(database):
            self._serve(worker, sock, options)

    def _serve(self, worker: Worker | WorkerGroup, sock: Any, options: dict[str, Any]) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: worker.stop())
        local = None  # supervised with --metrics-port: this process's figures, on a local port
        if sock is not None and os.environ.pop(link.METRICS_ENV, None) == "1":
            from django_jobq import metrics
            from django_jobq.metrics import worker as worker_metrics

            worker_metrics.connect()
            local = metrics.serve(0, "127.0.0.1")
        if sock is not None:
            port = None if local is None else int(local.server_port)
            link.Link(sock, worker, options["max_jobs"], metrics_port=port).start()
        if not logging.getLogger("django_jobq").isEnabledFor(logging.INFO):  # else the worker logs it
            self.stdout.write(worker.banner() if isinstance(worker, WorkerGroup) else banner(worker))
        try:
            if options["metrics_port"] is not None or local is not None:
                from django_jobq.metrics import worker as worker_metrics

                with worker_metrics.watching(worker):
                    worker.run()
            else:
                worker.run()
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            if local is not None:
                local.shutdown()
                local.server_close()
        if not logging.getLogger("django_jobq").isEnabledFor(logging.INFO):  # else the worker logged it
            self.stdout.write(f"worker {worker.worker_id} stopped after {worker.processed} job(s)")
        if worker.exit_code:
            sys.exit(worker.exit_code)  # EXIT_STUCK: a lane stayed wedged; let the supervisor restart us


def _reaper() -> Reaper:
    from django_jobq.reaper import Reaper

    return Reaper()


def _scheduler() -> Scheduler:
    from django_jobq.scheduler import Scheduler

    return Scheduler()
