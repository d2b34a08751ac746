"""Steps of tests/integration/test_wagtail.py, run with tests.settings.wagtail (a Wagtail site whose
background tasks are jobq jobs); each prints its findings as JSON. No step runs a job: Wagtail only
enqueues them, and jobq_worker --burst runs them between the steps.

Usage: python -m tests.procs.wagtail_site build|edit|check ID
  build   a home page (the default site's root), "Pricing" and "Contact" under it, and "Launch notes",
          whose rich-text body links to Pricing; every page published
  edit    "Launch notes" published again with a new word in its body and Contact as its related page;
          a page published and then deleted before any job of it ran
  check   the reference index rows of page ID, what searches find, and every job (task, queue, status,
          arguments, the last line of its error)
"""

import json
import sys

import django

django.setup()

from wagtail.models import Page, ReferenceIndex, Site  # noqa: E402

from django_jobq.models import Job, JobStatus  # noqa: E402
from tests.wagtailsite.models import ArticlePage  # noqa: E402

WORD = "zeppelin"  # only the edit adds it


def publish(page: Page) -> Page:
    page.save_revision().publish()
    page.refresh_from_db()
    return page


def build() -> dict:
    root = Page.get_first_root_node()
    home = publish(root.add_child(instance=ArticlePage(title="Home", slug="jobq-home")))
    Site.objects.update_or_create(is_default_site=True, defaults={"root_page": home, "hostname": "localhost"})
    pricing = publish(home.add_child(instance=ArticlePage(title="Pricing", body="<p>Plans and prices.</p>")))
    contact = publish(home.add_child(instance=ArticlePage(title="Contact", body="<p>Write to us.</p>")))
    body = f'<p>Read about <a linktype="page" id="{pricing.pk}">our prices</a>.</p>'
    article = publish(home.add_child(instance=ArticlePage(title="Launch notes", body=body)))
    return {"home": home.pk, "pricing": pricing.pk, "contact": contact.pk, "article": article.pk}


def edit(article_id: int) -> dict:
    article = ArticlePage.objects.get(pk=article_id)
    article.body += f"<p>Deliveries now go by {WORD}.</p>"
    article.related_page = Page.objects.get(slug="contact")
    publish(article)
    home = Page.objects.get(slug="jobq-home")
    doomed = publish(home.add_child(instance=ArticlePage(title="Doomed", body="<p>Gone soon.</p>")))
    doomed_id = doomed.pk
    doomed.delete()  # its jobs are queued and find no page when they run
    return {"article": article.pk, "doomed": doomed_id}


def check(article_id: int) -> dict:
    article = ArticlePage.objects.get(pk=article_id)
    references = [
        {"model_path": row.model_path, "to_model": row.to_content_type.model, "to_id": int(row.to_object_id)}
        for row in ReferenceIndex.get_references_for_object(article).select_related("to_content_type")
    ]
    return {
        "references": sorted(references, key=lambda row: row["model_path"]),
        "search": {
            "page": [page.pk for page in Page.objects.live().search(WORD)],
            "article": [page.pk for page in ArticlePage.objects.live().search(WORD)],
            "title": [page.pk for page in Page.objects.live().search("launch")],
        },
        "jobs": [
            {
                "task": job.task,
                "queue": job.queue,
                "status": JobStatus(job.status).name,
                "args": job.payload["args"],
                "error": (job.last_error or "").strip().rpartition("\n")[2] or None,  # its last line
            }
            for job in Job.objects.order_by("id")
        ],
    }


if __name__ == "__main__":
    step, args = sys.argv[1], [int(arg) for arg in sys.argv[2:]]
    print(json.dumps({"build": build, "edit": edit, "check": check}[step](*args)))
