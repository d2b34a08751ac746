from django.apps import AppConfig


class WagtailSiteConfig(AppConfig):
    name = "tests.wagtailsite"
    label = "wagtailsite"
    default_auto_field = "django.db.models.BigAutoField"
