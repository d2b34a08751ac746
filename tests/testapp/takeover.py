"""Take a running job away from its worker, as a lease expiry followed by another worker's claim
would: on a connection of its own, outside the task's transaction."""

import psycopg
from django.db import connection

from django_jobq.notify.listener import connection_params


def take_over(job_id: int) -> None:
    with psycopg.connect(**connection_params(connection.alias), autocommit=True) as conn:
        conn.execute(
            "UPDATE jobq_job SET worker_id = 'thief', fence = fence + 1, attempts = attempts + 1, "
            "lease_until = now() + interval '1 hour' WHERE id = %s AND status = 1",
            [job_id],
        )
