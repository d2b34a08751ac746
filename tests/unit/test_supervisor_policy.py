"""supervisor/policy.py and supervisor/options.py: when a supervisor starts worker processes again, when it
gives up, which jobq_worker options it refuses, and the command line of each worker process; no process
is started."""

import logging
import os
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_jobq.management.commands.jobq_worker import Command
from django_jobq.supervisor import EXIT_RESTART_LIMIT, RestartPolicy, core, memory
from django_jobq.supervisor.children import Child
from django_jobq.supervisor.options import plan, worker_argv
from django_jobq.supervisor.policy import CRASH_LOOP_EXITS
from django_jobq.worker import EXIT_STUCK
from tests.conftest import ROOT

pytestmark = [pytest.mark.unit, pytest.mark.p1]


def early_exits(policy: RestartPolicy, count: int, now: float = 0.0) -> list:
    """``count`` processes, each started when the previous backoff ended and dead 1 s later."""
    verdicts = []
    for _ in range(count):
        start = max(now, policy.not_before)
        now = start + 1
        verdicts.append(policy.unplanned_exit(now=now, started_at=start, step_at_start=policy.step))
    return verdicts


def test_one_process_killed_once_young_is_started_again_at_once_not_a_crash_loop():
    policy = RestartPolicy(max_restarts=5, window=60)
    verdict = policy.unplanned_exit(now=3, started_at=1, step_at_start=0)  # e.g. kill -9 2 s after start
    assert (verdict.recent, verdict.step, verdict.delay, verdict.new_step) == (1, 0, 0, False)
    assert not verdict.give_up
    assert policy.may_start(3)


