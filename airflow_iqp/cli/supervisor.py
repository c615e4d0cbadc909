"""One supervisor for the processes of a local stack: ``airflow-iqp dev``, and in a source
checkout the test harnesses (Airflow's components, a Spark standalone master and worker, a
Spark Connect server).

Each component runs in a process group of its own, with its output appended to
``<logs>/<name>.log``. A signal to the group reaches what the component started (the
LocalExecutor's task processes, a worker's executors, a server's Python workers), and a
Ctrl-C at the terminal reaches the supervising process alone, which then stops every group.

Pure standard library: ``airflow-iqp dev`` ships in the wheel. What reads ``/proc``
(:func:`proc_stat`, :func:`alive`, :func:`group_pids`, :func:`wait_gone`) works on Linux only; the command
itself does not use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Command:
    """How a component was started, so that it can be started again the same way."""

    argv: tuple[str, ...]
    env: Mapping[str, str] | None
    cwd: Path | None


def send(pid: int, sig: int, *, group: bool = False) -> bool:
    """Send ``sig`` to ``pid``, or to the process group it leads; False when nothing of ours is
    there any more (the process is gone, or its number now belongs to another user's)."""
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, ppid, pgid)`` of a process from ``/proc/<pid>/stat``; None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name in parentheses may hold spaces and parentheses: the fields follow the last ")".
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and is not a zombie (a PID 1 that never reaps leaves them)."""
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def all_pids() -> list[int]:
    """Every process id in ``/proc``."""
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def group_pids(pgids: Iterable[int]) -> list[int]:
    """The live processes (zombies left out) in any of the process groups ``pgids``."""
    wanted = set(pgids)
    return [pid for pid in all_pids() if (stat := proc_stat(pid)) and stat[0] != "Z" and stat[2] in wanted]


def wait_gone(pids: Iterable[int], timeout: float, poll: float = 0.1) -> bool:
    """Wait up to ``timeout`` seconds until none of ``pids`` is alive (for processes that are
    not this one's children, which it cannot wait for); whether none is."""
    pids = list(pids)
    end = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        if time.monotonic() >= end:
            return False
        time.sleep(poll)
    return True


def tail_file(path: str | os.PathLike, lines: int = 40, title: str | None = None) -> str:
    """The last ``lines`` lines of a log under a header that names it; empty when it cannot be read."""
    try:
        text = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return f"----- {title or Path(path).name} (last {lines} lines) -----\n" + "\n".join(text[-lines:])


def stop_groups(procs: Iterable[subprocess.Popen], more: Iterable[int] = (), timeout: float = 20.0) -> None:
    """SIGTERM the process group each of ``procs`` leads, then SIGKILL what is left of them
    and of the groups ``more`` after ``timeout`` seconds; a group is killed even when its
    leader has exited, since workers may outlive it."""
    procs = list(procs)
    for proc in procs:
        send(proc.pid, signal.SIGTERM, group=True)
    end = time.monotonic() + timeout
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, end - time.monotonic()))
    for group in [*more, *(p.pid for p in procs)]:
        send(group, signal.SIGKILL, group=True)
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


class Supervisor:
    """Named components, each the leader of a process group of its own, logging to
    ``<logs>/<name>.log``. ``env`` and ``cwd`` are the default of every :meth:`start`."""

    def __init__(self, logs: str | os.PathLike, env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike | None = None) -> None:
        self.logs = Path(logs)
        self.env = dict(env) if env is not None else None
        self.cwd = Path(cwd) if cwd is not None else None
        #: The current process of each component, running or exited.
        self.procs: dict[str, subprocess.Popen] = {}
        self.commands: dict[str, Command] = {}
        #: Process groups of components killed or started again: no longer watched by
        #: :meth:`exited`, still swept by :meth:`stop` (what they started may outlive them).
        self.retired: list[int] = []

    def log_path(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def start(self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cwd: str | os.PathLike | None = None) -> int:
        """Start ``argv`` as the component ``name`` (which must not be running); returns its pid."""
        if self.pid(name) is not None:
            raise RuntimeError(f"{name} is running already (pid {self.procs[name].pid})")
        command = Command(tuple(argv), self.env if env is None else dict(env),
                          self.cwd if cwd is None else Path(cwd))
        path = self.log_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as out:
            proc = subprocess.Popen(list(command.argv), env=command.env, cwd=command.cwd, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        if name in self.procs:
            self.retired.append(self.procs[name].pid)
        self.procs[name], self.commands[name] = proc, command
        return proc.pid

    def pid(self, name: str) -> int | None:
        """The running leader of ``name``; None when it is not running."""
        proc = self.procs.get(name)
        return proc.pid if proc is not None and proc.poll() is None else None

    def exited(self) -> dict[str, int]:
        """The components whose leader exited on its own (not by :meth:`kill`), with their exit codes."""
        return {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}

    def kill(self, name: str, sig: int = signal.SIGKILL, *, group: bool = True, timeout: float = 30.0) -> int | None:
        """Send ``sig`` to the component's process group (or its leader alone with
        ``group=False``) and wait up to ``timeout`` seconds for the leader to exit; returns its
        pid, None when ``name`` was never started or was killed already. The component is no
        longer watched until it is started again."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return None
        send(proc.pid, sig, group=group)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
        self.retired.append(proc.pid)
        return proc.pid

    def restart(self, name: str, timeout: float = 30.0) -> int:
        """Start ``name`` again with the command it was started with, after a SIGTERM to its
        group when it runs; returns the new pid."""
        if self.pid(name) is not None:
            self.kill(name, signal.SIGTERM, timeout=timeout)
        command = self.commands[name]
        return self.start(name, command.argv, env=command.env, cwd=command.cwd)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every component's group, then SIGKILL what is left of them and of the
        retired groups after ``timeout`` seconds."""
        stop_groups(self.procs.values(), self.retired, timeout)

    def leftover_pids(self) -> list[int]:
        """Live processes in any group this supervisor started (none after :meth:`stop`)."""
        return group_pids({p.pid for p in self.procs.values()} | set(self.retired))

    def tail(self, lines: int = 40, names: Iterable[str] | None = None) -> str:
        """The last lines of the logs of ``names`` (default: every ``*.log`` in the log directory)."""
        paths = sorted(self.logs.glob("*.log")) if names is None else [self.log_path(n) for n in names]
        return "\n".join(t for t in (tail_file(p, lines) for p in paths) if t)
