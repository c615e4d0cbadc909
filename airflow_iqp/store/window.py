"""A query's and a window's state in a store, by meaning: what the rest of the package asks
the store for (:meth:`~airflow_iqp.store.base.StateStore.window`). Every key of a window's
layout is built here, from :mod:`airflow_iqp.store.layout`'s names.

Pure Python: no Spark, no Airflow.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

from airflow_iqp.errors import ConfigError
from airflow_iqp.paths import check_name
from airflow_iqp.store.layout import BATCH_PREFIX, CLUSTERS, QUERY_FILE, WINDOW_DOCS, ClaimError, batch_name, batch_of, query_key


class ClusterState:
    """The queries registered on one named cluster (:meth:`StateStore.cluster`): each plan
    task registers its query with what joint planning needs of it, and reads the others'.

    One document per query, replaced at every window: the newest registration holds."""

    def __init__(self, store, name: str) -> None:
        self.store, self.name = store, check_name(name, "backend.cluster")

    def _key(self, query_id: str) -> str:
        return f"{CLUSTERS}/{self.name}/{query_key(query_id)}.json"

    def register(self, query_id: str, doc: dict, now: float | None = None) -> str:
        """Register (again) ``query_id`` on this cluster with ``doc``; where it is."""
        rec = {**doc, "query": query_key(query_id), "cluster": self.name,
               "registered_at": time.time() if now is None else now}
        return self.store.put(self._key(query_id), rec)

    def members(self) -> dict[str, dict]:
        """Every registered query's newest registration, by query id."""
        names = [n for n in self.store.names(f"{CLUSTERS}/{self.name}") if n.endswith(".json")]
        docs = self.store.get_many([f"{CLUSTERS}/{self.name}/{n}" for n in names])
        return {doc["query"]: doc for doc in docs.values() if isinstance(doc, dict) and doc.get("query")}


class QueryState:
    """What a store keeps of one query: the saved query, its streams' columns, its windows."""

    def __init__(self, store, query_id: str) -> None:
        self.store, self.query_id = store, query_id

    def _key(self, *parts: str) -> str:
        return "/".join((self.query_id, *parts))

    def saved(self) -> dict | None:
        """The saved query and its inputs (``query.json``), as saved."""
        return self.store.get(self._key(QUERY_FILE))

    def save(self, doc: dict) -> str:
        """Save the query and its inputs: once, and again only when they change (every window's
        plan task saves what its DAG declares). Where it is."""
        key = self._key(QUERY_FILE)
        if self.store.get(key) != json.loads(json.dumps(doc)):
            self.store.put(key, doc)
        return self.store.uri(key)

    def columns(self, stream: str) -> dict | None:
        """A stream's columns as recorded from its first readable unit: ``{"columns": [[name,
        type], ...] in the files' order, "taken_from"}``."""
        return self.store.get(self._key("schema", f"{check_name(stream, 'stream')}.json"))

    def record_columns(self, stream: str, doc: dict) -> dict:
        """Record a stream's columns unless a batch recorded them first; the record that holds.
        The columns are kept as a list of pairs: their order is the files' (a CSV file's
        columns are read by position), which no store's handling of a mapping may change."""
        key = self._key("schema", f"{check_name(stream, 'stream')}.json")
        doc = {**doc, "columns": [list(c) for c in dict(doc["columns"]).items()]}
        return doc if self.store.create(key, doc) else self.store.get(key)

    def record_deadline_missed(self, run_id: str, record: dict) -> str:
        return self.store.put(self._key("deadline_missed", f"{check_name(run_id, 'run_id')}.json"), record)

    def windows(self) -> list[str]:
        """The ids of the query's windows with state, oldest first."""
        return [n for n in self.store.names(self.query_id)
                if n not in ("schema", "deadline_missed") and "." not in n]

    def window(self, window_id: str) -> "WindowState":
        return WindowState(self.store, self.query_id, check_name(window_id, "window_id"))


