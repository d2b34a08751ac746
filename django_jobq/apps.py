from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class JobqConfig(AppConfig):
    name = "django_jobq"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from . import checks  # noqa: F401  (registers the system checks)
        from .sql.sqlite_setup import on_connection_created

        # WAL and a busy timeout on every new connection of a SQLite queue database.
        connection_created.connect(on_connection_created, dispatch_uid="django_jobq.sqlite")

        # Import every installed app's tasks.py so producers know all task names.
        autodiscover_modules("tasks")
