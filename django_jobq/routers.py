"""A database router that keeps django-jobq's tables on JOBQ["DATABASE"]: reads, writes and
migrations of the django_jobq app go there (or to the shard the current context works on,
django_jobq.shards; migrations to every shard of JOBQ["SHARDS"]), and only there; every other app is
left to the next router (or Django's default)."""

from __future__ import annotations

from typing import Any

from django.db import models

from .conf import home_database, jobq_settings

APP_LABEL = "django_jobq"


class JobqRouter:
    """``DATABASE_ROUTERS = ["django_jobq.routers.JobqRouter"]`` with ``JOBQ["DATABASE"] = "queue"``."""

    def db_for_read(self, model: type[models.Model], **hints: Any) -> str | None:
        return jobq_settings().database if model._meta.app_label == APP_LABEL else None

    def db_for_write(self, model: type[models.Model], **hints: Any) -> str | None:
        return jobq_settings().database if model._meta.app_label == APP_LABEL else None

    def allow_relation(self, obj1: models.Model, obj2: models.Model, **hints: Any) -> bool | None:
        # jobq's models have no foreign keys to other apps; between two of its rows a relation is fine.
        both = obj1._meta.app_label == APP_LABEL and obj2._meta.app_label == APP_LABEL
        return True if both else None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if app_label == APP_LABEL:
            conf = jobq_settings()
            return db == home_database() or db in conf.shards
        return None
