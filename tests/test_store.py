"""The state store's claims, layout and cost history, the listing of complete units, and atomic
writes (pure Python, no Spark)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.landing import list_units
from airflow_iqp.store import ClaimError, open_store, window_at
from airflow_iqp.store.files import atomic_write_json, replace_dir, temp_sibling
from airflow_iqp.streams import files_of
from tests.support.batches import TPCH


def test_paths_follow_the_layout(tmp_path):
    ws = open_store(tmp_path).window("CQ2", "2026-01-01")
    root = tmp_path / "cq2" / "2026-01-01"
    assert ws.location == str(root)
    ws.claim(7, ["000001"], [])
    assert (root / "claims" / "batch-0007.json").is_file()
    assert ws.partial_uri(7) == str(root / "partials" / "batch-0007")
    assert ws.metrics_uri(7) == str(root / "partials" / "batch-0007.metrics.json")
    assert ws.result_uri == str(root / "result")
    assert ws.manifest_uri == str(root / "result.manifest.json")
    assert ws.store.cost_history_location == str(tmp_path / "cost_history.jsonl")
    assert window_at(ws.location) == ws
    with pytest.raises(ConfigError):
        open_store(tmp_path).window("cq2", "../etc")
    with pytest.raises(ConfigError):
        ws.partial_uri(-1)


def test_double_claim_is_refused_and_retry_returns_the_same_manifest(tmp_path):
    ws = open_store(tmp_path).window("cq2", "w")
    first = ws.claim(0, ["000000", "000001"], ["a/orders.parquet", "b/orders.parquet"])
    assert first["units"] == ["000000", "000001"] and first["batch"] == 0 and "claimed_at" in first
    with pytest.raises(ClaimError, match=r"unit 000001 is already claimed by batch 0"):
        ws.claim(1, ["000001", "000002"], ["c/orders.parquet"])
    with pytest.raises(ClaimError, match=r"file a/orders.parquet is already claimed by batch 0"):
        ws.claim(1, ["000009"], ["a/orders.parquet"])
    # the refused claims left nothing behind
    assert list(ws.claims()) == [0]
    # a retry of batch 0 re-reads its manifest unchanged, whatever it asks for now
    again = ws.claim(0, ["000005"], ["z"])
    assert again == first
    assert ws.claim_of(0) == first
    second = ws.claim(1, ["000002"], ["c/orders.parquet"])
    assert second["units"] == ["000002"]
    assert not [p for p in (Path(ws.location) / "claims").iterdir() if p.name.startswith(".") and p.name != ".lock"]


def _claimer(location: str, worker: int, n_units: int, queue, barrier) -> None:
    ws = open_store(location).window("cq3", "w")
    won = []
    barrier.wait()  # every process starts claiming at the same moment
    for start in range(n_units):
        batch = worker * 1000 + start
        units = [f"{u:06d}" for u in range(start, min(start + 3, n_units))]
        try:
            ws.claim(batch, units, [f"/x/{u}/lineitem.parquet" for u in units])
            won.append(batch)
        except ClaimError:
            pass
    queue.put(won)


@pytest.fixture(params=["local", "s3"])
def any_store(request, tmp_path) -> str:
    """The location of an empty store of each implementation: a directory, and a prefix on a
    real S3-compatible server (:mod:`iqp_dev.s3`)."""
    if request.param == "local":
        return str(tmp_path / "state")
    return request.getfixturevalue("s3_server").bucket("race") + f"/{tmp_path.name}"


def test_eight_processes_racing_for_the_same_units_claim_each_unit_once(any_store):
    """Eight processes claim overlapping runs of the same units at once; each unit has exactly
    one winner, and together they claim every unit."""
    ctx = mp.get_context("fork")
    workers = range(1, 9)
    queue, barrier = ctx.Queue(), ctx.Barrier(len(workers))
    n_units = 12
    procs = [ctx.Process(target=_claimer, args=(any_store, w, n_units, queue, barrier)) for w in workers]
    for p in procs:
        p.start()
    won = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    claims = open_store(any_store).window("cq3", "w").claims()
    assert sorted(claims) == sorted(b for w in won for b in w)
    seen: dict[str, int] = {}
    for batch, manifest in claims.items():
        for u in manifest["units"]:
            assert u not in seen, f"unit {u} claimed by batches {seen[u]} and {batch}"
            seen[u] = batch
    assert set(seen) == {f"{u:06d}" for u in range(n_units)}  # greedy claiming covers every unit


def _write_part(uri: str, text: str) -> None:
    """Write one file into the directory at ``uri`` (local or ``s3a://``), as a Spark job would."""
    from airflow_iqp.store.objects import fs_and_path

    if "://" in uri:
        fs, path = fs_and_path(uri)
        fs.pipe_file(f"{path}/part-0.parquet", text.encode())
    else:
        os.makedirs(uri)
        Path(uri, "part-0.parquet").write_text(text)


def _read_part(uri: str) -> str:
    from airflow_iqp.store.objects import fs_and_path

    if "://" in uri:
        fs, path = fs_and_path(uri)
        return fs.cat_file(f"{path}/part-0.parquet").decode()
    return Path(uri, "part-0.parquet").read_text()


def test_a_partial_appears_whole_and_a_rewrite_replaces_it_in_each_store(any_store):
    """A writer that fails half-way leaves nothing a reader sees; a partial written again is a
    new version, read at its new place; a scratch directory goes when removed."""
    ws = open_store(any_store).window("q", "w")

    def fails(uri: str) -> None:
        _write_part(uri, "half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        ws.write_partial(0, fails)
    assert ws.written_partials() == {} and not ws.has_partial(0) and ws.partial_versions() == {}
    first = ws.write_partial(0, lambda uri: _write_part(uri, "one"))
    assert ws.written_partials() == {0: first} and _read_part(first) == "one"
    v1 = ws.partial_versions()
    second = ws.write_partial(0, lambda uri: _write_part(uri, "two"))
    assert ws.written_partials() == {0: second} and _read_part(second) == "two"
    assert ws.partial_versions() != v1 and list(ws.partial_versions()) == [second]
    result = ws.write_result(lambda uri: _write_part(uri, "result"))
    assert ws.result_uri == result and _read_part(result) == "result"
    ws.write_scratch("rehearsal", lambda uri: _write_part(uri, "scratch"))
    ws.remove_scratch("rehearsal")
    assert ws.store.dir_uri(f"q/w/.rehearsal") is None
    assert ws.store.names("q/w/partials") == ["batch-0000"]


def test_list_units_sees_only_complete_units(tmp_path):
    (tmp_path / "000002").mkdir()
    for f in ("orders.parquet", "lineitem.parquet"):
        (tmp_path / "000002" / f).write_bytes(b"x")
    (tmp_path / "000010").mkdir()
    for f in ("orders.parquet", "lineitem.parquet"):
        (tmp_path / "000010" / f).write_bytes(b"x")
    (tmp_path / "000003").mkdir()
    (tmp_path / "000003" / "orders.parquet").write_bytes(b"x")  # lineitem missing: incomplete
    (tmp_path / ".000004.tmp").mkdir()
    for f in ("orders.parquet", "lineitem.parquet"):
        (tmp_path / ".000004.tmp" / f).write_bytes(b"x")
    (tmp_path / "stray.txt").write_text("x")
    assert [p.name for p in list_units(tmp_path, TPCH)] == ["000002", "000010"]
    assert list_units(tmp_path / "missing", TPCH) == []
    lineitem = [s for s in TPCH if s.name == "lineitem"]
    assert files_of([tmp_path / "000002"], lineitem) == [str(tmp_path / "000002" / "lineitem.parquet")]


def test_cost_history_appends_and_filters(tmp_path):
    store = open_store(tmp_path)
    store.record_cost(query="CQ2", kind="batch", units=3, batches=1, wall_seconds=1.5, cpu_seconds=2.0,
                      task_seconds=1.0, window="w")
    store.record_cost(query="cq2", kind="final", units=6, batches=2, wall_seconds=0.5, window="w")
    store.record_cost(query="q6", kind="batch", units=6, batches=1, wall_seconds=3.0, backend="pyspark")
    rows = store.cost_history()
    assert [r["kind"] for r in rows] == ["batch", "final", "batch"]
    assert set(rows[0]) >= {"query", "backend", "kind", "units", "batches", "wall_seconds", "cpu_seconds",
                            "task_seconds", "window", "recorded_at"}
    assert [r["units"] for r in store.cost_history(query="cq2")] == [3, 6]
    assert [r["query"] for r in store.cost_history(kind="batch", backend="pyspark")] == ["q6"]
    with pytest.raises(ConfigError):
        store.record_cost(query="q6", kind="other", units=1, batches=1, wall_seconds=1)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and "lock" not in p.name]


def test_atomic_writes_leave_no_temp_and_replace_dirs(tmp_path):
    atomic_write_json(tmp_path / "a" / "m.json", {"x": 1})
    assert json.loads((tmp_path / "a" / "m.json").read_text()) == {"x": 1}
    assert os.listdir(tmp_path / "a") == ["m.json"]
    final = tmp_path / "partial"
    for version in ("old", "new"):
        tmp = temp_sibling(final)
        tmp.mkdir()
        (tmp / "part-0.parquet").write_text(version)
        replace_dir(tmp, final)
    assert (final / "part-0.parquet").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "partial"]


def test_a_streams_columns_keep_the_files_order_and_the_first_record_holds(tmp_path):
    """A CSV file's columns are read by position: the record keeps them in the files' order."""
    record = open_store(tmp_path / "state").query("clicks")
    first = {"columns": {"ts": "TIMESTAMP", "user_id": "BIGINT", "page": "STRING", "country": "STRING"},
             "taken_from": "/landing/a.csv"}
    assert list(dict(record.record_columns("clicks", first)["columns"])) == ["ts", "user_id", "page", "country"]
    later = record.record_columns("clicks", {"columns": {"a": "INT"}, "taken_from": "/landing/b.csv"})
    assert list(dict(later["columns"])) == ["ts", "user_id", "page", "country"]
    assert list(dict(record.columns("clicks")["columns"])) == ["ts", "user_id", "page", "country"]
