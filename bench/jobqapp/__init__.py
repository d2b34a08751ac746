"""A tiny app whose tasks.py registers the benchmark's django-jobq tasks (autodiscovered)."""
