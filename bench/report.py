"""Turn the runs into one table (text or Markdown), the ratios and the targets of the suite."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.common import RL_DRAIN_RATE, Sizes, summary
from bench.fairness import label
from bench.plan import Workload
from bench.systems import PEERS, SYSTEMS

JOBQ = "jobq"
POOLED = "jobq_pgbouncer"  # django-jobq through PgBouncer, held against JOBQ on the same row
OBSERVED = "jobq_observed"  # django-jobq with metrics and the tracing middleware on, against JOBQ
DJANGO_TASKS = "jobq_tasks"  # django-jobq through Django's Tasks API, held against native jobq
CEILING = "psycopg"
FLOOR = CEILING  # W3: plain psycopg's wake-up is the floor django-jobq's latency is held against
CLAIMS = "claims/run"  # RL drain: jobs claimed per run started (1.00: no claim given back)


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
            entry["vs_reference"], entry["reference"] = jobq / value, label
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


def _median(results: dict[str, Any], workload: str, system: str, field: str = "rate") -> float | None:
    c = cell(results.get(workload, {}).get(system), field)
    return c["median"] if c and "median" in c else None


def _reference(row: Row, results: dict[str, Any], sizes: Sizes) -> tuple[str, float] | None:
    """What django-jobq's figure is compared with besides the peers: the plain-psycopg ceiling, W2 for
    W5, and the ideal rate for W6."""
    w = row.workload
    if row.field in MEMORY_FIELDS:
        return None
    if w == "W1 single":
        value = _median(results, w, CEILING)
        return ("plain psycopg INSERT", value) if value else None
    if w == "W3" and row.field in ("p50", "p95", "p99"):
        value = _median(results, w, FLOOR, row.field)
        return ("the floor (plain psycopg), jobq ÷ floor", value) if value else None
    if w.startswith("W7"):
        value = _median(results, w, CEILING)
        return ("plain psycopg INSERT, same processes", value) if value else None
    if w == "FC depth":
        value = _median(results, "FC backlog", JOBQ)
        return ("django-jobq FC backlog (no limit)", value) if value else None
    if w in ("FC others capped", "FC capped", "FC task capped"):
        value = _median(results, "W2 c4", JOBQ)
        return ("django-jobq W2 c4", value) if value else None
    if w == "W1 keyed":
        value = _median(results, "W1 single", JOBQ)
        return ("django-jobq W1 single", value) if value else None
    if w == "W1 bulk":
        value = _median(results, w, CEILING)
        return ("plain psycopg COPY", value) if value else None
    if w.startswith("W2 c"):
        batch = ceiling_batch(int(w[4:]), sizes)
        value = _median(results, f"W4 b{batch}", CEILING)
        return (f"W4 batch {batch}", value) if value else None
    if w.startswith("W5") or w == "fair drain":
        value = _median(results, "W2 c4", JOBQ)
        return ("django-jobq W2 c4", value) if value else None
    if w.startswith("RL c") and w != "RL c1":
        value = _median(results, "RL c1", JOBQ)
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


# -- targets ---------------------------------------------------------------------------------------
BEST_PEER = "best peer"  # in a Figure: the best peer's median on that row (pgqueuer_defaults included)


@dataclasses.dataclass(frozen=True, slots=True)
class Figure:
    """One measured median of the same run: a system's (or the best peer's) ``field`` on ``workload``."""

    workload: str
    system: str
    field: str = "rate"

    @property
    def label(self) -> str:
        name = self.system if self.system == BEST_PEER else SYSTEMS[self.system].label
        field = "" if self.field == "rate" else f" {self.field}"
        return f"{name} {self.workload}{field}"


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """``measured`` (divided by ``against``, when given) ``op`` ``bound``."""

    name: str
    measured: Figure
    against: Figure | None
    op: str  # ">=" or "<="
    bound: float


def _f(workload: str, system: str = JOBQ, field: str = "rate") -> Figure:
    return Figure(workload, system, field)


def _ratio(name: str, measured: Figure, against: Figure, bound: float, op: str = ">=") -> Target:
    return Target(name, measured, against, op, bound)


# The targets of the suite (performance round 3 and the earlier ones it leaves standing). A ratio is
# measured / against, both medians of the same run.
TARGETS: tuple[Target, ...] = (
    # W3: the floor is plain psycopg's INSERT + NOTIFY, LISTEN, SKIP LOCKED claim.
    _ratio("W3 p50 <= 1.15x the floor's", _f("W3", field="p50"), _f("W3", FLOOR, "p50"), 1.15, "<="),
    _ratio("W3 p99 <= 1.5x the floor's", _f("W3", field="p99"), _f("W3", FLOOR, "p99"), 1.5, "<="),
    _ratio("W3 best peer's p50 >= 1.5x jobq's", _f("W3", BEST_PEER, "p50"), _f("W3", field="p50"), 1.5),
    _ratio("W3 best peer's p99 >= 1.5x jobq's", _f("W3", BEST_PEER, "p99"), _f("W3", field="p99"), 1.5),
    # W2: against the plain-psycopg claim loop at the batch a jobq worker reaches, and the best peer.
    _ratio("W2 c4 >= 1.0x W4 b4", _f("W2 c4"), _f("W4 b4", CEILING), 1.0),
    _ratio("W2 c16 >= 0.8x W4 b10", _f("W2 c16"), _f("W4 b10", CEILING), 0.8),
    _ratio("W2 c4 >= 2x best peer", _f("W2 c4"), _f("W2 c4", BEST_PEER), 2.0),
    _ratio("W2 c16 >= 2x best peer", _f("W2 c16"), _f("W2 c16", BEST_PEER), 2.0),
    # W1 and W7: the producer side.
    _ratio("W1 single >= 0.9x plain INSERT", _f("W1 single"), _f("W1 single", CEILING), 0.9),
    _ratio("W1 single >= 1.5x best peer", _f("W1 single"), _f("W1 single", BEST_PEER), 1.5),
    _ratio("W1 keyed >= 0.9x W1 single", _f("W1 keyed"), _f("W1 single"), 0.9),
    _ratio("W7 >= 0.8x plain INSERT from as many processes", _f("W7 p8"), _f("W7 p8", CEILING), 0.8),
    _ratio("W1 bulk >= 0.6x plain COPY", _f("W1 bulk"), _f("W1 bulk", CEILING), 0.6),
    Target("W1 bulk >= 50,000 jobs/s", _f("W1 bulk"), None, ">=", 50_000.0),
    # FC: flow control.
    _ratio("FC capped (queue MAX_RUNNING 4) >= 0.8x W2 c4", _f("FC capped"), _f("W2 c4"), 0.8),
    _ratio("FC task capped (@task(max_running=4)) >= 0.8x W2 c4", _f("FC task capped"), _f("W2 c4"), 0.8),
    _ratio("FC depth >= 0.9x the same enqueue without MAX_DEPTH", _f("FC depth"), _f("FC backlog"), 0.9),
    _ratio("FC others capped >= 0.97x W2 c4", _f("FC others capped"), _f("W2 c4"), 0.97),
    # django-jobq through Django's Tasks API, against native jobq.
    _ratio("django.tasks W1 single >= 0.9x native", _f("W1 single", DJANGO_TASKS), _f("W1 single"), 0.9),
    _ratio("django.tasks W2 c4 >= 0.9x native", _f("W2 c4", DJANGO_TASKS), _f("W2 c4"), 0.9),
    _ratio(
        "django.tasks W3 p50 >= 0.9x native (native p50 / its p50)",
        _f("W3", field="p50"),
        _f("W3", DJANGO_TASKS, "p50"),
        0.9,
    ),
    # W5: the table's growth.
    _ratio("W5 backlog >= 0.9x W2 c4", _f("W5 backlog"), _f("W2 c4"), 0.9),
    _ratio("W5 history >= 0.9x W2 c4", _f("W5 history"), _f("W2 c4"), 0.9),
    _ratio("W5 history 10M >= 0.85x W2 c4", _f("W5 history 10M"), _f("W2 c4"), 0.85),
    _ratio("fair drain (1,000 keys) >= 0.9x W2 c4", _f("fair drain"), _f("W2 c4"), 0.9),
    # Flat: the claim's p99 with a 1,000,000-job backlog within 2x of its p99 with 25,000.
    _ratio(
        "fair claim p99 at 1M <= 2x at 25k",
        _f("fair claim p99", field="p99_1M"),
        _f("fair claim p99", field="p99_25k"),
        2.0,
        "<=",
    ),
    # RL drain (task): a rate-limited drain keeps up with its limit, and claims each job about once.
    *(
        target
        for key in ("RL drain", "RL drain task")
        for target in (
            Target(
                f"{key} >= 0.95x its limit ({RL_DRAIN_RATE}/s)", _f(key), None, ">=", 0.95 * RL_DRAIN_RATE
            ),
            Target(f"{key} claims <= 1.1 per run", _f(key, field="claims_per_run"), None, "<=", 1.1),
        )
    ),
    # Memory.
    Target(
        f"jobq worker RSS growth over W2 c4's second half <= {RSS_GROWTH_LIMIT:g} bytes/job",
        _f("W2 c4", field="rss_growth_per_job"),
        None,
        "<=",
        RSS_GROWTH_LIMIT,
    ),
)


def figure(results: dict[str, Any], fig: Figure) -> tuple[float, str] | None:
    """The median ``fig`` names and whose it is; None when not measured. The best peer: the highest
    rate, or the lowest latency, among the peers measured on that row."""
    if fig.system != BEST_PEER:
        value = _median(results, fig.workload, fig.system, fig.field)
        return None if value is None else (value, fig.system)
    peers = {n: _median(results, fig.workload, n, fig.field) for n in PEERS}
    measured = {n: v for n, v in peers.items() if v is not None}
    if not measured:
        return None
    pick = min if fig.field in ("p50", "p95", "p99") else max
    best = pick(measured, key=lambda n: measured[n])
    return measured[best], best


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of TARGETS, met, missed or not measured (met None), with the figures it was taken
    from (system, median) and its value (the ratio, or the figure itself for an absolute bound)."""
    out = []
    for t in TARGETS:
        measured = figure(results, t.measured)
        against = figure(results, t.against) if t.against else None
        value: float | None = None
        if measured and (t.against is None or (against and against[0])):
            value = measured[0] / against[0] if against else measured[0]
        entry: dict[str, Any] = {
            "target": t.name,
            "op": t.op,
            "bound": t.bound,
            "value": value,
            "met": None if value is None else (value >= t.bound if t.op == ">=" else value <= t.bound),
            "measured": _input(t.measured, measured),
        }
        if t.against:
            entry["against"] = _input(t.against, against)
        out.append(entry)
    return out


