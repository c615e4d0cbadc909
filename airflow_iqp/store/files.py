"""The local file system's write discipline: a reader sees nothing, or a complete file or directory.

Pure Python (no Spark, no Airflow). Every write goes to a hidden temporary path (a name
starting with ``.``) in the same directory and is renamed into place. Directories and
files are made owner- and group-readable only (:mod:`airflow_iqp.paths`). The local state
store (:mod:`airflow_iqp.store.local`) keeps its documents this way, and the Spark jobs
write partials and results on a local file system this way.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

from airflow_iqp.paths import make_dirs, open_private, private_temp, restrict_tree


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a hidden temp file beside ``path``, fsync it, rename it into place
    (mode :data:`~airflow_iqp.paths.FILE_MODE`, its directories :func:`~airflow_iqp.paths.make_dirs`'s)."""
    path = Path(path)
    make_dirs(path.parent)
    fd, tmp = private_temp(path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def temp_sibling(path: str | os.PathLike) -> Path:
    """A fresh hidden path in the same directory as ``path`` (for writing a directory)."""
    path = Path(path)
    return path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def replace_dir(tmp_dir: str | os.PathLike, final_dir: str | os.PathLike) -> Path:
    """Move a completely written directory into place, replacing an older one.

    A directory cannot be swapped atomically over a non-empty one, so the old one is
    first renamed aside (hidden) and removed after the new one is in place. A reader
    sees the old directory, then briefly none, then the new one; never a partial one.
    """
    tmp_dir, final_dir = Path(tmp_dir), Path(final_dir)
    trash = None
    if final_dir.exists():
        trash = temp_sibling(final_dir)
        os.rename(final_dir, trash)
    os.rename(tmp_dir, final_dir)
    restrict_tree(final_dir)  # a writer without our Hadoop umask conf left it world-readable
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)
    return final_dir


def write_dir(final: str | os.PathLike, write: Callable[[str], Any]) -> Path:
    """Have ``write(path)`` write a directory at a fresh hidden sibling of ``final``, then move
    it into place (:func:`replace_dir`). Temporaries that killed writers of ``final`` left
    are removed first."""
    final = Path(final)
    remove_temps(final)
    make_dirs(final.parent)
    tmp = temp_sibling(final)
    write(str(tmp))
    return replace_dir(tmp, final)


def remove_temps(final: str | os.PathLike) -> None:
    """The hidden temporary siblings of ``final`` that killed writers of it left (:func:`temp_sibling`)."""
    final = Path(final)
    for p in final.parent.glob(f".{final.name}.tmp-*"):
        shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def locked(dir_path: str | os.PathLike, name: str = ".lock") -> Iterator[None]:
    """An exclusive ``fcntl`` lock on ``dir_path/name`` (created if needed): it holds among
    the processes of one machine."""
    dir_path = make_dirs(dir_path)
    with os.fdopen(open_private(Path(dir_path) / name, os.O_RDWR | os.O_CREAT), "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