def test_processes_that_die_young_back_off_exponentially_up_to_the_cap_once_in_a_crash_loop():
    assert CRASH_LOOP_EXITS == 3
    policy = RestartPolicy(max_restarts=100, window=60)
    verdicts = early_exits(policy, 10)
    assert [v.delay for v in verdicts] == [0, 0, 1, 2, 4, 8, 16, 30, 30, 30]
    assert [v.step for v in verdicts] == [0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert [v.new_step for v in verdicts] == [False, False] + [True] * 8
    assert not any(v.give_up for v in verdicts)


def test_young_exits_spread_wider_than_the_window_are_no_crash_loop():
    policy = RestartPolicy(max_restarts=100, window=60)
    verdicts = [policy.unplanned_exit(now=t + 2, started_at=t, step_at_start=0) for t in (0, 40, 80, 120)]
    assert [(v.recent, v.step, v.delay) for v in verdicts] == [(1, 0, 0), (2, 0, 0), (2, 0, 0), (2, 0, 0)]


def test_siblings_dying_of_the_same_cause_move_the_backoff_once():
    policy = RestartPolicy(max_restarts=100, window=60)
    policy.unplanned_exit(now=1.1, started_at=0, step_at_start=0)
    policy.unplanned_exit(now=1.2, started_at=0, step_at_start=0)
    first = policy.unplanned_exit(now=1.5, started_at=0, step_at_start=0)  # the third: a crash loop
    second = policy.unplanned_exit(now=1.8, started_at=0, step_at_start=0)  # started at step 0 too
    assert (first.step, first.new_step, first.delay) == (1, True, 1)
    assert (second.step, second.new_step) == (1, False)
    assert second.delay == pytest.approx(0.7)  # what is left of the first one's wait
    assert not policy.may_start(2.4) and policy.may_start(2.5)


def test_a_process_that_lived_long_enough_resets_the_backoff():
    policy = RestartPolicy(max_restarts=100, window=60)
    early_exits(policy, 5)
    assert policy.step == 3
    calm = policy.unplanned_exit(now=500, started_at=100, step_at_start=3)
    assert (calm.step, calm.delay, calm.new_step) == (0, 0, False)
    assert policy.may_start(500)
    again = early_exits(policy, 3, now=500)
    assert [(v.step, v.delay) for v in again] == [(0, 0), (1, 1), (2, 2)]  # 2 and 3 within the window


def test_the_log_says_one_unplanned_exit_and_a_start_for_one_kill_and_a_crash_loop_at_the_third(caplog):
    caplog.set_level(logging.INFO, logger="django_jobq.supervisor")
    plan = core.Plan(supervisor_id="sup", processes=1, max_restarts=5, restart_window=60)
    sup = core.Supervisor(plan, lambda worker_id: ["true"], env={})

    def killed_young(now: float) -> Child:
        """A process that lived 2 s (up to ``now``) and was killed by SIGKILL."""
        proc = subprocess.Popen(["sh", "-c", "kill -9 $$"])
        proc.wait()
        child = Child(f"sup/{next(sup._numbers)}", proc, None, now - 2, sup.policy.step, 0)
        sup.children.append(child)
        sup._ended(child, now)
        return child

    first = killed_young(now=102)
    sup._fill(102)
    started = sup.children[-1]  # sup/2, started again at once
    started.proc.wait()
    started.close()
    assert [r.getMessage() for r in caplog.records] == [
        f"supervisor sup: worker {first} killed by SIGKILL after 2.0s (crash); "
        "1 unplanned exit(s) within 60s (--max-restarts 5)",
        f"supervisor sup: started worker {started}",
    ]
    sup.children.remove(started)
    caplog.clear()
    killed_young(now=104)
    assert "crash loop" not in caplog.text
    killed_young(now=106)
    assert [r.getMessage() for r in caplog.records if "crash loop" in r.getMessage()] == [
        "supervisor sup: crash loop: 3 unplanned exits within 60s, worker processes ending within 10s of "
        "starting; next start in 1s"
    ]


def test_more_than_max_restarts_within_the_window_gives_up_and_older_exits_leave_it():
    policy = RestartPolicy(max_restarts=3, window=60)
    lived = {"started_at": 0, "step_at_start": 0}  # long-lived processes: no backoff
    assert [policy.unplanned_exit(now=t, **lived).give_up for t in (100, 110, 120)] == [False] * 3
    assert policy.unplanned_exit(now=159, **lived).give_up  # the 4th within 60 s
    policy = RestartPolicy(max_restarts=3, window=60)
    for t in (100, 110, 120):
        policy.unplanned_exit(now=t, **lived)
    verdict = policy.unplanned_exit(now=160.5, **lived)  # the exit at 100 has left the window
    assert (verdict.recent, verdict.give_up) == (3, False)


def test_max_restarts_0_gives_up_at_the_first_unplanned_exit():
    policy = RestartPolicy(max_restarts=0, window=60)
    assert policy.unplanned_exit(now=50, started_at=0, step_at_start=0).give_up


@pytest.mark.parametrize(
    "arguments", [{"max_restarts": -1, "window": 60}, {"max_restarts": 1, "window": 0}, {"max_restarts": 1,
                  "window": 60, "first": 0}, {"max_restarts": 1, "window": 60, "first": 5, "cap": 1},
                  {"max_restarts": 1, "window": 60, "loop_exits": 0}],
)  # fmt: skip
def test_a_policy_refuses_arguments_that_make_no_sense(arguments):
    with pytest.raises(ValueError):
        RestartPolicy(**arguments)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--processes", "0"], "--processes must be an integer in [1, 256], not 0"),
        (["--processes", "100000"], "--processes must be an integer in [1, 256], not 100000"),
        (["--max-memory", "-1"], "--max-memory must be a positive number of MiB, not -1.0"),
        (["--max-memory", "nan"], "--max-memory must be a positive number of MiB, not nan"),
        (["--max-restarts", "3"], "--max-restarts applies to a supervisor: give --processes N (N > 1) or --max-memory"),
        (["--restart-window", "30"], "--restart-window applies to a supervisor"),
        (["--processes", "2", "--max-restarts", "-1"], "--max-restarts must be >= 0, not -1"),
        (["--processes", "2", "--restart-window", "0"], "--restart-window must be a positive number of seconds"),
        (["--processes", "2", "--restart-window", "inf"], "--restart-window must be a positive number of seconds"),
        (["--processes", "2", "--max-jobs", "0"], "--max-jobs must be >= 1, not 0"),
        (["--max-memory", "512", "--grace", "-1"], "--grace must be >= 0, not -1.0"),
        (["--processes", "2", "--metrics-port", "70000"], "--metrics-port must be in [1, 65535], not 70000"),
        (["--processes", "2", "--metrics-port", "9100", "--metrics-db"], "--metrics-db reads the database"),
        (["--processes", "2", "--worker-id", " spaced"], "must be non-blank, without surrounding spaces"),
        (["--processes", "2", "--worker-id", "x" * 200], "at most 200"),
        (["--processes", "2", "--queues", "default:0"], "default:0"),
    ],
)  # fmt: skip
def test_the_worker_command_refuses_supervisor_options_that_do_not_fit(args, message):
    with pytest.raises(CommandError) as refused:
        call_command("jobq_worker", *args)
    assert message in str(refused.value)


