"""Enqueue one test.echo job and wait_for it with a one-hour poll, so only the completion NOTIFY can
end the wait in time; prints the result as JSON. Run with tests.settings.pooled (the queue behind a
transaction pooler, LISTEN on JOBQ["LISTEN_DATABASE"])."""

import json

import django

django.setup()

from django_jobq.models import Job  # noqa: E402


def main() -> None:
    job_id = Job.objects.enqueue("test.echo", {"through": "pgbouncer"})
    job = Job.objects.wait_for(job_id, timeout=120, poll=3600)
    print(json.dumps({"status": int(job.status), "result": job.result}))


if __name__ == "__main__":
    main()
