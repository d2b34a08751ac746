"""Per-queue state: pausing and resuming a queue, and which queues are paused."""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError

from .. import validation
from ..conf import jobq_settings
from ..exceptions import JobqError
from ..notify.listener import STATE_CHANGED
from ..shards import databases_of_queue, on_shard
from .base import BaseJobManager


class QueueStateManager(BaseJobManager):
    def pause_queue(self, name: str, *, by: str | None = None) -> bool:
        """Stop workers claiming from queue ``name`` (within one poll interval; at once where they
        LISTEN). Jobs running go on and finish; enqueue still works. True if it was not paused.
        ``by``: who pauses it (a username...), kept with the state; "api" when not given."""
        return self._changed(self._sql().PAUSE_QUEUE, name, by)

    def resume_queue(self, name: str, *, by: str | None = None) -> bool:
        """Let workers claim from queue ``name`` again; True if it was paused."""
        return self._changed(self._sql().RESUME_QUEUE, name, by)

    def _changed(self, statement: Any, name: str, by: str | None) -> bool:
        params = self._state_params(name, by)
        changed, failed = False, []
        for alias in databases_of_queue(params["name"]):  # its workers read its state there
            try:
                with on_shard(alias):
                    if self._execute(statement, params):
                        changed = True
                        self._wake([STATE_CHANGED])
            except DatabaseError as exc:
                if len(databases_of_queue(params["name"])) == 1:
                    raise
                failed.append(f"{alias} ({exc})")
        if failed:  # the others changed: calling again finishes the change (each statement is idempotent)
            raise JobqError(
                f"queue {params['name']!r} was not changed on {'; '.join(failed)}; it was on its other "
                "databases: call again once they are back"
            )
        return changed

    def paused_queues(self) -> list[str]:
        """The names of the paused queues of the database this context works on, sorted."""
        return [row[0] for row in self._execute(self._sql().PAUSED_QUEUES, {})]

    @staticmethod
    def _state_params(name: str, by: str | None) -> dict[str, Any]:
        conf = jobq_settings()
        return {
            "name": validation.queue(name),
            "by": "api" if by is None else validation.string(by, "by", validation.MAX_NAME_LENGTH),
            "notify": conf.notify,
            "channel": conf.notify_channel,
            "payload": STATE_CHANGED,
        }