def test_argparse_refuses_a_process_count_that_is_no_integer():
    with pytest.raises(CommandError, match="invalid int value: 'two'"):
        call_command("jobq_worker", "--processes", "two")


def test_a_worker_process_gets_the_options_as_given_but_the_supervisors_own():
    parser = Command().create_parser("manage.py", "jobq_worker")
    given = [
        "--queues", "emails:2,*", "--concurrency", "3", "--burst", "--max-jobs", "50", "--grace", "7.5",
        "--poll-interval", "0.25", "--no-listen", "--reap", "--scheduler", "--processes", "4",
        "--max-memory", "300", "--max-restarts", "2", "--restart-window", "20", "--worker-id", "box",
        "--verbosity", "2", "--settings", "tests.settings", "--traceback",
    ]  # fmt: skip
    options = vars(parser.parse_args(given))
    argv = worker_argv(options, "box/7")
    assert argv[:4] == [sys.executable, "-m", "django", "jobq_worker"]
    child = vars(parser.parse_args(argv[4:]))
    supervisors = {"processes": 1, "max_memory": None, "max_restarts": None, "restart_window": None}
    assert child == {**options, **supervisors, "worker_id": "box/7"}


def test_the_plan_of_a_supervisor_and_none_for_one_plain_worker():
    parser = Command().create_parser("manage.py", "jobq_worker")
    assert plan(vars(parser.parse_args([]))) is None
    assert plan(vars(parser.parse_args(["--processes", "1", "--max-jobs", "5"]))) is None
    made = plan(vars(parser.parse_args(["--max-memory", "256", "--worker-id", "box", "--max-jobs", "9"])))
    assert made is not None
    assert (made.supervisor_id, made.processes, made.max_memory, made.max_jobs) == ("box", 1, 256, 9)
    assert (made.max_restarts, made.restart_window) == (5, 60)
    default = plan(vars(parser.parse_args(["--processes", "3"])))
    assert default is not None and default.supervisor_id.endswith(f":{os.getpid()}")


def test_exit_statuses_are_distinct_and_the_stuck_lane_status_is_the_workers():
    assert core.EXIT_STUCK == EXIT_STUCK == 3
    assert EXIT_RESTART_LIMIT not in (0, 1, 2, EXIT_STUCK)  # 1: a CommandError, 2: a usage error


def test_resident_memory_of_a_process_and_none_for_one_that_is_gone():
    assert memory.available()
    assert 1 < memory.rss_mib(os.getpid()) < 10_000
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert memory.rss_mib(proc.pid) is None


def test_the_supervisor_imports_nothing_that_talks_to_the_database():
    code = (
        "import sys, django_jobq.supervisor, django_jobq.supervisor.options, django_jobq.supervisor.link\n"
        "bad = ('django_jobq.models', 'django_jobq.managers', 'django_jobq.sql', 'django_jobq.worker',"
        " 'django_jobq.notify', 'psycopg')\n"
        "print(sorted(m for m in sys.modules if m.startswith(bad)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
