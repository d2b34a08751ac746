from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class JobqConfig(AppConfig):
    name = "django_jobq"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from . import checks  # noqa: F401  (registers the system checks)
        from .checks import shards
        from .console import bulk  # noqa: F401  (registers the task django_jobq.admin_bulk)
        from .sql.sqlite.setup import on_connection_created

        # WAL and a busy timeout on every new connection of a SQLite queue database.
        connection_created.connect(on_connection_created, dispatch_uid="django_jobq.sqlite")
        # A shard's id sequences are bounded to its range each time it is migrated.
        post_migrate.connect(shards.set_id_ranges, sender=self, dispatch_uid="django_jobq.shards")

        # Import every installed app's tasks.py so producers know all task names.
        autodiscover_modules("tasks")
        _resolve_django_tasks()


def _resolve_django_tasks() -> None:
    """Let the worker find a Django task (by module path) whose module nothing imported yet."""
    from django.conf import settings

    backends = getattr(settings, "TASKS", None)
    if not isinstance(backends, dict) or not any(
        isinstance(params, dict) and str(params.get("BACKEND", "")).startswith("django_jobq.")
        for params in backends.values()
    ):
        return
    from . import registry
    from .backend import runner as backend_runner

    registry.add_resolver(backend_runner.resolve)
