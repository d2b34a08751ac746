"""The metrics as a Django view, for a web process to serve (``path("metrics/", include("django_jobq.metrics.urls"))``).

Who may read it is JOBQ["METRICS_VIEW"]: "off" (the default: 404, as if the URL did not exist),
"staff" (a logged-in staff user) or "token" (``Authorization: Bearer <JOBQ["METRICS_TOKEN"]>``,
compared in constant time). It serves this process's REGISTRY with the database's figures."""

from __future__ import annotations

import hmac

from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..conf import jobq_settings
from . import REGISTRY, enable_database_metrics


def _allowed(request: HttpRequest) -> bool | None:
    """True: serve; False: 403 (the view is on, this caller may not); None: 404 (the view is off)."""
    conf = jobq_settings()
    if conf.metrics_view == "off":
        return None
    if conf.metrics_view == "staff":
        user = getattr(request, "user", None)
        return bool(user is not None and user.is_active and user.is_staff)
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    expected = conf.metrics_token or ""
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected.encode())


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    allowed = _allowed(request)
    if allowed is None:
        raise Http404("metrics are off (JOBQ['METRICS_VIEW'])")
    if not allowed:
        response = HttpResponse("forbidden\n", status=403, content_type="text/plain")
        if jobq_settings().metrics_view == "token":
            response["WWW-Authenticate"] = 'Bearer realm="jobq metrics"'
            response.status_code = 401
        return response
    enable_database_metrics()
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
