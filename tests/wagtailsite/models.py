"""One page model: a rich-text body (its page links go into Wagtail's reference index, its words into
the search index) and an optional link to another page by ForeignKey."""

from django.db import models
from wagtail.fields import RichTextField
from wagtail.models import Page
from wagtail.search import index


class ArticlePage(Page):
    body = RichTextField(blank=True)
    related_page = models.ForeignKey(
        "wagtailcore.Page", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    search_fields = [*Page.search_fields, index.SearchField("body")]
