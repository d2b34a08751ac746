"""django-jobq's benchmark: django-jobq and its peers measured side by side, in one run.

Run ``python -m bench`` (``--help`` for the options); docs/benchmark.md explains the workloads.
"""
