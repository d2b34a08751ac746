"""``path("metrics/", include("django_jobq.metrics.urls"))``: the metrics view (JOBQ["METRICS_VIEW"])."""

from django.urls import path

from .views import metrics_view

urlpatterns = [path("", metrics_view, name="jobq_metrics")]
