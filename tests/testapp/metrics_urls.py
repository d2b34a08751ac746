"""The URLs of tests/integration/test_metrics.py: the project's, and the metrics view at /jobq/metrics/."""

from django.urls import include, path

from example_project.urls import urlpatterns as project

urlpatterns = [*project, path("jobq/metrics/", include("django_jobq.metrics.urls"))]
