from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class JobqConfig(AppConfig):
    name = "django_jobq"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)

        # Import every installed app's tasks.py so producers know all task names.
        autodiscover_modules("tasks")