class WindowState:
    """One window of one query in a store: its claims, partials, result and documents."""

    def __init__(self, store, query_id: str, window_id: str) -> None:
        self.store, self.query_id, self.window_id = store, query_id, window_id

    def __repr__(self) -> str:
        return f"WindowState({self.store.location!r}, {self.query_id!r}, {self.window_id!r})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, WindowState) and (self.store.location, self.query_id, self.window_id)
                == (other.store.location, other.query_id, other.window_id))

    def __hash__(self) -> int:
        return hash((self.store.location, self.query_id, self.window_id))

    def _key(self, *parts: str) -> str:
        return "/".join((self.query_id, self.window_id, *parts))

    @property
    def location(self) -> str:
        """The window's place in the store, for messages."""
        return self.store.uri(self._key())

    # ----------------------------------------------------------------- documents

    def doc(self, name: str) -> dict | None:
        """One of the window's documents (:data:`WINDOW_DOCS`: its plan, re-plan, report,
        late units, observed arrivals, deadline risk, units seen), or None."""
        return self.store.get(self._key(_doc_name(name)))

    def write_doc(self, name: str, doc: Any) -> str:
        """Write one of the window's documents; its location."""
        return self.store.put(self._key(_doc_name(name)), doc)

    def note_seen(self, names: Iterable[str], now: float | None = None) -> dict[str, float]:
        """When the provider first saw each unit, ``{name: epoch seconds}``: the names not
        seen yet are added as seen ``now``. A unit's arrival time is this, not its file's
        modification time (which a writer or an object store sets as it likes)."""
        now = time.time() if now is None else now
        names = [str(n) for n in names]

        def add(seen: dict | None) -> dict:
            seen = dict(seen or {})
            seen.update({n: now for n in names if n not in seen})
            return seen

        return self.store.update(self._key(_doc_name("seen")), add)

    def record(self, kind: str, name: str, rec: dict) -> str:
        """A record of the window's tasks: ``kind`` "attempts" (one per task attempt, as it
        starts) or "cpu" (a task process's CPU)."""
        if kind not in ("attempts", "cpu"):
            raise ConfigError(f"must be 'attempts' or 'cpu', got {kind!r}", field="kind")
        return self.store.put(self._key(kind, check_name(f"{name}.json", kind)), rec)

    def records(self, kind: str) -> list[dict]:
        """The records of one kind, in name order."""
        return [self.store.get(self._key(kind, n)) for n in self.store.names(self._key(kind)) if n.endswith(".json")]

    # ----------------------------------------------------------------- claims

    def claims(self) -> dict[int, dict]:
        """Every claim of the window, by batch number."""
        names = [n for n in self.store.names(self._key("claims")) if n.startswith(BATCH_PREFIX) and n.endswith(".json")]
        docs = self.store.get_many([self._key("claims", n) for n in names])
        return {batch_of(n): docs[k] for n in names if (k := self._key("claims", n)) in docs}

    def claim_of(self, batch: int) -> dict | None:
        """Batch ``batch``'s claim, or None before it claimed."""
        return self.store.get(self._claim_key(batch))

    def has_claim(self, batch: int) -> bool:
        return self.store.has(self._claim_key(batch))

    def claimed_files(self) -> list[str]:
        """Every file the window's batches have claimed, in batch order."""
        return [f for claim in self.claims().values() for f in claim.get("files", [])]

    def claimed_units(self) -> set[str]:
        return {u for claim in self.claims().values() for u in claim.get("units", [])}

    def claim(self, batch: int, units: Iterable[str | int], files: Iterable[str],
              arrived: dict[str, float] | None = None, found: dict | None = None) -> dict:
        """Claim input units (and their files) for one batch; return the claim.

        The single claim function. Under the window's claim lock: if this batch has claimed
        already, its claim is returned unchanged (a retry re-reads its first claim, whatever
        it passes now); if any unit or file is another batch's, :class:`ClaimError` names it
        and both batches; otherwise the claim ``{"batch", "units", "files", "claimed_at"}`` is
        written once. ``arrived``: when each unit was first seen; ``found``: what the check
        of the files found (:func:`airflow_iqp.filecheck.check_claim`), kept with them.
        """
        units = [check_name(str(u), "units") for u in units]  # a unit name is one plain name, as listed
        files = [str(f) for f in files]
        if len(set(units)) != len(units):
            raise ClaimError(f"batch {batch} lists a unit twice: {units}")
        key = self._claim_key(batch)
        with self.store.exclusive(self._key("claims")):
            existing = self.store.get(key)
            if existing is not None:
                return existing
            wanted_units, wanted_files = set(units), set(files)
            for other, claim in self.claims().items():
                for what, wanted, theirs in (("unit", wanted_units, claim.get("units", [])),
                                             ("file", wanted_files, claim.get("files", []))):
                    clash = wanted.intersection(theirs)
                    if clash:
                        raise ClaimError(f"{self.query_id}/{self.window_id}: {what} {sorted(clash)[0]} is already "
                                         f"claimed by batch {other}; batch {batch} cannot claim it")
            claim = {"batch": batch, "units": units, "files": files, "claimed_at": time.time()}
            if arrived is not None:
                claim["arrived"] = {u: arrived[u] for u in units if u in arrived}
            claim.update(found or {})
            self.store.put(key, claim)
            return claim

    def adopt_claim(self, batch: int, claim: dict) -> dict:
        """Take another window's claim of batch ``batch`` (a group's shared batch) as this
        window's own, unchanged: this query's final step then checks its partials against
        it as against its own claims. Written once; a retry finds it; a different claim
        already there is a :class:`ClaimError`."""
        key = self._claim_key(batch)
        if self.store.create(key, claim):
            return claim
        existing = self.store.get(key)
        if existing != json.loads(json.dumps(claim)):
            raise ClaimError(f"{self.query_id}/{self.window_id}: batch {batch} holds a claim of its own, not the "
                             f"group's")
        return existing

    def adopt_claims(self, claims: dict[int, dict]) -> None:
        """Take each of a group's ``claims`` (:meth:`claims` of its window) as this window's
        own (:meth:`adopt_claim`)."""
        for batch, claim in claims.items():
            self.adopt_claim(batch, claim)

    def _claim_key(self, batch: int) -> str:
        return self._key("claims", f"{batch_name(batch)}.json")

    # ----------------------------------------------------------------- partials and the result

    def partial_uri(self, batch: int) -> str:
        """Batch ``batch``'s partial by its name in the store (where a written one is read:
        :meth:`written_partials`)."""
        return self.store.uri(self._partial_key(batch))

    def write_partial(self, batch: int, write) -> str:
        """Have ``write(uri)`` write batch ``batch``'s partial (a parquet directory), which
        appears whole (:meth:`~airflow_iqp.store.base.StateStore.write_dir`); where it is read."""
        return self.store.write_dir(self._partial_key(batch), write)

    def has_partial(self, batch: int) -> bool:
        return self.store.has(self._partial_key(batch))

    def written_partials(self) -> dict[int, str]:
        """The partials written by now, batch -> where it is read, in batch order."""
        keys = [self._key("partials", n) for n in self.store.names(self._key("partials"))
                if n.startswith(BATCH_PREFIX) and "." not in n]
        return {batch_of(k): uri for k, uri in sorted(self.store.dir_uris(keys).items())}

    def partial_versions(self) -> dict[str, Any]:
        """URI -> version of each written partial: a partial written again (a retry) is a new version."""
        return {uri: v for b, uri in self.written_partials().items()
                if (v := self.store.version(self._partial_key(b))) is not None}

    def _partial_key(self, batch: int) -> str:
        return self._key("partials", batch_name(batch))

    def metrics_uri(self, batch: int) -> str:
        """Where batch ``batch``'s job records what it read and took (JSON), beside its partial."""
        return self.store.uri(self._metrics_key(batch))

    def metrics(self, batch: int) -> dict:
        """What batch ``batch``'s job recorded, ``{}`` before it ran."""
        return self.store.get(self._metrics_key(batch)) or {}

    def write_metrics(self, batch: int, metrics: dict) -> str:
        return self.store.put(self._metrics_key(batch), metrics)

    def _metrics_key(self, batch: int) -> str:
        return self._key("partials", f"{batch_name(batch)}.metrics.json")

    @property
    def result_uri(self) -> str:
        """Where the window's result is read (a parquet directory); its name in the store
        before it is written."""
        return self.store.dir_uri(self._key("result")) or self.store.uri(self._key("result"))

    def write_result(self, write) -> str:
        """Have ``write(uri)`` write the window's result, which appears whole; where it is read."""
        return self.store.write_dir(self._key("result"), write)

    @property
    def manifest_uri(self) -> str:
        """Where the result's manifest is, written last: its presence means the result is complete."""
        return self.store.uri(self._key("result.manifest.json"))

    def manifest(self) -> dict | None:
        """The result's manifest, or None before the result is complete."""
        return self.store.get(self._key("result.manifest.json"))

    def write_manifest(self, manifest: dict) -> str:
        return self.store.put(self._key("result.manifest.json"), manifest)

    def write_scratch(self, name: str, write) -> str:
        """Have ``write(uri)`` write throw-away output beside the window's (a fused tail's
        rehearsal); :meth:`remove_scratch` removes it."""
        return self.store.write_dir(self._scratch_key(name), write)

    def remove_scratch(self, name: str) -> None:
        self.store.remove_dir(self._scratch_key(name))

    def _scratch_key(self, name: str) -> str:
        return self._key(f".{check_name(name, 'scratch')}")

    def work_uri(self, batch: int, work: dict) -> str:
        """Write a batch job's work (what it reads and writes, by value) where the job reads
        it, for work too large for one argument of a command line."""
        return self.store.put(self._key("work", f"{batch_name(batch)}.json"), work)


def _doc_name(name: str) -> str:
    if name not in WINDOW_DOCS:
        raise ConfigError(f"a window has no document {name!r}; it has {', '.join(WINDOW_DOCS)}", field="doc")
    return f"{name}.json"
