"""manage.py jobq_queue pause|resume|status [NAME]: pause or resume a queue, or show its state."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from django_jobq import validation
from django_jobq.conf import jobq_settings
from django_jobq.exceptions import InvalidJob
from django_jobq.models import Job, QueueState

BY = "manage.py jobq_queue"


class Command(BaseCommand):
    help = (
        "Pause a queue (workers stop claiming its jobs; running jobs finish, enqueue goes on), resume it, "
        "or show its state (without NAME: the paused queues)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["pause", "resume", "status"])
        parser.add_argument("name", nargs="?", help="the queue (required for pause and resume)")

    def handle(self, *args: Any, **options: Any) -> None:
        action, name = options["action"], options["name"]
        if name is None and action != "status":
            raise CommandError(f"{action} needs the name of a queue")
        try:
            if name is not None:
                name = validation.queue(name)
            if action == "status":
                self._status(name)
            elif action == "pause":
                changed = Job.objects.pause_queue(name, by=BY)
                self.stdout.write(f"queue {name}: paused" if changed else f"queue {name}: already paused")
            else:
                changed = Job.objects.resume_queue(name, by=BY)
                self.stdout.write(f"queue {name}: resumed" if changed else f"queue {name}: was not paused")
        except InvalidJob as exc:
            raise CommandError(f"bad queue name {name!r}: {exc}") from None
        except DatabaseError as exc:
            raise CommandError(f"the queue's database refused or could not be reached: {exc}") from exc

    def _status(self, name: str | None) -> None:
        paused = Job.objects.paused_queues()
        if name is None:
            self.stdout.write("paused queues: " + (", ".join(paused) if paused else "none"))
            return
        counts = Job.objects.counts(name)
        state = "running"
        if name in paused:
            row = QueueState.objects.using(jobq_settings().database).filter(name=name).first()
            when = row.changed_at.isoformat(timespec="seconds") if row else "?"
            state = f"paused since {when} by {(row and row.changed_by) or '?'}"
        self.stdout.write(f"queue {name}: {state}")
        self.stdout.write("  " + "  ".join(f"{status.lower()} {n}" for status, n in counts.items()))
