"""A throw-away PostgreSQL server for the cluster harness (:mod:`iqp_dev.cluster`).

``initdb`` a fresh data directory, trust authentication on loopback only (no password
anywhere), a unix socket inside the data directory, no durability work (``fsync=off``).

PostgreSQL refuses to run as root. Run as root, every PostgreSQL binary here runs as the
unprivileged ``postgres`` user (which Debian's package creates) through
``runuser -u postgres --``, and the data directory's parent must be owned by that user and
reachable for it (the harness gives it a temp dir of its own under ``/tmp``). Run as anyone
else, they run as that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from airflow_iqp.cli.supervisor import alive, send, tail_file

PG_USER = "airflow"
PG_DB = "airflow"


def pg_bindir() -> Path | None:
    """The PostgreSQL server binaries: ``$IQP_PG_BIN``, ``initdb`` on PATH, or the newest
    ``/usr/lib/postgresql/*/bin`` (Debian keeps them off PATH)."""
    if os.environ.get("IQP_PG_BIN"):
        return Path(os.environ["IQP_PG_BIN"])
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    dirs = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
                  if p.parent.parent.name.isdigit() else 0)
    return dirs[-1].parent if dirs else None


def _pg_runas() -> list[str]:
    """The prefix that runs a PostgreSQL binary as a non-root user (empty when not root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError("running as root, PostgreSQL needs an unprivileged user 'postgres', and there is "
                           "none: run scripts/setup_postgres.sh (it installs Debian's postgresql, which "
                           "creates it)") from None
    return ["runuser", "-u", "postgres", "--"]


@dataclass
class Postgres:
    """One throw-away PostgreSQL server (see the module docstring)."""

    datadir: Path
    port: int
    bindir: Path
    log: Path

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{PG_USER}@127.0.0.1:{self.port}/{PG_DB}"

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*_pg_runas(), *argv], check=False, capture_output=True, text=True, timeout=timeout,
                              cwd=self.datadir.parent, stdin=subprocess.DEVNULL)

    def init(self) -> None:
        self.datadir.mkdir(mode=0o700)
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.datadir.parent, pw.pw_uid, pw.pw_gid)
            os.chown(self.datadir, pw.pw_uid, pw.pw_gid)
        r = self._run(str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", PG_USER, "--auth=trust",
                      "--encoding=UTF8", "--locale=C", "--no-sync")
        if r.returncode:
            raise RuntimeError(f"initdb failed:\n{r.stdout}\n{r.stderr}")
        # Throw-away data: no durability work. Loopback only.
        (self.datadir / "postgresql.auto.conf").write_text(
            f"listen_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.datadir}'\n"
            "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 200\n"
            "shared_buffers = 128MB\n")

    def start(self, timeout: float = 60) -> None:
        # pg_ctl's -l log is opened by the postgres user: it lives in the data directory's parent.
        r = self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-l", str(self.log), "-w",
                      "-t", str(int(timeout)), "start", timeout=timeout + 10)
        if r.returncode:
            raise RuntimeError(f"pg_ctl start failed:\n{r.stdout}\n{r.stderr}\n{self.tail()}")

    def create_db(self) -> None:
        r = self._run(str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER,
                      "-O", PG_USER, PG_DB)
        if r.returncode:
            raise RuntimeError(f"createdb failed:\n{r.stdout}\n{r.stderr}")

    def pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.datadir / "postmaster.pid").read_text().splitlines()[0])
            return pid if alive(pid) else None
        return None

    def stop(self) -> None:
        if self.pid() is None:
            return
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "-w", "stop", timeout=60)
        pid = self.pid()
        if pid:
            send(pid, signal.SIGKILL)

    def tail(self, lines: int = 40) -> str:
        return tail_file(self.log, lines, "postgres") or "(no postgres log)"


