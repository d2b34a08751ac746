"""manage.py jobq_queue pause|resume|status|move [NAME]: pause or resume a queue, show its state, or
move its PENDING jobs off a database it is no longer on."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from django_jobq import validation
from django_jobq.conf import jobq_settings, on_database
from django_jobq.exceptions import InvalidJob, JobqError
from django_jobq.models import Job, QueueState
from django_jobq.shards import databases_of_queue, every_database

BY = "manage.py jobq_queue"


class Command(BaseCommand):
    help = (
        "Pause a queue (workers stop claiming its jobs; running jobs finish, enqueue goes on), resume it, "
        "or show its state (without NAME: the paused queues); move QUEUE --from ALIAS: move its PENDING jobs "
        "left on a database it is no longer on to where JOBQ['QUEUES'] places it now."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["pause", "resume", "status", "move"])
        parser.add_argument("name", nargs="?", help="the queue (required for pause, resume and move)")
        parser.add_argument("--from", dest="source", help="move: the database alias the jobs are left on")
        parser.add_argument("--batch", type=int, default=500, help="move: jobs per transaction (1-500)")

    def handle(self, *args: Any, **options: Any) -> None:
        action, name = options["action"], options["name"]
        if name is None and action != "status":
            raise CommandError(f"{action} needs the name of a queue")
        try:
            if name is not None:
                name = validation.queue(name)
            if action == "status":
                self._status(name)
            elif action == "move":
                self._move(name, options["source"], options["batch"])
            elif action == "pause":
                changed = Job.objects.pause_queue(name, by=BY)
                self.stdout.write(f"queue {name}: paused" if changed else f"queue {name}: already paused")
            else:
                changed = Job.objects.resume_queue(name, by=BY)
                self.stdout.write(f"queue {name}: resumed" if changed else f"queue {name}: was not paused")
        except InvalidJob as exc:
            raise CommandError(f"bad queue name {name!r}: {exc}") from None
        except JobqError as exc:
            raise CommandError(str(exc)) from None
        except DatabaseError as exc:
            raise CommandError(f"the queue's database refused or could not be reached: {exc}") from exc

    def _move(self, name: str, source: str | None, batch: int) -> None:
        if source is None or source not in every_database():
            known = ", ".join(every_database())
            raise CommandError(f"move needs --from, one of jobq's databases ({known}), not {source!r:.100}")
        moved = Job.objects.move_pending(name, source, batch=batch)
        targets = ", ".join(databases_of_queue(name))
        self.stdout.write(f"queue {name}: moved {moved.written} PENDING job(s) from {source} to {targets}")
        if moved.dropped:
            self.stdout.write(f"  {len(moved.dropped)} dropped: their dedupe key is held there (duplicates)")
        if moved.waiting:
            self.stdout.write(
                f"  {moved.waiting} wait in {source}'s outbox: their database did not answer; "
                f"{source}'s reaper relays them"
            )
        if moved.stay:
            self.stdout.write(
                f"  {moved.stay} job(s) yet to run stay on {source}: of a workflow, awaited by other "
                "jobs or by a wait_for"
            )
        if moved.other:
            self.stdout.write(
                f"  {moved.other} PENDING job(s) came back or were held meanwhile: run the move again"
            )

    def _status(self, name: str | None) -> None:
        if name is None:
            paused: set[str] = set()
            for alias in every_database():
                with on_database(alias):
                    paused.update(Job.objects.paused_queues())
            self.stdout.write("paused queues: " + (", ".join(sorted(paused)) if paused else "none"))
            return
        counts = Job.objects.counts(name)
        states = []
        for alias in databases_of_queue(name):  # a queue's state is kept on each of its databases
            row = QueueState.objects.using(alias).filter(name=name, paused=True).first()
            where = f" on {alias}" if jobq_settings().shards else ""
            if row is not None:
                when = row.changed_at.isoformat(timespec="seconds")
                states.append(f"paused{where} since {when} by {row.changed_by or '?'}")
        self.stdout.write(f"queue {name}: {'; '.join(states) or 'running'}")
        self.stdout.write("  " + "  ".join(f"{status.lower()} {n}" for status, n in counts.items()))
