"""Schedule.clean(): every field of a schedule checked at definition, each error on its field, so the
admin and full_clean() say what is wrong before anything is written (never at tick time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError

from . import cron, ticks, validation
from .conf import jobq_settings
from .exceptions import InvalidJob, UnknownTask
from .registry import get_task

if TYPE_CHECKING:
    from .models import Schedule


def clean_schedule(schedule: Schedule) -> None:
    """ValidationError naming each bad field; blank optional texts become None."""
    for field in ("cron", "at", "timezone", "queue"):
        if getattr(schedule, field) == "":
            setattr(schedule, field, None)
    errors: dict[str, str] = {}

    def check(field: str, test: Callable[[], object]) -> None:
        try:
            test()
        except InvalidJob as exc:
            errors[field] = str(exc)

    check("name", lambda: ticks.validate_name(schedule.name))
    if (schedule.cron is None) == (schedule.at is None):
        errors["cron"] = 'Give either a cron expression or a daily "HH:MM" time (at), exactly one.'
    elif schedule.cron is not None:
        check("cron", lambda: setattr(schedule, "cron", ticks.validate_cron(schedule.cron)))
    else:
        check("at", lambda: setattr(schedule, "at", ticks.validate_at(schedule.at)))
    if schedule.timezone is not None:
        check("timezone", lambda: cron.validate_timezone(schedule.timezone))
    check("missed", lambda: ticks.parse_missed(schedule.missed))
    if schedule.queue is not None:
        check("queue", lambda: validation.queue(schedule.queue))
    if schedule.priority is not None:
        check("priority", lambda: validation.priority(schedule.priority))
    check("payload", lambda: validation.payload_json(schedule.payload, jobq_settings().max_payload_bytes))
    check("task", lambda: validation.name(schedule.task, "task"))
    if "task" not in errors and "payload" not in errors:
        try:
            task = get_task(schedule.task)
        except UnknownTask as exc:
            errors["task"] = str(exc)
        else:
            check("payload", lambda: task.check_call(schedule.payload))
    if errors:
        raise ValidationError(errors)
