"""Scripts the tests start as subprocesses (``python -m tests.procs.NAME``)."""
