"""``python -m bench``: build throwaway databases, run every workload for every system side by side,
print one table and write a JSON file (and optionally a Markdown report)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import common, report, targets
from bench.child import RESULT_MARK
from bench.plan import GROUPS, Workload, workloads
from bench.systems import SYSTEMS, System

DEFAULT_JSON = common.ROOT / "bench" / "results" / "latest.json"
# Errors that mean the server went away under the measurement (restarted or terminated the backend).
CONNECTION_LOST = (
    "terminating connection",
    "server closed the connection",
    "connection refused",
    "Connection refused",
    "the database system is",
    "before or while processing the request",
    "consuming input failed",
    "connection is lost",
    "connection already closed",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark django-jobq against its peers on the PostgreSQL at DATABASE_URL "
        f"(default {common.DEFAULT_URL}); throwaway databases {common.DB_PREFIX}* are created and dropped.",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one run (a smoke test)")
    parser.add_argument("--runs", type=int, default=None, help="runs per workload (default 3; --quick 1)")
    parser.add_argument(
        "--systems", default="all", help=f"comma-separated, from {', '.join(SYSTEMS)} (default all)"
    )
    parser.add_argument("--workloads", default="all", help=f"comma-separated, from {', '.join(GROUPS)}")
    parser.add_argument(
        "--rows",
        default="",
        help="comma-separated workload names of those groups, e.g. 'RL drain' (default all)",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the report as Markdown")
    parser.add_argument("--list", action="store_true", help="list the systems and whether they can run")
    args = parser.parse_args(argv)
    names = list(SYSTEMS) if args.systems == "all" else [n.strip() for n in args.systems.split(",")]
    unknown = set(names) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown system(s): {', '.join(sorted(unknown))}")
    groups = (
        list(GROUPS) if args.workloads == "all" else [g.strip().upper() for g in args.workloads.split(",")]
    )
    if set(groups) - set(GROUPS):
        parser.error(f"unknown workload(s): {', '.join(sorted(set(groups) - set(GROUPS)))}")
    args.names, args.groups = names, groups
    return args


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{mem_kb / 1024 / 1024:.0f} GiB"
    except OSError:
        memory = "?"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": memory,
        "os": platform.platform(),
        "python": platform.python_version(),
        **common.server_facts(),
    }


class Runner:
    def __init__(self, logdir: Path):
        self.logdir = logdir

    def child(
        self, system: str, op: str, db_url: str, params: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Run one measurement; when the server dropped its connections (a restart by another client of
        the same server), wait for it and run the measurement again, at most twice."""
        lost: list[str] = []
        while True:
            outcome = self._child(system, op, db_url, params, timeout)
            error = outcome.get("error", "")
            if not any(sign in error for sign in CONNECTION_LOST) or len(lost) == 2:
                break
            lost.append(error)
            _say(f"  {system} {op}: the server dropped the connection ({error}); waiting, then again")
            common.wait_for(_server_up, 120, 1.0)
        if lost:
            outcome["retried_after"] = lost
        return outcome

    def _child(
        self, system: str, op: str, db_url: str, params: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Run one measurement in a fresh process; its result, or {"error": ...}."""
        params = {**params, "logdir": str(self.logdir)}
        if op == "latency":
            params["latency_file"] = str(self.logdir / f"latency-{system}.txt")
        cmd = [
            sys.executable,
            "-m",
            "bench.child",
            system,
            op,
            "--database",
            db_url,
            "--params",
            json.dumps(params),
        ]
        log = self.logdir / f"{system}-{op}.log"
        try:
            proc = subprocess.run(
                cmd, cwd=common.ROOT, env=common.child_env(), capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f}s"}
        with log.open("a") as f:
            f.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
        for line in reversed(proc.stdout.splitlines()):
            if line.startswith(RESULT_MARK):
                return dict(json.loads(line[len(RESULT_MARK) :]))
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = common.QUICK if args.quick else common.FULL
    if args.runs:
        sizes = common.Sizes(
            **{**{f: getattr(sizes, f) for f in sizes.__dataclass_fields__}, "runs": args.runs}
        )

    status: dict[str, dict[str, Any]] = {}
    for name in args.names:
        cls = SYSTEMS[name]
        reason = cls.unavailable()
        status[name] = {
            "label": cls.label,
            "version": cls.version() if reason is None else None,
            "skipped": reason,
        }
        if cls.worker_note:
            status[name]["workers"] = {
                f"c{c}": cls.describe(c) for c in sorted({*sizes.drain_concurrency, sizes.sleep_concurrency})
            }
            status[name]["note"] = cls.worker_note
    if args.list:
        for name, st in status.items():
            print(f"{name:18} {st['label']:20} {st['version'] or '':10} {st['skipped'] or 'available'}")
        return 0

    rows = {r.strip() for r in args.rows.split(",") if r.strip()}
    plan = [w for w in workloads(sizes) if w.group in args.groups and (not rows or w.key in rows)]
    if unknown := rows - {w.key for w in plan}:
        print(
            f"python -m bench: unknown row(s) in those groups: {', '.join(sorted(unknown))}", file=sys.stderr
        )
        return 2
    runnable = [n for n in args.names if status[n]["skipped"] is None]
    token = secrets.token_hex(3)
    logdir = DEFAULT_JSON.parent / "logs" / token
    logdir.mkdir(parents=True, exist_ok=True)
    runner = Runner(logdir)
    started = time.monotonic()
    info = machine()
    _say(
        f"bench: {len(runnable)} system(s), workloads {','.join(args.groups)}, {sizes.runs} run(s); logs in {logdir}"
    )

    databases: dict[str, str] = {}
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        for name in runnable:
            db = f"{common.DB_PREFIX}{name}_{token}"
            url = common.create_database(db)
            databases[name] = db
            outcome = runner.child(name, "install", url, {}, timeout=300)
            if "error" in outcome:
                status[name]["skipped"] = f"schema install failed: {outcome['error']}"
                _say(f"  {name}: {status[name]['skipped']}")
        active = [n for n in runnable if status[n]["skipped"] is None]
        every = {x.key: x for x in workloads(sizes)}  # a paired workload may be outside the plan
        for w in plan:
            systems = [n for n in active if w.applies(SYSTEMS[n]) and _measures(SYSTEMS[n], w)]
            runs = min(sizes.runs, w.max_runs or sizes.runs)
            for run in range(runs):
                order = systems[run % len(systems) :] + systems[: run % len(systems)] if systems else []
                for name in order:
                    t0 = time.monotonic()
                    url = common.database_url(databases[name])
                    before = None
                    if (on := w.paired_system(name)) and w.paired:
                        paired = every[w.paired]
                        before = (
                            runner.child(
                                on,
                                paired.op,
                                common.database_url(databases[on]),
                                paired.params,
                                timeout=_timeout(paired, sizes),
                            )
                            if on in active
                            else {"error": f"{on} is not measured in this run"}
                        )
                    params = _sized(w, results.get(w.key, {}).get(name, []))
                    outcome = runner.child(name, w.op, url, params, timeout=_timeout(w, sizes))
                    if before is not None:
                        outcome = {**outcome, **_paired(before)}
                    results.setdefault(w.key, {}).setdefault(name, []).append(outcome)
                    took = time.monotonic() - t0
                    also = f" ({w.paired} before it: {_brief(before)})" if before is not None else ""
                    _say(
                        f"  {w.key:14} run {run + 1}/{runs} {name:14} {_brief(outcome)}{also}  [{took:.1f}s]"
                    )
    finally:
        for db in databases.values():
            common.drop_database(db)

    shown = [n for n in args.names if status[n]["skipped"] is None]
    table_rows = report.table(results, plan, sizes, shown)
    checks = targets.targets(results)
    doc = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": info,
        "sizes": {f: getattr(sizes, f) for f in sizes.__dataclass_fields__},
        "systems": status,
        "workloads": {w.key: w.title for w in plan},
        "results": results,
        "table": table_rows,
        "targets": checks,
        "seconds": round(time.monotonic() - started, 1),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(text_report(doc, plan, shown, markdown=False))
    if args.markdown:
        args.markdown.write_text(text_report(doc, plan, shown, markdown=True) + "\n")
    _say(f"bench: done in {doc['seconds']:.0f}s; JSON in {args.json}")
    return 0


def text_report(doc: dict[str, Any], plan: list[Workload], shown: list[str], *, markdown: bool) -> str:
    m = doc["machine"]
    bullet = "- " if markdown else "  "
    out = [
        f"{'### ' if markdown else ''}django-jobq benchmark, {doc['date']}",
        "",
        f"{bullet}Machine: {m['cpu']}, {m['cores']} cores, {m['memory']}; {m['os']}; Python {m['python']}",
        f"{bullet}PostgreSQL {m['postgresql']} on the same machine; synchronous_commit={m['synchronous_commit']}, "
        f"fsync={m['fsync']}, shared_buffers={m['shared_buffers']}",
        f"{bullet}Command: `{doc['command']}` ({doc['seconds']:.0f} s); {doc['sizes']['runs']} run(s) per workload; "
        "cells are median (min-max)",
        "",
        f"{'#### ' if markdown else ''}Systems",
        "",
    ]
    for st in doc["systems"].values():
        if st["skipped"]:
            out.append(f"{bullet}{st['label']}: SKIPPED — {st['skipped']}")
            continue
        workers = "; ".join(f"{k}: {v}" for k, v in st.get("workers", {}).items())
        note = f" — {st['note']}; {workers}" if st.get("note") else ""
        out.append(f"{bullet}{st['label']} {st['version']}{note}")
    out += ["", f"{'#### ' if markdown else ''}Workloads", ""]
    out += [f"{bullet}{w.key}: {w.title}" for w in plan]
    out += ["", report.render(doc["table"], shown, markdown=markdown), ""]
    out += [f"{bullet}{line}" for line in report.pooler_lines(doc["table"])]
    legend = (
        "* a run stopped at the time limit and reports the rate over the jobs it finished; "
        "! some runs failed (see the JSON); — not applicable. Ratios compare medians: for rates "
        "jobq ÷ other, for latencies other ÷ jobq, so > 1 means django-jobq is better; except W3's "
        "reference, the floor (plain psycopg's INSERT + NOTIFY, LISTEN, SKIP LOCKED claim), given as "
        "jobq ÷ floor (1.00x is the floor, lower is better). "
        "RSS rows: the workers' resident memory (VmRSS summed over a system's worker processes), "
        "lower is better."
    )
    out += [
        legend,
        "",
        f"{'#### ' if markdown else ''}Targets",
        "",
        targets.render_targets(doc["targets"], markdown=markdown),
    ]
    errors = [
        f"{bullet}{key} / {name}: {r['error']}"
        for key, per in doc["results"].items()
        for name, runs in per.items()
        for r in runs
        if "error" in r
    ]
    if errors:
        out += ["", "Errors:", *errors]
    return "\n".join(out)


def _paired(before: dict[str, Any]) -> dict[str, Any]:
    """What a run keeps of the paired workload's run just before it: its rate, or why there is none."""
    if "error" in before or "rate" not in before:
        return {"reference_error": before.get("error", "no rate")}
    return {"reference_rate": before["rate"]}


def _sized(w: Workload, earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """A drain that hit the time limit in an earlier run queues fewer jobs next time (1.5x what it
    finished then): the rate is measured over the time limit either way, and a system without a bulk
    API does not spend minutes enqueueing jobs it will never reach."""
    done = [r["jobs"] for r in earlier if r.get("partial") and "jobs" in r]
    if w.op != "drain" or not done or "history" in w.params or "backlog" in w.params:
        return w.params
    return {**w.params, "jobs": min(w.params["jobs"], max(500, int(1.5 * max(done))))}


def _timeout(w: Workload, sizes: common.Sizes) -> float:
    # W5 loads its table inside the measurement: 120 s, plus 1 s per 50,000 history rows beyond a
    # million (W5 history 10M: about 2.6 GB, a minute or two to insert and VACUUM).
    load = max(0, w.params.get("history", 0) - 1_000_000) / 50_000
    # fair claim loads each of its backlogs inside the measurement (1,000,000 jobs: about a minute).
    fair = sum(w.params.get("backlogs", ())) / 10_000 if w.op == "fair_claim" else 0
    return 180 + sizes.deadline * 2 + (120 + load if w.group == "W5" else 0) + fair


def _brief(outcome: dict[str, Any]) -> str:
    if "error" in outcome:
        return f"ERROR {outcome['error']}"
    if "rate" in outcome:
        partial = " (time limit)" if outcome.get("partial") else ""
        return f"{outcome['rate']:,.0f} {outcome.get('unit', 'jobs/s')}{partial}"
    if "p50" not in outcome:  # fair claim: a p99 per backlog
        return " / ".join(f"{k} {v:.2f} ms" for k, v in outcome.items() if k.startswith("p99_"))
    return f"p50 {outcome['p50']:.1f} / p95 {outcome['p95']:.1f} / p99 {outcome['p99']:.1f} ms"


def _server_up() -> bool:
    try:
        with common.connect(common.database_url("postgres"), connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except Exception:
        return False


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _measures(cls: type[System], w: Workload) -> bool:
    """Whether a system restricted to some workloads (System.measures) runs ``w``."""
    return cls.measures is None or w.key in cls.measures
