"""``{% load jobq_console %}{% jobq_replica_lag %}``: the console's banner when the page was read from
a replica that lags (django_jobq.replica), above JOBQ["READ_LAG_WARNING_SECONDS"]; nothing otherwise."""

from __future__ import annotations

from typing import Any

from django import template
from django.db import connections
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..dashboard import format_seconds
from ..replica import console_alias, replica_lag

register = template.Library()


@register.simple_tag(takes_context=True)
def jobq_replica_lag(context: dict[str, Any]) -> SafeString | str:
    request = context.get("request")
    if request is None:
        return ""
    lag = replica_lag(connections[console_alias(request)])
    if lag is None or not lag.warns():
        return ""
    behind = "an unknown time" if lag.seconds is None else format_seconds(lag.seconds)
    return format_html(
        '<ul class="messagelist"><li class="warning" id="jobq-replica-lag" data-lag="{}">'
        "Read from the replica {}, {} behind the primary: the latest changes may not show yet "
        "(actions always act on the primary).</li></ul>",
        "" if lag.seconds is None else repr(lag.seconds),
        lag.alias,
        behind,
    )


@register.simple_tag
def jobq_database_query() -> str:
    """``database=ALIAS&`` for the links of a page shown on one of several databases
    (django_jobq.admin.databases), so that they stay on it; "" without JOBQ["SHARDS"]."""
    from ..console.databases import database_query

    return database_query()


@register.simple_tag
def jobq_database_link() -> str:
    """``?database=ALIAS`` to end a link to another page with (see jobq_database_query)."""
    from ..console.databases import database_query

    query = database_query()
    return f"?{query[:-1]}" if query else ""
