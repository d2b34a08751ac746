"""Tasks the test suite enqueues and runs."""

import django_jobq


@django_jobq.task(name="test.noop")
def noop(**kwargs):
    return None


@django_jobq.task(name="test.echo")
def echo(**kwargs):
    return kwargs
