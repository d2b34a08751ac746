"""A real client of the Django Tasks backend: a small Wagtail site (tests.wagtailsite, settings
tests.settings.wagtail) whose background tasks, the reference index and the search index updates
Wagtail enqueues on every page save, are jobq jobs drained by ``jobq_worker --burst``. Pages are
published and edited in subprocesses on a fresh database of the test's own; the reference index
and the search results change only after the worker ran the jobs, every job ends DONE, and the jobs
of a page deleted before they ran end CANCELLED (JOBQ["DISCARD_ON"]), never DEAD.

Skipped where Wagtail cannot be imported (it is installed in the py312-django60 environment only)."""

import json

import pytest

from tests.integration.conftest import fresh_databases, run_python

pytest.importorskip("wagtail", minversion="8.0", reason="Wagtail 8 is not installed (tox: py312-django60)")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REFERENCE_TASK = "wagtail.tasks.update_reference_index_task"
SEARCH_TASK = "modelsearch.tasks.insert_or_update_object_task"


@pytest.fixture
def wagtail_env():
    """A fresh database, dropped afterwards: the environment of a subprocess on the Wagtail site."""
    with fresh_databases("jobq_wagtail") as (url,):
        yield {"DJANGO_SETTINGS_MODULE": "tests.settings.wagtail", "DATABASE_URL": url}


def step(env: dict[str, str], *args: object) -> dict:
    return json.loads(run_python(env, "-m", "tests.procs.wagtail_site", *map(str, args)))


def drain(env: dict[str, str]) -> None:
    run_python(env, "-m", "django", "jobq_worker", "--burst", "--worker-id", "wagtail-worker")


def links(found: dict) -> set[tuple[str, int]]:
    """The article's reference index rows: (its field, the page linked to)."""
    assert {row["to_model"] for row in found["references"]} <= {"page"}
    return {(row["model_path"].split(".")[0], row["to_id"]) for row in found["references"]}


def statuses(found: dict) -> set[str]:
    return {job["status"] for job in found["jobs"]}


@pytest.mark.p1
def test_a_wagtail_site_runs_its_background_tasks_on_jobq(wagtail_env):
    env = wagtail_env
    run_python(env, "-m", "django", "migrate", "--noinput")

    pages = step(env, "build")
    article = pages["article"]
    found = step(env, "check", article)
    # Wagtail enqueued its tasks as jobq jobs on the default queue, and none ran yet.
    assert {job["task"] for job in found["jobs"]} == {REFERENCE_TASK, SEARCH_TASK}
    assert {job["queue"] for job in found["jobs"]} == {"default"}
    assert statuses(found) == {"PENDING"}
    assert found["references"] == [] and found["search"]["title"] == []

    drain(env)
    found = step(env, "check", article)
    assert statuses(found) == {"DONE"}
    assert links(found) == {("body", pages["pricing"])}  # the rich-text link
    assert found["search"]["title"] == [article] and found["search"]["page"] == []

    edited = step(env, "edit", article)
    found = step(env, "check", article)
    # Published with the new word and a ForeignKey to Contact: the indexes wait for the worker.
    assert statuses(found) == {"DONE", "PENDING"}
    assert links(found) == {("body", pages["pricing"])}
    assert found["search"]["page"] == [] and found["search"]["article"] == []

    drain(env)
    found = step(env, "check", article)
    assert links(found) == {("body", pages["pricing"]), ("related_page", pages["contact"])}
    assert found["search"]["page"] == [article] and found["search"]["article"] == [article]
    doomed = [job for job in found["jobs"] if job["args"][2] == str(edited["doomed"])]
    assert {job["task"] for job in doomed} == {REFERENCE_TASK, SEARCH_TASK}
    # The deleted page's jobs found no page: CANCELLED by JOBQ["DISCARD_ON"], not retried or DEAD.
    assert {job["status"] for job in doomed} == {"CANCELLED"}
    assert {job["error"].partition(":")[2].strip() for job in doomed} == {
        "ArticlePage matching query does not exist."
    }
    assert {job["status"] for job in found["jobs"] if job not in doomed} == {"DONE"}
