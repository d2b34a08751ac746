"""manage.py jobq_stats: the dashboard's figures in the terminal, and a health check.

Exit status: 0 all thresholds hold, 1 a threshold is crossed, 2 bad arguments, 3 the figures could not
be read (database error).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections

from django_jobq import dashboard
from django_jobq.conf import jobq_settings, on_database
from django_jobq.shards import every_database, shard_number

EXIT_CROSSED, EXIT_UNREADABLE = 1, 3


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be positive")
    return number


def _count(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number >= 0")
    return int(value)


class Command(BaseCommand):
    help = "Print the job queue's figures (per queue and status, lag, throughput, workers); exit 1 past a threshold."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="one JSON document per snapshot")
        parser.add_argument(
            "--watch", type=_positive, metavar="SECONDS", help="refresh every SECONDS until interrupted"
        )
        parser.add_argument(
            "--exact", action="store_true", help="count DONE jobs even in a large table (a full pass)"
        )
        parser.add_argument(
            "--max-lag",
            type=_positive,
            metavar="SECONDS",
            help="crossed when a queue's oldest due job waits longer",
        )
        parser.add_argument(
            "--max-due", type=_count, metavar="N", help="crossed when a queue has more due jobs"
        )
        parser.add_argument("--max-dead", type=_count, metavar="N", help="crossed when more jobs are DEAD")
        parser.add_argument(
            "--max-expired",
            type=_count,
            metavar="N",
            help="crossed when more RUNNING jobs have an expired lease",
        )
        parser.add_argument(
            "--max-xact-age",
            type=_positive,
            metavar="SECONDS",
            help="crossed when another transaction on the database is open longer (it holds back vacuum)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        thresholds = {
            "max_lag": options["max_lag"],
            "max_due": options["max_due"],
            "max_dead": options["max_dead"],
            "max_expired": options["max_expired"],
            "max_xact_age": options["max_xact_age"],
        }
        status = 0
        try:
            while True:
                status = self._report(options, thresholds)
                if options["watch"] is None:
                    break
                time.sleep(options["watch"])
        except KeyboardInterrupt:
            pass
        if status:
            raise CommandError("a threshold is crossed", returncode=status)

    def _report(self, options: dict[str, Any], thresholds: dict[str, Any]) -> int:
        if jobq_settings().shards:
            return self._report_shards(options, thresholds)
        try:
            snap = dashboard.snapshot(exact=options["exact"], upkeep=True)
        except DatabaseError as exc:
            raise CommandError(f"cannot read the queue's figures: {exc}", returncode=EXIT_UNREADABLE) from exc
        problems = dashboard.check(snap, **thresholds)
        if options["json"]:
            self.stdout.write(json.dumps({**snap.as_dict(), "problems": problems}))
        else:
            if options["watch"] is not None and sys.stdout.isatty():
                self.stdout.write("\x1b[H\x1b[2J", ending="")  # clear the screen between refreshes
            self.stdout.write(dashboard.format_table(snap))
            for problem in problems:
                self.stderr.write(f"threshold crossed: {problem}")
        self.stdout.flush()
        return EXIT_CROSSED if problems else 0

    def _report_shards(self, options: dict[str, Any], thresholds: dict[str, Any]) -> int:
        """Each database's figures (django_jobq.shards), then their totals; one that cannot be read is
        reported as such and the others still are (exit status 3 then)."""
        snaps: dict[str, dashboard.Snapshot] = {}
        failed: dict[str, str] = {}
        problems: list[str] = []
        for alias in every_database():
            try:
                with on_database(alias):
                    snaps[alias] = dashboard.snapshot(exact=options["exact"], upkeep=True)
            except DatabaseError as exc:
                failed[alias] = str(exc).strip() or type(exc).__name__
                connections[alias].close()
                continue
            problems += [f"database {alias!r}: {p}" for p in dashboard.check(snaps[alias], **thresholds)]
        total = dashboard.total([snap.total for snap in snaps.values()])
        if options["json"]:
            self.stdout.write(json.dumps({
                "databases": {alias: snap.as_dict() for alias, snap in snaps.items()},
                "outbox": {  # kept apart too, as before the snapshots had it
                    alias: dataclasses.asdict(snap.outbox) for alias, snap in snaps.items() if snap.outbox
                },
                "unreadable": failed,
                "total": dataclasses.asdict(total),
                "problems": problems,
            }))  # fmt: skip
        else:
            if options["watch"] is not None and sys.stdout.isatty():
                self.stdout.write("\x1b[H\x1b[2J", ending="")
            for alias in every_database():
                self.stdout.write(f"== database {alias!r} (shard {shard_number(alias)})")
                if alias in failed:
                    self.stdout.write(f"cannot read its figures: {failed[alias]}\n")
                else:
                    self.stdout.write(dashboard.format_table(snaps[alias]))
                    if (outbox := snaps[alias].outbox) is not None and outbox.jobs:
                        oldest = dashboard.format_seconds(outbox.oldest_seconds)
                        self.stdout.write(
                            f"outbox: {outbox.jobs} job(s) not relayed yet, the oldest for {oldest}\n"
                        )
            self.stdout.write(
                f"== all {len(snaps)} of {len(snaps) + len(failed)} databases: {total.pending} pending "
                f"({total.due} due), {total.running} running, {total.waiting} waiting, {total.dead} dead"
                + ("" if total.done is None else f", {total.done} done")
            )
            for problem in problems:
                self.stderr.write(f"threshold crossed: {problem}")
            for alias, error in failed.items():
                self.stderr.write(f"database {alias!r}: cannot read the queue's figures: {error}")
        self.stdout.flush()
        return EXIT_UNREADABLE if failed else EXIT_CROSSED if problems else 0
