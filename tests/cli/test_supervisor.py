"""The one process supervisor of ``airflow-iqp dev`` and the harnesses: groups, logs, kill,
restart, and a stop that leaves nothing behind."""

from __future__ import annotations

import signal
import sys
import time

from airflow_iqp.cli.supervisor import Supervisor, alive, group_pids, send, tail_file, wait_gone

#: A component that starts a child in its own group (as the LocalExecutor's workers are),
#: says so in its log, and sleeps.
PARENT = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
          "print('child', c.pid, flush=True); time.sleep(600)")


def child_of(sup: Supervisor, name: str, timeout: float = 20) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for line in sup.log_path(name).read_text().splitlines():
            if line.startswith("child "):
                return int(line.split()[1])
        time.sleep(0.05)
    raise AssertionError(f"{name} started no child: {sup.tail(20, [name])}")


def test_a_kill_of_the_leader_alone_leaves_its_group_to_stop_which_sweeps_it(tmp_path):
    sup = Supervisor(tmp_path / "logs")
    try:
        a = sup.start("a", [sys.executable, "-c", PARENT])
        b = sup.start("b", [sys.executable, "-c", PARENT])
        kids = [child_of(sup, "a"), child_of(sup, "b")]
        assert sup.pid("a") == a and sorted(group_pids([a, b])) == sorted([a, b, *kids])
        assert sup.kill("a", signal.SIGKILL, group=False) == a
        assert sup.pid("a") is None and sup.exited() == {} and alive(kids[0])
        assert sup.kill("a") is None  # killed already
    finally:
        sup.stop(timeout=5)
    assert wait_gone([a, b, *kids], 10) and sup.leftover_pids() == []


def test_a_component_that_exits_is_named_with_its_code_and_its_log(tmp_path):
    sup = Supervisor(tmp_path / "logs", cwd=tmp_path)
    try:
        sup.start("ok", [sys.executable, "-c", "import time; time.sleep(600)"])
        sup.start("bad", [sys.executable, "-c", "import os; print('boom in', os.getcwd(), flush=True); raise SystemExit(3)"])
        end = time.monotonic() + 20
        while not sup.exited() and time.monotonic() < end:
            time.sleep(0.05)
        assert sup.exited() == {"bad": 3}
        assert f"boom in {tmp_path}" in sup.tail(5, ["bad"]) and "----- bad.log (last 5 lines) -----" in sup.tail(5)
    finally:
        sup.stop(timeout=5)
    assert sup.leftover_pids() == []


def test_a_restart_runs_the_same_command_again_and_the_old_group_is_swept(tmp_path):
    sup = Supervisor(tmp_path / "logs", env={"PATH": "/usr/bin:/bin", "MARK": "x1"})
    try:
        first = sup.start("a", [sys.executable, "-c", PARENT])
        kid = child_of(sup, "a")
        send(first, signal.SIGKILL)  # the leader alone: its child outlives it in its group
        sup.procs["a"].wait(timeout=10)
        assert sup.exited() == {"a": -signal.SIGKILL}
        second = sup.restart("a")
        assert second != first and sup.pid("a") == second and first in sup.retired
        assert sup.commands["a"].env["MARK"] == "x1" and alive(kid)
    finally:
        sup.stop(timeout=5)
    assert wait_gone([first, second, kid], 10) and sup.leftover_pids() == []


def test_a_log_that_cannot_be_read_has_no_tail(tmp_path):
    assert tail_file(tmp_path / "none.log") == ""
    (tmp_path / "x.log").write_text("1\n2\n3\n")
    assert tail_file(tmp_path / "x.log", 2, "x") == "----- x (last 2 lines) -----\n2\n3"
