"""The state store in an object store (``s3://bucket/prefix``), which every worker, host and
Spark driver reaches: nothing in it rests on a local path, a file lock or a process id.

Each key is an object under the location. The one primitive that must hold across machines
is fsspec's create-only write (``pipe_file(..., mode="create")``: S3's ``If-None-Match: *``),
which exactly one writer of a name wins; everything that must be exclusive is built on it:

* a **lease**: ``<dir>/.lease/<generation>``, created by whoever takes it, holds its expiry.
  The holder is the creator of the highest generation while that has not expired; a taker
  of an expired lease creates the next generation, so two takers never both win, and the
  holder's release deletes its object. A holder that dies simply stops renewing: after
  :data:`LEASE_S` its lease is free. Leases compare expiry times written by other hosts, so
  the hosts' clocks must agree to well within :data:`LEASE_S` (NTP gives milliseconds);
* a window's claims are checked and written under the lease of its ``claims`` directory,
  and :meth:`ObjectStore.update` under the lease of the document;
* a log (the cost history) is one object per record, named by time and a random id, so
  appends never conflict and no writer loses a record;
* the cluster's turns are objects holding an expiry that the waiting or running task
  renews from a thread: a task that is killed stops renewing, and its turn lapses.

Credentials and the endpoint come from the usual AWS settings of each process
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ...), never from
the location, so no secret is in a command line. Spark writes each partial and result to a
directory of its own at an ``s3a://`` URI, and the store's key then names that directory
(:meth:`ObjectStore.write_dir`): S3 has no rename to move a directory into place. Pure
Python: no Spark, no Airflow.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import threading
import time
import uuid
from typing import Any, Callable, Iterator

from airflow_iqp.errors import ConfigError
from airflow_iqp.store.base import StateStore, Ticket, Turns
from airflow_iqp.store.layout import COST_HISTORY

#: Seconds a lease or a turn holds without renewal. A claim holds its window's lease while it
#: lists and reads the claims and writes one; a turn is renewed every third of this from its task.
LEASE_S = 30.0
#: The first wait before trying a held lease again; it doubles up to :data:`RETRY_MAX_S`,
#: each wait drawn between half and one and a half of it, so that waiters spread out.
RETRY_S = 0.01
RETRY_MAX_S = 0.5
LEASE_DIR = ".lease"
#: The location's schemes (fsspec's protocol for each): Spark names S3 ``s3a``.
PROTOCOLS = {"s3": "s3", "s3a": "s3"}
#: The records of logs this process has read, by their object's URI. A record's object is
#: written once, under a name no other record has, and never written again, so a process
#: reads each record once; a later read lists the log and fetches only the names it has not
#: read. At most :data:`RECORDS_KEPT` are kept (then the cache starts again).
_RECORDS: dict[str, dict] = {}
RECORDS_KEPT = 100_000
_RECORDS_LOCK = threading.Lock()


class ObjectStore(StateStore):
    """A state store under ``location`` (``s3://bucket/prefix``) in an object store."""

    def __init__(self, location: str, fs: Any = None, lease_s: float = LEASE_S) -> None:
        scheme, sep, rest = str(location).partition("://")
        root = rest.strip("/")
        if not sep or scheme not in PROTOCOLS or not root:
            raise ConfigError(f"not an object store location: {location!r}; give s3://bucket/prefix",
                              field="state_dir")
        self.protocol, self.root, self.lease_s = PROTOCOLS[scheme], root, float(lease_s)
        self.location = f"{self.protocol}://{root}"
        self.fs = fs if fs is not None else object_fs(self.protocol)

    def __repr__(self) -> str:
        return f"ObjectStore({self.location!r})"

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    # ----------------------------------------------------------------- primitives

    def get(self, key: str) -> Any | None:
        try:
            data = self.fs.cat_file(self._path(key))
        except FileNotFoundError:
            return None
        return json.loads(data)

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        got = self.fs.cat([self._path(k) for k in keys], on_error="omit") if keys else {}  # side by side
        return {k: json.loads(got[p]) for k in keys if (p := self._path(k)) in got}

    def put(self, key: str, doc: Any) -> str:
        # One PUT: a reader sees the old object or the new one, never part of it.
        self.fs.pipe_file(self._path(key), _dumps(doc))
        return self.uri(key)

    def create(self, key: str, doc: Any) -> bool:
        try:
            self.fs.pipe_file(self._path(key), _dumps(doc), mode="create")
        except FileExistsError:
            return False
        return True

    def has(self, key: str) -> bool:
        return bool(self.fs.exists(self._path(key)))

    def names(self, prefix: str) -> list[str]:
        try:
            listed = self.fs.ls(self._path(prefix), detail=False)
        except FileNotFoundError:
            return []
        own = self._path(prefix).rstrip("/")
        out = {p.rstrip("/").rsplit("/", 1)[-1] for p in listed if p.rstrip("/") != own}
        return sorted(n for n in out if n and not n.startswith("."))

    def update(self, key: str, change: Callable[[Any | None], Any]) -> Any:
        parent, _, name = key.rpartition("/")
        with self._lease(f"{parent}/.{name}" if parent else f".{name}"):
            old = self.get(key)
            new = change(old)
            if new != old:
                self.put(key, new)
            return new

    @contextlib.contextmanager
    def exclusive(self, prefix: str) -> Iterator[None]:
        with self._lease(prefix):
            yield

    def append(self, key: str, record: dict) -> None:
        # One object per record: appends never touch each other's objects.
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex}.json"
        self.fs.pipe_file(self._path(f"{key}/{name}"), _dumps(record, sort_keys=True))

    def lines(self, key: str) -> list[dict]:
        keys = [f"{key}/{n}" for n in self.names(key) if n.endswith(".json")]
        uris = {k: f"{self.protocol}://{self._path(k)}" for k in keys}
        with _RECORDS_LOCK:
            unread = [k for k in keys if uris[k] not in _RECORDS]
        try:
            got = self.get_many(unread)
        except json.JSONDecodeError as exc:
            field = "cost_history" if key == COST_HISTORY else key
            raise ConfigError(f"{self.uri(key)}: a record is not JSON ({exc})", field=field) from exc
        with _RECORDS_LOCK:
            if len(_RECORDS) + len(got) > RECORDS_KEPT:
                _RECORDS.clear()
            _RECORDS.update({uris[k]: doc for k, doc in got.items()})
            known = {k: _RECORDS.get(uris[k], got.get(k)) for k in keys}
        # In name order: the order they were appended. Copies: the cache's own are never handed out.
        return [copy.deepcopy(doc) for doc in known.values() if doc is not None]

    def uri(self, key: str) -> str:
        return f"s3a://{self._path(key)}"  # Spark's connector for S3

    def write_dir(self, key: str, write: Callable[[str], Any]) -> str:
        # Each write goes to a directory of its own, hidden beside the key, and the key
        # becomes an object naming it: one PUT, so a reader finds the old directory or the
        # new one, each whole. S3 has no rename: a writer killed half-way leaves only a
        # hidden directory that nothing names, and a zombie writer never touches another's.
        hidden = f".{key.rpartition('/')[2]}.v{uuid.uuid4().hex[:16]}"
        data = self._sibling(key, hidden)
        write(self.uri(data))
        before: list[Any] = []

        def point(old: Any) -> dict:
            before.append(old)
            return {"dir": hidden, "written_at": time.time()}

        self.update(key, point)
        if isinstance(before[0], dict) and before[0].get("dir"):  # the one replaced: nothing names it now
            self._rm_tree(self._sibling(key, before[0]["dir"]))
        return self.uri(data)

    def dir_uri(self, key: str) -> str | None:
        return self.dir_uris([key]).get(key)

    def dir_uris(self, keys: list[str]) -> dict[str, str]:
        return {k: self.uri(self._sibling(k, doc["dir"])) for k, doc in self.get_many(keys).items()
                if isinstance(doc, dict) and doc.get("dir")}

    def remove_dir(self, key: str) -> None:
        doc = self.get(key)
        if isinstance(doc, dict) and doc.get("dir"):
            self._rm(key)
            self._rm_tree(self._sibling(key, doc["dir"]))

    @staticmethod
    def _sibling(key: str, name: str) -> str:
        parent = key.rpartition("/")[0]
        return f"{parent}/{name}" if parent else name

    def _rm_tree(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._path(key), recursive=True)

    def version(self, key: str) -> Any:
        try:
            found = self.fs.find(self._path(key), detail=True, withdirs=False)
        except FileNotFoundError:
            return None
        if not found:
            return None
        return tuple(sorted((p, str(i.get("ETag") or i.get("mtime") or ""), i.get("size")) for p, i in found.items()))

    def turns(self) -> Turns:
        return _LeaseTurns(self, "_turns")

    # ----------------------------------------------------------------- leases

    def _rm(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(key))

    def _generations(self, lease: str) -> list[int]:
        return sorted(int(n) for n in self.names(lease) if n.isdigit())

    def take_lease(self, prefix: str) -> str:
        """Take the lease of ``prefix``, waiting for it; the key of the holder's object, which
        :meth:`drop_lease` releases."""
        lease = f"{prefix}/{LEASE_DIR}" if prefix else LEASE_DIR
        pause = RETRY_S
        while True:
            gens = self._generations(lease)
            top = gens[-1] if gens else -1
            free = top < 0
            if not free:
                doc = self.get(f"{lease}/{top:012d}")
                if doc is None:  # released since the listing: look again
                    continue
                free = _lapsed(doc)
            if free:
                key = f"{lease}/{top + 1:012d}"
                if self.create(key, {"expires": time.time() + self.lease_s, "holder": uuid.uuid4().hex}):
                    for g in gens:  # released or lapsed: the holders of these are gone
                        self._rm(f"{lease}/{g:012d}")
                    return key
            time.sleep(pause * random.uniform(0.5, 1.5))
            pause = min(RETRY_MAX_S, pause * 2)

    def drop_lease(self, key: str) -> None:
        self._rm(key)

    @contextlib.contextmanager
    def _lease(self, prefix: str) -> Iterator[None]:
        key = self.take_lease(prefix)
        try:
            yield
        finally:
            self.drop_lease(key)


