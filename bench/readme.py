"""``python -m bench.readme``: copy the figures of README.md's comparison table (its Throughput and
Worker memory rows and their † note) from the latest results in docs/benchmark.md, so the two never
disagree. ``--check`` changes nothing and exits 1 when README.md is out of date."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from bench.common import ROOT
from bench.systems import SYSTEMS

README = ROOT / "README.md"
BENCHMARK = ROOT / "docs" / "benchmark.md"
RESULTS_HEADING = "## Latest results"  # docs/benchmark.md: the first table after it is the report's
PARTIAL = "†"  # README's mark for the report's "*": a drain stopped at the time limit
NOTE = (
    f"{PARTIAL} The drain reached the benchmark's 8-second limit: the rate is over the jobs it "
    "finished, the memory after them."
)
THROUGHPUT = "| **Throughput**: drain c4 / c16 (jobs/s); enqueue → start p50 |"
MEMORY = "| **Worker memory** after the c4 drain (MiB) |"


@dataclasses.dataclass(frozen=True, slots=True)
class Column:
    """One column of README's table: the bench system it shows (None: not in the benchmark) and the
    words added after its drain rates and after its latency."""

    heading: str
    system: str | None
    rate_note: str = ""
    latency_note: str = ""


COLUMNS = (
    Column("django-jobq", "jobq"),
    Column("Celery", None),
    Column("RQ", None),
    Column("procrastinate", "procrastinate"),
    Column("django-tasks-db", "tasks_db", latency_note=" (1 s polling)"),
    Column("django-q2", "q2", rate_note=" (ORM broker)"),
)
HEADER = "| | " + " | ".join(c.heading for c in COLUMNS) + " |"


def results(benchmark: str) -> dict[str, dict[str, str]]:
    """The latest results table of docs/benchmark.md: {row: {system label: cell}}."""
    lines = benchmark.split(RESULTS_HEADING, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Workload |"))
    labels = _cells(lines[start])
    table = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        row = _cells(line)
        table[row[0]] = dict(zip(labels[1:], row[1:], strict=True))
    return table


def figure(table: dict[str, dict[str, str]], row: str, system: str) -> str | None:
    """A median as the report prints it, with README's † where a run stopped at the time limit."""
    cell = table[row].get(SYSTEMS[system].label, "—")
    if cell in ("—", "error"):
        return None
    marks = cell.rsplit(")", 1)[-1]  # after the min-max: "*" (time limit), "!" (failed runs)
    return cell.split(" (", 1)[0] + (PARTIAL if "*" in marks else "")


def rows(table: dict[str, dict[str, str]]) -> dict[str, str]:
    """README's lines that come from the benchmark, by the start of the line they replace."""
    throughput, memory = [], []
    for c in COLUMNS:
        if c.system is None:
            throughput.append("not measured")
            memory.append("not measured")
            continue
        c4, c16 = figure(table, "W2 c4 (jobs/s)", c.system), figure(table, "W2 c16 (jobs/s)", c.system)
        p50 = figure(table, "W3 p50 (ms)", c.system)
        rss = figure(table, "W2 c4 RSS after the drain (MiB)", c.system)
        throughput.append(
            f"{c4} / {c16}{c.rate_note}; {p50} ms{c.latency_note}" if c4 and c16 and p50 else "not measured"
        )
        memory.append(rss or "not measured")
    return {
        THROUGHPUT: THROUGHPUT + " " + " | ".join(throughput) + " |",
        MEMORY: MEMORY + " " + " | ".join(memory) + " |",
        PARTIAL: NOTE,
    }


def update(readme: str, benchmark: str) -> str:
    """README's text with its benchmark lines rewritten from docs/benchmark.md's latest results."""
    if HEADER not in readme.splitlines():
        raise ValueError(f"README.md has no table headed {HEADER!r}")
    lines = readme.splitlines(keepends=True)
    for start, new in rows(results(benchmark)).items():
        found = [i for i, line in enumerate(lines) if line.startswith(start)]
        if len(found) != 1:
            raise ValueError(f"README.md has {len(found)} lines starting {start!r}, not one")
        lines[found[0]] = new + "\n"
    return "".join(lines)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.readme", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is out of date")
    args = parser.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    wanted = update(current, BENCHMARK.read_text(encoding="utf-8"))
    if wanted == current:
        return 0
    if args.check:
        print("README.md's benchmark figures differ from docs/benchmark.md: run python -m bench.readme")
        return 1
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
