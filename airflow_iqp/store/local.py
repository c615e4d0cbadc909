"""The state store on a file system: a directory (``[iqp] state_dir``) on this machine, or one
that every worker mounts.

Each key is a path under the directory. Documents are written to a hidden temporary file
and renamed into place (:mod:`airflow_iqp.store.files`); a window's claims and the cost
history are written under ``fcntl`` locks, and a turn on the cluster is held by an
``flock`` on its file, which goes with the process that held it. Those locks hold among
the processes of one machine (and on file systems that pass ``flock`` on, not all do):
several hosts need a store whose claim is an atomic create in the store itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

from airflow_iqp.errors import ConfigError
from airflow_iqp.paths import make_dirs, open_private, private_temp
from airflow_iqp.store.base import StateStore, Ticket, Turns
from airflow_iqp.store.layout import COST_HISTORY
from airflow_iqp.store.files import atomic_write_json, atomic_write_text, locked, read_json, write_dir


class LocalStore(StateStore):
    """A state store in the directory ``root``."""

    def __init__(self, root: str | os.PathLike) -> None:
        root = str(root)
        if root.startswith("file://"):
            root = root[len("file://"):]
        self.root = Path(root).expanduser().absolute()
        self.location = str(self.root)

    def __repr__(self) -> str:
        return f"LocalStore({self.location!r})"

    def _path(self, key: str) -> Path:
        return self.root / key if key else self.root

    def get(self, key: str) -> Any | None:
        try:
            return read_json(self._path(key))
        except FileNotFoundError:
            return None

    def put(self, key: str, doc: Any) -> str:
        return str(atomic_write_json(self._path(key), doc))

    def create(self, key: str, doc: Any) -> bool:
        path = self._path(key)
        make_dirs(path.parent)
        fd, tmp = private_temp(path.parent, f".{path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=2)  # in the order given: a stream's columns are in file order
                fh.flush()
                os.fsync(fh.fileno())
            # Linked into place whole: the first writer wins, and no reader sees it half written.
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def has(self, key: str) -> bool:
        return self._path(key).exists()

    def names(self, prefix: str) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self._path(prefix)) if not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def update(self, key: str, change: Callable[[Any | None], Any]) -> Any:
        path = self._path(key)
        with locked(path.parent, f".{path.name}.lock"):
            old = self.get(key)
            new = change(old)
            if new != old:
                atomic_write_json(path, new)
            return new

    @contextlib.contextmanager
    def exclusive(self, prefix: str) -> Iterator[None]:
        with locked(self._path(prefix)):
            yield

    def append(self, key: str, record: dict) -> None:
        # Rewritten through a temporary file and a rename under a lock: readers never see
        # half a line, and concurrent writers never lose one.
        path = self._path(key)
        with locked(path.parent, f".{path.stem}.lock"):
            old = path.read_text(encoding="utf-8") if path.exists() else ""
            if old and not old.endswith("\n"):
                old += "\n"
            atomic_write_text(path, old + json.dumps(record, sort_keys=True) + "\n")

    def lines(self, key: str) -> list[dict]:
        path = self._path(key)
        if not path.exists():
            return []
        out = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                field = "cost_history" if key == COST_HISTORY else key
                raise ConfigError(f"{path}:{n}: not a JSON line ({exc})", field=field) from exc
        return out

    def uri(self, key: str) -> str:
        return str(self._path(key))

    def write_dir(self, key: str, write: Callable[[str], Any]) -> str:
        return str(write_dir(self._path(key), write))

    def dir_uri(self, key: str) -> str | None:
        path = self._path(key)
        return str(path) if path.is_dir() else None

    def remove_dir(self, key: str) -> None:
        shutil.rmtree(self._path(key), ignore_errors=True)

    def version(self, key: str) -> Any:
        try:
            st = self._path(key).stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    def turns(self) -> Turns:
        return _FlockTurns(self._path("_turns"))


class _FlockTurns(Turns):
    """Turns as files: ``waiting/<name>`` while queued, ``running/<name>`` while running, each
    held by an ``flock`` of its task; a file nobody holds was left by a killed task."""

    def __init__(self, root: Path) -> None:
        self.root, self.waiting, self.running = root, root / "waiting", root / "running"

    @contextlib.contextmanager
    def queue(self, name: str) -> Iterator["_FlockTicket"]:
        make_dirs(self.waiting)
        make_dirs(self.running)
        ticket = _FlockTicket(self, name)
        try:
            yield ticket
        finally:
            ticket.release()


def _hold(path: Path) -> int:
    import fcntl

    fd = open_private(path, os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _live(path: Path) -> bool:
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    path.unlink(missing_ok=True)  # nobody holds it: left by a killed task
    return False


class _FlockTicket(Ticket):
    def __init__(self, turns: _FlockTurns, name: str) -> None:
        self.turns, self.name = turns, name
        self.mine = _hold(turns.waiting / name)
        self.run_fd: int | None = None

    def try_take(self, slots: int, allowed: bool) -> tuple[bool, bool]:
        t = self.turns
        lock = _hold(t.root / ".lock")
        try:
            ahead = [p for p in sorted(t.waiting.iterdir()) if p.name < self.name and _live(p)]
            busy = [p for p in t.running.iterdir() if p.name != self.name and _live(p)]
            if not ahead and allowed and len(busy) < slots:
                self.run_fd = _hold(t.running / self.name)
                (t.waiting / self.name).unlink(missing_ok=True)
        finally:
            os.close(lock)
        return self.run_fd is not None, bool(ahead)

    def release(self) -> None:
        if self.run_fd is not None:
            (self.turns.running / self.name).unlink(missing_ok=True)
            os.close(self.run_fd)
        else:  # once it had its turn, waiting/<name> is no longer this task's
            (self.turns.waiting / self.name).unlink(missing_ok=True)
        os.close(self.mine)
