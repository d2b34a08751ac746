from django.apps import AppConfig


class TestappConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import batch_tasks, control_tasks, receivers, supervisor_tasks, workflow_tasks  # noqa: F401