def object_fs(protocol: str = "s3") -> Any:
    """The fsspec file system of ``protocol`` with this process's AWS settings. No listing
    cache: another host's writes must show in the next listing. The endpoint
    (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``) is passed, not left to the client to
    read, so that fsspec's cache of file systems keeps one per endpoint."""
    import fsspec

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return fsspec.filesystem(protocol, use_listings_cache=False, **({"endpoint_url": endpoint} if endpoint else {}))


def fs_and_path(uri: str) -> tuple[Any, str]:
    """The file system (:func:`object_fs`) and its path of an ``s3://`` or ``s3a://`` URI."""
    scheme, sep, rest = str(uri).partition("://")
    if not sep or scheme not in PROTOCOLS:
        raise ConfigError(f"not an object store URI: {uri!r}; give s3://bucket/key", field="uri")
    return object_fs(PROTOCOLS[scheme]), rest


def _lapsed(doc: dict) -> bool:
    """Whether a lease's or a turn's expiry has passed."""
    return float(doc.get("expires", 0)) <= time.time()


def _dumps(doc: Any, sort_keys: bool = False) -> bytes:
    # In the order given: a stream's columns are in the files' order.
    return json.dumps(doc, indent=None if sort_keys else 2, sort_keys=sort_keys).encode("utf-8")


