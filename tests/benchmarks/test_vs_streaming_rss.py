"""vs_streaming's peak-memory sampler counts each Spark process once, and not a JVM's fork
before its exec.

Real processes: a JVM that starts a command (``sleep``) and two child JVMs. A child of
``posix_spawn`` between its fork and its exec runs the JVM's binary under the name of the
JVM thread that started it; that instant is too short to catch on purpose, so one child JVM
is started through a link named like such a thread, which gives it the same two marks.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from benchmarks.vs_streaming import RssSampler

SPAWNER = """
public class Spawner {
    public static void main(String[] args) throws Exception {
        if (args.length == 1) {
            String java = ProcessHandle.current().info().command().orElseThrow();
            new ProcessBuilder("sleep", "120").start();
            for (String bin : new String[] {java, args[0]}) {
                new ProcessBuilder(bin, "-Xmx16m", "-XX:TieredStopAtLevel=1", SELF, "child", "x").start();
            }
            System.out.println("ready");
            System.out.flush();
        }
        Thread.sleep(120_000);
    }
}
"""


@pytest.fixture
def jvm_tree(tmp_path):
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    src = tmp_path / "Spawner.java"
    src.write_text(SPAWNER.replace("SELF", f'"{src}"'))
    thread_named = tmp_path / "Executor task launch worker"
    thread_named.symlink_to(Path(java).resolve())
    proc = subprocess.Popen([java, "-Xmx32m", "-XX:TieredStopAtLevel=1", str(src), str(thread_named)],
                            stdout=subprocess.PIPE, text=True)
    parent = psutil.Process(proc.pid)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until each child has exec'd what it was started for
            names = sorted(k.name()[:15] for k in parent.children())
            if names == ["Executor task l", "java", "sleep"]:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the spawner's children after 60 s: {names}, not a sleep and two JVMs")
        yield parent
    finally:
        for p in (*parent.children(recursive=True), parent):
            p.kill()
        proc.wait(timeout=30)


def test_each_process_is_counted_once_and_a_fork_before_its_exec_not_at_all(jvm_tree):
    kids = jvm_tree.children()
    sleep = next(k for k in kids if k.name() == "sleep")
    child = next(k for k in kids if k.name() == "java")
    forked = next(k for k in kids if k.name().startswith("Executor task l"))
    assert forked.exe() == child.exe() == jvm_tree.exe()
    counted = RssSampler().sample()
    # the child JVM is a java process of its own and also below its parent: counted once
    assert {jvm_tree.pid, sleep.pid, child.pid} <= set(counted)
    assert counted[child.pid] == pytest.approx(child.memory_info().rss, rel=0.5)
    # a JVM's binary under a thread's name is taken for a fork that has not exec'd yet
    assert forked.pid not in counted
    assert RssSampler(exclude={jvm_tree.pid}).sample().keys() >= {child.pid}
    assert jvm_tree.pid not in RssSampler(exclude={jvm_tree.pid}).sample()


def test_the_peak_names_the_processes_it_summed(jvm_tree):
    """What a run's peak RSS was made of (``peak_rss_processes``): each counted process with
    its name and what it runs, adding up to the peak."""
    from benchmarks.vs_streaming import described

    with RssSampler() as rss:
        time.sleep(0.6)
    pids = {p["pid"] for p in rss.at_peak}
    sleep = next(k for k in jvm_tree.children() if k.name() == "sleep")
    assert {jvm_tree.pid, sleep.pid} <= pids
    assert sum(p["rss_mb"] for p in rss.at_peak) == pytest.approx(rss.peak, abs=0.1 * len(pids))
    by_pid = {p["pid"]: p for p in described({sleep.pid: 2**20, jvm_tree.pid: 2**21})}
    assert by_pid[sleep.pid] == {"pid": sleep.pid, "name": "sleep", "what": "120", "rss_mb": 1.0}
    assert by_pid[jvm_tree.pid]["what"].endswith("Executor task launch worker")


def test_a_child_read_mid_exec_is_not_counted():
    """The sampler's rule for a JVM's child, on the reads a sample can make of it. The first
    two cases are what full runs recorded for the streaming app: a child under the name of
    the JVM thread that started it, its executable read as another binary's, and the JVM's
    memory give or take a few pages; counting it doubled the app's peak. That instant cannot
    be caught on purpose, so the rule is checked on the values."""
    from types import SimpleNamespace as Mem

    from benchmarks.vs_streaming import counted_child

    jvm = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
    mb = 2**20
    jvm_mem = Mem(rss=1486 * mb, vms=5200 * mb)
    spawn = "/usr/lib/jvm/java-17-openjdk-amd64/lib/jspawnhelper"
    assert not counted_child("stream executio", spawn, Mem(rss=1486 * mb, vms=5200 * mb), jvm, jvm_mem)
    assert not counted_child("Executor task l", spawn, Mem(rss=1488 * mb, vms=5204 * mb), jvm, jvm_mem)
    assert not counted_child("Executor task l", jvm, Mem(rss=900 * mb, vms=5200 * mb), jvm, jvm_mem)  # the JVM's binary
    assert not counted_child("Executor task l", "", Mem(rss=900 * mb, vms=5200 * mb), jvm, jvm_mem)  # unreadable
    assert counted_child("python3", "/usr/bin/python3.11", Mem(rss=152 * mb, vms=900 * mb), jvm, jvm_mem)
    assert counted_child("sleep", "/usr/bin/sleep", Mem(rss=mb, vms=8 * mb), jvm, jvm_mem)
    assert counted_child("java", jvm, Mem(rss=700 * mb, vms=3100 * mb), jvm, jvm_mem)  # a JVM of its own
