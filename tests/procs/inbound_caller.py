"""A delivering process for the inbound dedupe race: calls first_seen for keys 0..N-1, prints the
keys it was first for.

Usage: python -m tests.procs.inbound_caller NAMESPACE KEYS   (DATABASE_URL names the test database)
"""

import json
import sys

import django

django.setup()

from django_jobq.dedupe import first_seen  # noqa: E402


def main(namespace: str, keys: int) -> None:
    sys.stdin.readline()  # start line: every process begins at once
    first = [k for k in range(keys) if first_seen(namespace, f"evt-{k}", 3600)]
    print(json.dumps({"first": first}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