class _LeaseTurns(Turns):
    """Turns as objects: ``waiting/<name>`` while queued, ``running/<name>`` while running,
    each holding an expiry that its task renews from a thread; one that has lapsed was left
    by a task that is gone."""

    def __init__(self, store: ObjectStore, prefix: str) -> None:
        self.store, self.prefix = store, prefix

    def key(self, state: str, name: str) -> str:
        return f"{self.prefix}/{state}/{name}"

    def live(self, state: str) -> list[str]:
        """The names in ``state`` whose expiry has not passed; lapsed ones are removed."""
        docs = self.store.get_many([self.key(state, n) for n in self.store.names(f"{self.prefix}/{state}")])
        for key in [k for k, doc in docs.items() if _lapsed(doc)]:
            self.store._rm(key)
            del docs[key]
        return [k.rsplit("/", 1)[-1] for k in docs]

    @contextlib.contextmanager
    def queue(self, name: str) -> Iterator["_LeaseTicket"]:
        ticket = _LeaseTicket(self, name)
        try:
            yield ticket
        finally:
            ticket.release()


class _LeaseTicket(Ticket):
    def __init__(self, turns: _LeaseTurns, name: str) -> None:
        self.turns, self.name, self.state = turns, name, "waiting"
        self._mine = threading.Lock()
        self._stop = threading.Event()
        self._write()
        self._renewer = threading.Thread(target=self._renew, name=f"iqp-turn-{name}", daemon=True)
        self._renewer.start()

    def _write(self) -> None:
        store = self.turns.store
        store.put(self.turns.key(self.state, self.name), {"expires": time.time() + store.lease_s})

    def _renew(self) -> None:
        while not self._stop.wait(self.turns.store.lease_s / 3):
            with self._mine:
                if not self._stop.is_set():
                    self._write()

    def try_take(self, slots: int, allowed: bool) -> tuple[bool, bool]:
        t = self.turns
        with t.store.exclusive(t.prefix):
            ahead = [n for n in t.live("waiting") if n < self.name]
            busy = [n for n in t.live("running") if n != self.name]
            if not ahead and allowed and len(busy) < slots:
                with self._mine:
                    self.state = "running"
                    self._write()
                    t.store._rm(t.key("waiting", self.name))
        return self.state == "running", bool(ahead)

    def release(self) -> None:
        self._stop.set()
        self._renewer.join()
        self.turns.store._rm(self.turns.key(self.state, self.name))
