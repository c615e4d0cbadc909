"""Listing a landing directory while batches wait on it: one listing per poll, and which errors pass.

Every batch of a window waits on the same landing directory. In the triggerer they all
poll at once (:class:`~airflow_iqp.triggers.ready.BatchReadyTrigger` aligns its polls to
the clock), so a process-wide :class:`ListingCache` lets the first of them list and the
others reuse that listing while it is fresh: N waiting batches cost one listing per poll,
not N. (Why not the triggerer's shared streams: ``docs/decisions.md``.)

:func:`is_transient` tells an error that a later poll may not see (a shared filesystem's
blip) from one that needs a person (a bad setting, a missing permission, a bad plan
entry). Waits retry the first and fail at once on the second.

Pure Python: no Airflow and no Spark import.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_iqp.errors import IQPError
from airflow_iqp.landing import count_names, list_units
from airflow_iqp.streams import Stream, Unit

#: ``errno`` values of an I/O error that a later attempt may not meet: a stale NFS handle,
#: an I/O error or timeout of a network mount, a directory briefly gone while a mount or an
#: object store catches up, an interrupted or refused connection.
TRANSIENT_ERRNOS = frozenset(
    getattr(errno, name) for name in (
        "ESTALE", "EIO", "ETIMEDOUT", "ENOENT", "EAGAIN", "EINTR", "EBUSY", "ECONNRESET", "ECONNABORTED",
        "ECONNREFUSED", "EHOSTUNREACH", "EHOSTDOWN", "ENETUNREACH", "ENETDOWN", "ENETRESET", "ENOTCONN",
        "EREMOTEIO",
    ) if hasattr(errno, name)
)


def is_transient(exc: BaseException) -> bool:
    """True if ``exc`` may be gone at the next poll, so a wait retries rather than fails.

    * the provider's own errors (:class:`~airflow_iqp.errors.ConfigError`, a bad plan entry,
      a claim clash) and ``PermissionError``: permanent, whatever their ``errno``;
    * ``TimeoutError`` and ``ConnectionError``: transient;
    * any other ``OSError``: transient if its ``errno`` is in :data:`TRANSIENT_ERRNOS`, or if
      it has none (object-store clients raise those for throttling and lost connections);
      permanent otherwise (``ENOTDIR``, ``ELOOP``, ``ENAMETOOLONG``, ...);
    * anything else (``ValueError``, ``KeyError``, ...): permanent, a bug or bad input that
      retrying only hides.
    """
    if isinstance(exc, (IQPError, PermissionError)):
        return False
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, OSError):
        return exc.errno is None or exc.errno in TRANSIENT_ERRNOS
    return False


@dataclass
class _Entry:
    at: float
    value: Any = None
    error: BaseException | None = None


class ListingCache:
    """Listings of landing directories, shared by every caller in the process while fresh.

    :meth:`count` (names in a directory, one ``readdir``) and :meth:`units` (its complete
    units for some streams) each list at most once per key while an earlier listing is
    younger than ``max_age``; a caller that arrives while another lists the same key waits
    for that listing instead of starting its own. A failed listing is kept as long as a
    good one, so every waiter of that poll sees the same error and the directory is not
    hammered while it is unwell.

    ``list_units`` and ``count_names`` are the listing functions (those of
    :mod:`airflow_iqp.landing` by default); ``listings`` counts the real listings made.
    """

    #: Entries this much older than their freshness are dropped (the triggerer lives long).
    KEEP_S = 60.0

    def __init__(self, list_units: Callable[..., list[Unit]] = list_units,
                 count_names: Callable[[str], int] = count_names, clock: Callable[[], float] = time.monotonic):
        self._list_units = list_units
        self._count_names = count_names
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[Hashable, _Entry] = {}
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self.listings = 0
        self.hits = 0

    def count(self, landing: str | os.PathLike, max_age: float) -> int:
        """How many names the landing directory holds (:func:`~airflow_iqp.landing.count_names`)."""
        landing = os.fspath(landing)
        return self._get(("count", landing), max_age, lambda: self._count_names(landing))

    def units(self, landing: str | os.PathLike, streams: Sequence[Stream], max_age: float) -> list[Unit]:
        """The complete units of the landing directory (:func:`~airflow_iqp.landing.list_units`)."""
        landing = os.fspath(landing)
        key = ("units", landing, json.dumps([s.to_dict() for s in streams], sort_keys=True))
        return list(self._get(key, max_age, lambda: tuple(self._list_units(landing, streams))))

    def within(self, max_age: float) -> Listing:
        """This cache as a :class:`Listing` whose entries are good for ``max_age`` seconds."""
        return Listing(self, max_age)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._key_locks.clear()

    def _get(self, key: Hashable, max_age: float, fetch: Callable[[], Any]) -> Any:
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # one listing per key at a time; the others wait for it and reuse it
            entry = self._entries.get(key)
            started = self._clock()
            if entry is not None and started - entry.at <= max_age:
                self.hits += 1
                if entry.error is not None:
                    raise _again(entry.error)
                return entry.value
            self.listings += 1
            try:
                value = fetch()
            except Exception as exc:
                self._store(key, _Entry(started, error=exc))
                raise
            self._store(key, _Entry(started, value))
            return value

    def _store(self, key: Hashable, entry: _Entry) -> None:
        with self._lock:
            self._entries[key] = entry
            stale = [k for k, e in self._entries.items() if entry.at - e.at > self.KEEP_S]
            for k in stale:
                del self._entries[k]
                lock = self._key_locks.get(k)
                if lock is not None and not lock.locked():
                    del self._key_locks[k]


def _again(exc: BaseException) -> BaseException:
    """A copy of a kept error to raise once more (raising the one object from many threads
    would pile each raise's traceback onto it)."""
    try:
        return copy.copy(exc)
    except Exception:  # noqa: BLE001 - an error that cannot be copied is raised as it is
        return exc


@dataclass(frozen=True)
class Listing:
    """A :class:`ListingCache` seen with one freshness: what the readiness check lists through."""

    cache: ListingCache
    max_age: float

    def count(self, landing: str | os.PathLike) -> int:
        return self.cache.count(landing, self.max_age)

    def units(self, landing: str | os.PathLike, streams: Sequence[Stream]) -> list[Unit]:
        return self.cache.units(landing, streams, self.max_age)


#: The process's cache: in the triggerer, every BatchReadyTrigger lists through it.
LISTINGS = ListingCache()
