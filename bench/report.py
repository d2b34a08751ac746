"""Turn the runs into one table (text or Markdown), the ratios and the targets of the suite."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.common import RL_DRAIN_RATE, Sizes, summary
from bench.fairness import label
from bench.plan import PAIRED, Workload
from bench.systems import PEERS, SYSTEMS

JOBQ = "jobq"
POOLED = "jobq_pgbouncer"  # django-jobq through PgBouncer, held against JOBQ on the same row
OBSERVED = "jobq_observed"  # django-jobq with metrics and the tracing middleware on, against JOBQ
DJANGO_TASKS = "jobq_tasks"  # django-jobq through Django's Tasks API, held against native jobq
CEILING = "psycopg"
FLOOR = CEILING  # W3: plain psycopg's wake-up is the floor django-jobq's latency is held against
CLAIMS = "claims/run"  # RL drain: jobs claimed per run started (1.00: no claim given back)
REFERENCE_RATE = "reference_rate"  # a run's field: the rate of the paired workload run just before it


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    key: str  # "W3 p99"
    workload: str  # "W3"
    field: str  # "rate", "p50", ...
    unit: str  # "jobs/s", "ms" or "MiB"

    @property
    def lower_is_better(self) -> bool:
        return self.unit in ("ms", "MiB", CLAIMS)


def rows(plan: list[Workload]) -> list[Row]:
    out = []
    for w in plan:
        if w.op == "latency":
            out += [Row(f"{w.key} {q}", w.key, q, "ms") for q in ("p50", "p95", "p99")]
        elif w.op == "rate_drain":
            out += [
                Row(w.key, w.key, "rate", "jobs/s"),
                Row(f"{w.key} claims", w.key, "claims_per_run", CLAIMS),
            ]
        elif w.op == "fair_claim":
            out += [Row(f"{w.key} {label(b)}", w.key, f"p99_{label(b)}", "ms") for b in w.params["backlogs"]]
        elif w.op != "install":
            out.append(Row(w.key, w.key, "rate", "calls/s" if w.op == "rate_limit" else "jobs/s"))
    return out + memory_rows(plan)


# -- memory: the workers' resident set around the W2 drains ------------------------------------------
MEMORY_FIELDS = {"rss_warm_mib": "RSS after warm-up", "rss_after_mib": "RSS after the drain"}
RSS_GROWTH_LIMIT = 100.0  # bytes per job over the second half of W2 c4 (1 MB per 10,000 jobs)


def memory_rows(plan: list[Workload]) -> list[Row]:
    """Worker RSS (summed over a system's worker processes) after the warm-up and after each W2 drain."""
    return [
        Row(f"{w.key} {label}", w.key, field, "MiB")
        for w in plan
        if w.group == "W2"
        for field, label in MEMORY_FIELDS.items()
    ]


def cell(runs: list[dict[str, Any]] | None, field: str) -> dict[str, Any] | None:
    """Median and min-max of one figure over the runs; None when not measured."""
    if not runs:
        return None
    errors = [r["error"] for r in runs if "error" in r]
    good = [r for r in runs if "error" not in r and field in r]
    if not good:
        return {"error": errors[-1]} if errors else None
    stats: dict[str, Any] = summary([float(r[field]) for r in good])
    stats["runs"] = len(good)
    stats["partial"] = any(r.get("partial") for r in good)
    if errors:
        stats["errors"] = errors
    return stats


def table(results: dict[str, dict[str, list[dict[str, Any]]]], plan: list[Workload], sizes: Sizes,
          systems: list[str]) -> list[dict[str, Any]]:  # fmt: skip
    """One dict per row: the cells per system and django-jobq's ratios."""
    out = []
    for row in rows(plan):
        cells = {name: cell(results.get(row.workload, {}).get(name), row.field) for name in systems}
        medians = {n: c["median"] for n, c in cells.items() if c and "median" in c}
        entry: dict[str, Any] = {"row": row.key, "unit": row.unit, "cells": cells}
        jobq = medians.get(JOBQ)
        peer_values = {n: v for n, v in medians.items() if n in PEERS}
        if jobq and peer_values and not row.workload.startswith(("W4", "W5")):
            if row.lower_is_better:
                best = min(peer_values, key=lambda n: peer_values[n])
                entry["vs_best_peer"] = peer_values[best] / jobq
            else:
                best = max(peer_values, key=lambda n: peer_values[n])
                entry["vs_best_peer"] = jobq / peer_values[best]
            entry["best_peer"] = best
        if jobq and medians.get(POOLED):
            entry["pooled_vs_direct"] = (
                (jobq / medians[POOLED]) if row.lower_is_better else (medians[POOLED] / jobq)
            )
        if jobq and medians.get(OBSERVED):
            entry["observed_vs_plain"] = (
                (jobq / medians[OBSERVED]) if row.lower_is_better else (medians[OBSERVED] / jobq)
            )
        reference = _reference(row, results, sizes)
        if jobq and reference:
            label, value = reference
            paired = paired_ratio(results, row.workload, JOBQ) if row.field == "rate" else None
            entry["vs_reference"], entry["reference"] = paired or jobq / value, label
        out.append(entry)
    return out


def pooler_lines(table_rows: list[dict[str, Any]]) -> list[str]:
    """The pooler's and the observability's costs: django-jobq through PgBouncer, and with metrics and
    the tracing middleware on, as ratios to plain django-jobq, per measured row."""
    return [
        f"{entry['row']}: django-jobq through PgBouncer (transaction mode) = "
        f"{entry['pooled_vs_direct']:.2f}x direct"
        for entry in table_rows
        if "pooled_vs_direct" in entry
    ] + [
        f"{entry['row']}: django-jobq with metrics and tracing on = {entry['observed_vs_plain']:.2f}x off"
        for entry in table_rows
        if "observed_vs_plain" in entry
    ]


def median_of(results: dict[str, Any], workload: str, system: str, field: str = "rate") -> float | None:
    c = cell(results.get(workload, {}).get(system), field)
    return c["median"] if c and "median" in c else None


def paired_ratio(results: dict[str, Any], workload: str, system: str) -> float | None:
    """The median over ``system``'s runs of ``workload`` of each run's rate / the rate of the paired run
    just before it (REFERENCE_RATE): a paired figure, so each ratio is of one minute's two runs."""
    runs = results.get(workload, {}).get(system) or []
    ratios = [r["rate"] / r[REFERENCE_RATE] for r in runs if r.get(REFERENCE_RATE) and "rate" in r]
    return summary(ratios)["median"] if ratios else None


def _reference(row: Row, results: dict[str, Any], sizes: Sizes) -> tuple[str, float] | None:
    """What django-jobq's figure is compared with besides the peers: the plain-psycopg ceiling, W2 for
    W5, and the ideal rate for W6."""
    w = row.workload
    if row.field in MEMORY_FIELDS:
        return None
    if row.field == "rate" and (paired := median_of(results, w, JOBQ, REFERENCE_RATE)):
        return (f"django-jobq {PAIRED} run before each run, the median of each pair's ratio", paired)
    if w == "W1 single":
        value = median_of(results, w, CEILING)
        return ("plain psycopg INSERT", value) if value else None
    if w == "W3" and row.field in ("p50", "p95", "p99"):
        value = median_of(results, w, FLOOR, row.field)
        return ("the floor (plain psycopg), jobq ÷ floor", value) if value else None
    if w.startswith("W7"):
        value = median_of(results, w, CEILING)
        return ("plain psycopg INSERT, same processes", value) if value else None
    if w == "FC depth":
        value = median_of(results, "FC backlog", JOBQ)
        return ("django-jobq FC backlog (no limit)", value) if value else None
    if w in ("FC others capped", "FC capped", "FC task capped"):
        value = median_of(results, "W2 c4", JOBQ)
        return ("django-jobq W2 c4", value) if value else None
    if w == "W1 keyed":
        value = median_of(results, "W1 single", JOBQ)
        return ("django-jobq W1 single", value) if value else None
    if w == "W1 bulk":
        value = median_of(results, w, CEILING)
        return ("plain psycopg COPY", value) if value else None
    if w.startswith("W2 c"):
        batch = ceiling_batch(int(w[4:]), sizes)
        value = median_of(results, f"W4 b{batch}", CEILING)
        return (f"W4 batch {batch}", value) if value else None
    if w.startswith("W5") or w == "fair drain":
        value = median_of(results, "W2 c4", JOBQ)
        return ("django-jobq W2 c4", value) if value else None
    if w.startswith("RL c") and w != "RL c1":
        value = median_of(results, "RL c1", JOBQ)
        return ("django-jobq RL c1", value) if value else None
    if w.startswith("RL drain") and row.field == "rate":
        return (f"its limit, {RL_DRAIN_RATE}/s", float(RL_DRAIN_RATE))
    if w.startswith("W6"):
        return (
            f"ideal {sizes.sleep_concurrency}/{sizes.sleep_seconds:g} s",
            sizes.sleep_concurrency / sizes.sleep_seconds,
        )
    return None


def ceiling_batch(concurrency: int, sizes: Sizes) -> int:
    """The W4 batch to hold django-jobq's drain against: a jobq worker claims at most its free slots,
    so the smallest measured batch >= its slots per process."""
    slots = max(SYSTEMS[JOBQ].layout(concurrency))
    fitting = [b for b in sorted(sizes.ceiling_batches) if b >= slots]
    return fitting[0] if fitting else max(sizes.ceiling_batches)


# -- rendering -------------------------------------------------------------------------------------
def fmt_value(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.1f}" if value < 100 else f"{value:,.0f}"
    if unit == "MiB":
        return f"{value:,.1f}"
    if unit == CLAIMS:
        return f"{value:.2f}"
    return f"{value:,.0f}"


def fmt_cell(c: dict[str, Any] | None, unit: str, na: str) -> str:
    if c is None:
        return na
    if "error" in c:
        return "error"
    text = f"{fmt_value(c['median'], unit)} ({fmt_value(c['min'], unit)}-{fmt_value(c['max'], unit)})"
    return text + ("*" if c["partial"] else "") + ("!" if c.get("errors") else "")


def fmt_ratio(entry: dict[str, Any], key: str, label_key: str) -> str:
    if key not in entry:
        return ""
    return f"{entry[key]:.2f}x {SYSTEMS[entry[label_key]].label if label_key == 'best_peer' else entry[label_key]}"


def render(table_rows: list[dict[str, Any]], systems: list[str], *, markdown: bool) -> str:
    header = ["Workload", *[SYSTEMS[n].label for n in systems], "jobq vs best peer", "jobq vs reference"]
    body = []
    for entry in table_rows:
        unit = entry["unit"]
        body.append(
            [
                f"{entry['row']} ({unit})",
                *[fmt_cell(entry["cells"][n], unit, "—") for n in systems],
                fmt_ratio(entry, "vs_best_peer", "best_peer"),
                fmt_ratio(entry, "vs_reference", "reference"),
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(lines)