def _input(fig: Figure, found: tuple[float, str] | None) -> dict[str, Any]:
    return {
        "workload": fig.workload,
        "field": fig.field,
        "system": found[1] if found else (None if fig.system == BEST_PEER else fig.system),
        "median": found[0] if found else None,
    }


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


def render_targets(checks: list[dict[str, Any]], *, markdown: bool) -> str:
    """One line per target: met, missed or not measured, with the value and the medians it came from."""
    lines = []
    for c in checks:
        state = "not measured" if c["met"] is None else ("met" if c["met"] else "missed")
        detail = ""
        if c["value"] is not None:
            inputs = [_fmt_input(c["measured"])] + ([_fmt_input(c["against"])] if "against" in c else [])
            value = f"{c['value']:,.2f}" + ("x" if "against" in c else "")
            detail = f" (measured {value}: {' / '.join(inputs)})"
        elif "against" in c:
            missing = [i for i in (c["measured"], c["against"]) if i["median"] is None]
            detail = " (no " + ", ".join(_fmt_workload(i) for i in missing) + ")"
        else:
            detail = f" (no {_fmt_workload(c['measured'])})"
        lines.append(f"{'- ' if markdown else '  '}{c['target']}: {state}{detail}")
    return "\n".join(lines)


def _fmt_workload(i: dict[str, Any]) -> str:
    who = SYSTEMS[i["system"]].label if i["system"] else BEST_PEER
    return f"{who} {i['workload']}" + ("" if i["field"] == "rate" else f" {i['field']}")


def _fmt_input(i: dict[str, Any]) -> str:
    field, median = i["field"], i["median"]
    if field in ("p50", "p95", "p99"):
        return f"{_fmt_workload(i)} {fmt_value(median, 'ms')} ms"
    if field == "claims_per_run":
        return f"{_fmt_workload(i)} {median:.2f}"
    if field == "rss_growth_per_job":
        return f"{_fmt_workload(i)} {median:,.0f} bytes/job"
    return f"{_fmt_workload(i)} {fmt_value(median, 'jobs/s')}/s"
