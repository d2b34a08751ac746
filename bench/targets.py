"""The targets of the suite: each a figure of one run, or a ratio of two, with its bound; whether a run
met them, and how that reads."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.common import RL_DRAIN_RATE
from bench.plan import PAIRED, PAIRED_ON
from bench.report import (
    CEILING,
    DJANGO_TASKS,
    FLOOR,
    JOBQ,
    REFERENCE_RATE,
    RSS_GROWTH_LIMIT,
    fmt_value,
    median_of,
    paired_ratio,
)
from bench.systems import PEERS, SYSTEMS

BEST_PEER = "best peer"  # in a Figure: the best peer's median on that row (pgqueuer_defaults included)


@dataclasses.dataclass(frozen=True, slots=True)
class Figure:
    """One measured median of the same run: a system's (or the best peer's) ``field`` on ``workload``."""

    workload: str
    system: str
    field: str = "rate"


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


def _paired(workload: str, system: str = JOBQ) -> Figure:
    """The rate of the PAIRED workload measured just before each run of ``workload`` (its runs'
    REFERENCE_RATE): the same minutes, where PAIRED's own runs are minutes apart. A ratio against it is
    the median of each pair's ratio."""
    return Figure(workload, system, REFERENCE_RATE)


def _ratio(name: str, measured: Figure, against: Figure, bound: float, op: str = ">=") -> Target:
    return Target(name, measured, against, op, bound)


# The targets of the suite (performance round 3 and the earlier ones it leaves standing). A ratio is
# measured / against, both medians of the same run; a row held against W2 c4 is held against the W2
# c4 runs made just before each of its own (_paired).
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
    _ratio("FC capped (queue MAX_RUNNING 4) >= 0.8x W2 c4", _f("FC capped"), _paired("FC capped"), 0.8),
    _ratio(
        "FC task capped (@task(max_running=4)) >= 0.8x W2 c4",
        _f("FC task capped"),
        _paired("FC task capped"),
        0.8,
    ),
    _ratio("FC depth >= 0.9x the same enqueue without MAX_DEPTH", _f("FC depth"), _f("FC backlog"), 0.9),
    _ratio("FC others capped >= 0.97x W2 c4", _f("FC others capped"), _paired("FC others capped"), 0.97),
    # django-jobq through Django's Tasks API, against native jobq.
    _ratio("django.tasks W1 single >= 0.9x native", _f("W1 single", DJANGO_TASKS), _f("W1 single"), 0.9),
    _ratio(
        "django.tasks W2 c4 >= 0.9x native", _f("W2 c4", DJANGO_TASKS), _paired("W2 c4", DJANGO_TASKS), 0.9
    ),
    _ratio(
        "django.tasks W3 p50 >= 0.9x native (native p50 / its p50)",
        _f("W3", field="p50"),
        _f("W3", DJANGO_TASKS, "p50"),
        0.9,
    ),
    # W5: the table's growth.
    _ratio("W5 backlog >= 0.9x W2 c4", _f("W5 backlog"), _paired("W5 backlog"), 0.9),
    _ratio("W5 history >= 0.9x W2 c4", _f("W5 history"), _paired("W5 history"), 0.9),
    _ratio("W5 history 10M >= 0.85x W2 c4", _f("W5 history 10M"), _paired("W5 history 10M"), 0.85),
    _ratio("fair drain (1,000 keys) >= 0.9x W2 c4", _f("fair drain"), _paired("fair drain"), 0.9),
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
        value = median_of(results, fig.workload, fig.system, fig.field)
        return None if value is None else (value, fig.system)
    peers = {n: median_of(results, fig.workload, n, fig.field) for n in PEERS}
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
        paired = t.against is not None and t.against.field == REFERENCE_RATE
        if paired:
            value = paired_ratio(results, t.measured.workload, t.measured.system)
        elif measured and (t.against is None or (against and against[0])):
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
        if paired:
            entry["paired"] = True
        out.append(entry)
    return out


def _input(fig: Figure, found: tuple[float, str] | None) -> dict[str, Any]:
    return {
        "workload": fig.workload,
        "field": fig.field,
        "system": found[1] if found else (None if fig.system == BEST_PEER else fig.system),
        "median": found[0] if found else None,
    }


def render_targets(checks: list[dict[str, Any]], *, markdown: bool) -> str:
    """One line per target: met, missed or not measured, with the value and the medians it came from."""
    lines = []
    for c in checks:
        state = "not measured" if c["met"] is None else ("met" if c["met"] else "missed")
        detail = ""
        if c["value"] is not None:
            inputs = [_fmt_input(c["measured"])] + ([_fmt_input(c["against"])] if "against" in c else [])
            value = f"{c['value']:,.2f}" + ("x" if "against" in c else "")
            how = ", the median of each pair's ratio" if c.get("paired") else ""
            detail = f" (measured {value}{how}: {' / '.join(inputs)})"
        elif "against" in c:
            missing = [i for i in (c["measured"], c["against"]) if i["median"] is None]
            detail = " (no " + ", ".join(_fmt_workload(i) for i in missing) + ")"
        else:
            detail = f" (no {_fmt_workload(c['measured'])})"
        lines.append(f"{'- ' if markdown else '  '}{c['target']}: {state}{detail}")
    return "\n".join(lines)


def _fmt_workload(i: dict[str, Any]) -> str:
    who = SYSTEMS[i["system"]].label if i["system"] else BEST_PEER
    if i["field"] == REFERENCE_RATE:
        return f"{SYSTEMS[PAIRED_ON.get(i['system'], i['system'])].label} {PAIRED} before each {i['workload']} run"
    return f"{who} {i['workload']}" + ("" if i["field"] == "rate" else f" {i['field']}")


def _fmt_input(i: dict[str, Any]) -> str:
    field, median = i["field"], i["median"]
    if field in ("p50", "p95", "p99") or field.startswith(("p50_", "p95_", "p99_")):  # fair claim p99's
        return f"{_fmt_workload(i)} {fmt_value(median, 'ms')} ms"
    if field == "claims_per_run":
        return f"{_fmt_workload(i)} {median:.2f}"
    if field == "rss_growth_per_job":
        return f"{_fmt_workload(i)} {median:,.0f} bytes/job"
    return f"{_fmt_workload(i)} {fmt_value(median, 'jobs/s')}/s"
