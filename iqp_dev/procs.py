"""Finding a harness's processes in ``/proc`` (Linux): by a variable of their environment,
and by descent from one that has it.

The supervisor (:mod:`airflow_iqp.cli.supervisor`) knows the components it started and their
process groups; what those start in groups of their own (a task's spark-submit, a Python
driver) it finds only this way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from airflow_iqp.cli.supervisor import all_pids, alive, proc_stat


def environ(pid: int) -> dict[str, str]:
    """The environment a process started with; empty when it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def cmdline(pid: int) -> str:
    """A process's command line (or the title it set), space-separated; empty when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def live() -> dict[int, dict]:
    """``{pid: {"pid", "ppid", "cmdline"}}`` of every live process but this one."""
    every = {}
    for pid in all_pids():
        stat = proc_stat(pid)
        if pid != os.getpid() and stat is not None and stat[0] != "Z":
            every[pid] = {"pid": pid, "ppid": stat[1], "cmdline": cmdline(pid)}
    return every


def with_env(wanted: dict[str, str]) -> list[int]:
    """The live processes (this one left out) whose environment has any of the ``wanted`` key/value pairs."""
    return [pid for pid in all_pids() if pid != os.getpid() and alive(pid)
            and any(environ(pid).get(k) == v for k, v in wanted.items())]


def family(key: str, value: str, roots: Iterable[int | None] = ()) -> list[dict]:
    """The live processes whose environment has ``key=value``, the ``roots``, and their
    descendants (``{"pid", "ppid", "cmdline"}``, by pid). Descent counts because a process
    title (``setproctitle``) overwrites the memory that ``/proc/<pid>/environ`` reads: a
    Celery worker's, and the task processes its pool starts, have titles."""
    every = live()
    found = {pid for pid in every if environ(pid).get(key) == value} | ({p for p in roots if p} & set(every))
    while grown := {pid for pid, e in every.items() if e["ppid"] in found} - found:
        found |= grown
    return [every[pid] for pid in sorted(found)]

