"""A minimal Wagtail site on django-jobq's Django Tasks backend (tests.settings.wagtail): one page
model, ArticlePage, for tests/integration/test_wagtail.py."""
