"""A throw-away Redis server for the harnesses: the Celery broker of the cluster harness with
the CeleryExecutor (:mod:`iqp_dev.cluster`, ``executor="celery"``).

Debian's ``redis-server`` (``scripts/setup_redis.sh`` installs it) run in the foreground as a
process of its own (a process group of its own, its output in a log), on 127.0.0.1 and a free
port, its working directory a temp dir; nothing is persisted (``--save ''``, ``--appendonly
no``): a killed or stopped server comes back empty. It takes no password (loopback only).
Start-up waits until it answers ``PING``.

    from iqp_dev.redis import redis_server

    with redis_server(tmp_dir) as r:
        r.url                                     # redis://127.0.0.1:PORT/0

:class:`Redis` alone is the server that can be started, killed and started again on the same
port (the cluster harness's ``redis`` component).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from airflow_iqp.cli.supervisor import send, tail_file, wait_gone


def redis_bin() -> str | None:
    """``redis-server``: ``$IQP_REDIS_SERVER``, else on PATH (Debian puts it in /usr/bin)."""
    return os.environ.get("IQP_REDIS_SERVER") or shutil.which("redis-server")


def ping(port: int, timeout: float = 1.0) -> bool:
    """Whether a Redis server on 127.0.0.1:``port`` answers ``PING`` (inline command, RESP reply)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class Redis:
    """One throw-away Redis server (see the module docstring); :meth:`start` starts it."""

    dir: Path
    port: int
    log: Path
    binary: str = field(default_factory=lambda: redis_bin() or "redis-server")
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The URL of its database 0, as Celery's broker_url."""
        return f"redis://127.0.0.1:{self.port}/0"

    def argv(self) -> list[str]:
        return [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
                "--logfile", "", "--databases", "16"]

    def start(self, timeout: float = 30.0) -> None:
        """Start the server (which must not be running) and wait until it answers PING."""
        if self.pid() is not None:
            raise RuntimeError(f"redis is running already (pid {self.pid()})")
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv(), cwd=self.dir, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not ping(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}\n{self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"redis-server does not answer on port {self.port} after {timeout}s\n"
                                   f"{self.tail()}")
            time.sleep(0.1)

    def pid(self) -> int | None:
        """The server's pid, or None when it is not running."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 30.0) -> int | None:
        """Send ``sig`` to the server and wait until it is gone; returns its pid (None when it
        was not running)."""
        pid = self.pid()
        if pid is None:
            return None
        send(pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)
        wait_gone([pid], 5, poll=0.1)
        return pid

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (it saves nothing, so it exits at once), then SIGKILL after ``timeout`` seconds."""
        if self.kill(signal.SIGTERM, timeout) is not None and self.pid() is not None:
            self.kill(signal.SIGKILL, timeout)

    def tail(self, lines: int = 40) -> str:
        return tail_file(self.log, lines, "redis") or "(no redis log)"


@contextlib.contextmanager
def redis_server(base: str | os.PathLike | None = None, port: int | None = None, *,
                 timeout: float = 30.0) -> Iterator[Redis]:
    """Run a server (its working directory and log in ``base``, default a new temp dir, then
    removed) until the context ends."""
    from iqp_dev.local_airflow import free_port

    if redis_bin() is None:
        raise RuntimeError("redis-server was not found: run scripts/setup_redis.sh, or set IQP_REDIS_SERVER")
    tmp = None if base is not None else tempfile.mkdtemp(prefix="iqp-redis-")
    root = Path(base if base is not None else tmp)
    server = Redis(dir=root / "redis", port=port or free_port(), log=root / "redis.log")
    try:
        server.start(timeout)
        yield server
    finally:
        server.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
