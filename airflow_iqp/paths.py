"""Names and permissions of the state directory: nothing escapes it, nothing in it is world-readable.

Pure Python (no Spark, no Airflow). :mod:`airflow_iqp.store` makes every
directory and file of the state layout is made through them.

* A name that becomes one component of a path (a query id, a window id, a unit name, a
  stream name) is checked by :func:`check_name`: one plain, non-hidden component, with no
  separator, no control character, and not ``.`` or ``..`` even after Unicode NFKC
  normalisation (``．．`` is ``..`` to a system that normalises).
* Directories are created with :data:`DIR_MODE` (``0o750``) and files with
  :data:`FILE_MODE` (``0o640``): owner and group only. The mode goes through the process
  umask, so a stricter umask (``077``) narrows it further and a permissive one (``022``,
  ``000``) cannot widen it past these.
* Spark writes partials and results with Hadoop's file system, which follows
  ``fs.permissions.umask-mode`` (:data:`HADOOP_UMASK_CONF`, set by this package's Spark
  sessions and servers); :func:`restrict_tree` narrows a directory Spark wrote after it is
  renamed into place, for a writer started without that conf.
"""

from __future__ import annotations

import os
import posixpath
import stat
import unicodedata
import uuid
from pathlib import Path
from typing import Sequence

from airflow_iqp.errors import ConfigError

#: Directories of the state layout: owner rwx, group r-x, others nothing.
DIR_MODE = 0o750
#: Files of the state layout: owner rw, group r, others nothing.
FILE_MODE = 0o640
#: The bits no state file or directory may have: group write and everything for others.
DENIED = 0o027
#: Hadoop's umask for the files Spark writes (partials, results), as Spark conf.
HADOOP_UMASK_CONF = {"spark.hadoop.fs.permissions.umask-mode": "027"}


def check_name(value: object, field: str) -> str:
    """``value`` if it is one plain, non-hidden path component; else a ConfigError naming ``field``."""
    if not isinstance(value, str):
        raise ConfigError(f"must be a string naming one directory, got {value!r}", field=field)
    folded = unicodedata.normalize("NFKC", value)
    bad = (not value or len(value.encode("utf-8", "surrogatepass")) > 255
           or any(v.startswith(".") or "/" in v or "\\" in v for v in (value, folded))
           or any(unicodedata.category(c).startswith("C") for c in value))
    if bad:
        raise ConfigError(f"must be one plain, non-hidden directory name (no '/', no leading '.', no control "
                          f"characters, not '..'), got {value!r}", field=field)
    return value


def is_local(path: str | os.PathLike) -> bool:
    """A path on this machine's file system: a plain path or a ``file://`` URL."""
    return "://" not in str(path) or str(path).startswith("file://")


def local_path(path: str | os.PathLike) -> str:
    """A local path or ``file://`` URL as a plain path (other URLs as they are)."""
    path = str(path)
    return path[len("file://"):] if path.startswith("file://") else path


def _norm(path: str) -> str:
    """A path or URL with ``.`` and ``..`` resolved as text (an object store has no symlinks)."""
    path = local_path(path)
    scheme, sep, rest = path.partition("://")
    if sep:
        return f"{scheme}://" + posixpath.normpath("/" + rest.lstrip("/"))
    return os.path.abspath(path)


def check_within(path: str, roots: str | Sequence[str], field: str) -> str:
    """``path`` if it lies under one of ``roots`` and names no ``..`` on the way; else a
    ConfigError naming ``field``."""
    roots = [roots] if isinstance(roots, str) else list(roots)
    p = _norm(path)
    inside = any(p.startswith(_norm(r).rstrip("/") + "/") for r in roots)
    if ".." in str(path).replace("\\", "/").split("/") or not inside:
        raise ConfigError(f"{path!r} is not inside {' or '.join(map(repr, roots))}", field=field)
    return path


def make_dirs(path: str | os.PathLike) -> Path:
    """Create ``path`` and its missing parents with :data:`DIR_MODE`; return it.

    Unlike ``Path.mkdir(parents=True)`` and ``os.makedirs``, the parents get the mode too.
    An existing directory is left as it is.
    """
    path = Path(path)
    missing = []
    p = path
    while not p.is_dir():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            if not d.is_dir():
                raise
    return path


def open_private(path: str | os.PathLike, flags: int = os.O_WRONLY | os.O_CREAT | os.O_EXCL) -> int:
    """``os.open`` of ``path`` with :data:`FILE_MODE` for a file it creates (its parent made by :func:`make_dirs`)."""
    make_dirs(Path(path).parent)
    return os.open(path, flags, FILE_MODE)


def private_temp(directory: str | os.PathLike, prefix: str, suffix: str = ".tmp") -> tuple[int, str]:
    """A new hidden file in ``directory`` opened for writing with :data:`FILE_MODE`: ``(fd, path)``."""
    while True:
        path = os.path.join(directory, f"{prefix}{uuid.uuid4().hex[:12]}{suffix}")
        try:
            return open_private(path), path
        except FileExistsError:
            continue


def restrict_tree(root: str | os.PathLike) -> None:
    """Take :data:`DENIED` bits off ``root`` and everything under it (a local directory Spark wrote).

    A file this process may not change (another user's) is left as it is: the writer's own
    umask conf is what governs it.
    """
    root = Path(root)
    if not root.exists():
        return
    todo = [root]
    while todo:
        p = todo.pop()
        try:
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                continue
            if st.st_mode & DENIED:
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~DENIED)
        except PermissionError:
            continue
        if stat.S_ISDIR(st.st_mode):
            todo.extend(p.iterdir())
