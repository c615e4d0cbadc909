"""The state store in an object store, on a real S3-compatible server (moto's, as a process:
``iqp_dev.s3``): its layout, create-only writes, updates from racing processes, and leases
and turns that lapse when the process holding them is killed with SIGKILL."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.store import ObjectStore, open_store, window_at

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def location(s3_server, request) -> str:
    return s3_server.bucket("objects") + "/" + request.node.name.split("[")[0]


def test_layout_uris_and_documents(location):
    store = open_store(location)
    assert isinstance(store, ObjectStore) and store.location == location
    ws = store.window("Revenue", "20260101T000000")
    bucket_path = location.removeprefix("s3://")
    assert ws.partial_uri(3) == f"s3a://{bucket_path}/revenue/20260101T000000/partials/batch-0003"
    assert window_at(ws.location) == ws and open_store(ws.location.rsplit("/", 2)[0]).location == location
    assert store.get("nothing.json") is None and store.names("nowhere") == []
    assert store.create("revenue/schema/events.json", {"columns": [["b", "INT"], ["a", "INT"]]})
    assert not store.create("revenue/schema/events.json", {"columns": []})  # the first create holds
    assert store.get("revenue/schema/events.json")["columns"] == [["b", "INT"], ["a", "INT"]]
    ws.claim(0, ["u1"], ["f1"])
    ws.note_seen(["u1"], now=5.0)
    # The leases the claim and the update took are hidden, and released.
    assert store.names("revenue/20260101T000000") == ["claims", "seen.json"]
    assert store.names("revenue/20260101T000000/claims") == ["batch-0000.json"]
    assert not store.fs.find(f"{bucket_path}/revenue/20260101T000000/claims/.lease")
    store.record_cost(query="Revenue", kind="batch", units=1, batches=1, wall_seconds=1.0)
    store.record_cost(query="revenue", kind="final", units=1, batches=1, wall_seconds=2.0)
    assert [r["kind"] for r in store.cost_history("REVENUE")] == ["batch", "final"]
    assert store.version("revenue/20260101T000000/partials/batch-0000") is None and ws.written_partials() == {}

    def write(uri: str) -> None:
        assert uri.startswith(f"s3a://{bucket_path}/revenue/20260101T000000/partials/.batch-0000.v")
        store.fs.pipe_file(uri.removeprefix("s3a://") + "/part-0.parquet", b"one")

    where = ws.write_partial(0, write)
    first = store.version("revenue/20260101T000000/partials/batch-0000")
    # The key names the directory Spark wrote; the directory itself is hidden from listings.
    assert first is not None and ws.written_partials() == {0: where} and ws.has_partial(0)
    assert store.names("revenue/20260101T000000/partials") == ["batch-0000"]


@pytest.mark.parametrize("bad", ["s3://", "s3a:///", "gs://bucket/x", "bucket/x"])
def test_a_location_that_is_not_an_object_store_is_refused(bad):
    with pytest.raises(ConfigError, match="s3://bucket/prefix"):
        ObjectStore(bad)


def _note(location: str, names: list[str], barrier) -> None:
    ws = open_store(location).window("q", "w")
    barrier.wait()
    for n in names:
        ws.note_seen([n], now=float(len(n)))


def test_updates_from_racing_processes_lose_nothing(location):
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(4)
    parts = [[f"p{w}-{i}" for i in range(6)] for w in range(4)]
    procs = [ctx.Process(target=_note, args=(location, names, barrier)) for names in parts]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert sorted(open_store(location).window("q", "w").doc("seen")) == sorted(n for ns in parts for n in ns)


HOLD = '''
import sys, time
from airflow_iqp.store.objects import ObjectStore
store = ObjectStore(sys.argv[1], lease_s=float(sys.argv[2]))
if sys.argv[3] == "lease":
    store.take_lease("q/w/claims")
    print("held", flush=True)
else:
    with store.turns().queue("0001-held") as ticket:
        assert ticket.try_take(1, True) == (True, False)
        print("held", flush=True)
        time.sleep(600)
time.sleep(600)
'''


def _holder(location: str, lease_s: float, what: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, location, str(lease_s), what], stdout=subprocess.PIPE,
                            text=True, cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_claim_waits_out_the_lease_of_a_killed_process_then_claims(location):
    lease_s = 3.0
    proc = _holder(location, lease_s, "lease")
    store = ObjectStore(location)
    (gen,) = store.names("q/w/claims/.lease")
    expires = store.get(f"q/w/claims/.lease/{gen}")["expires"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    claim = store.window("q", "w").claim(0, ["u1"], [])
    assert claim["claimed_at"] >= expires  # not before the killed holder's lease lapsed
    assert store.names("q/w/claims/.lease") == []  # the lapsed lease was cleared, and the new one released


def test_a_live_turn_is_renewed_past_its_lease_and_a_killed_tasks_turn_lapses(location):
    # The suite's second lane runs at nice 19 beside Airflow and Spark: the holder renews every
    # third of the lease, so a lease of a few seconds lapses only if the holder or the S3 server
    # gets no CPU for two of them.
    lease_s = 4.0
    proc = _holder(location, lease_s, "turn")
    store = ObjectStore(location, lease_s=lease_s)
    try:
        with store.turns().queue("0002-next") as ticket:
            until = time.time() + 2 * lease_s  # the holder renews its turn: it stays taken
            while time.time() < until:
                assert ticket.try_take(1, True) == (False, False)
                time.sleep(0.2)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            killed = time.time()
            while not ticket.try_take(1, True)[0]:
                assert time.time() < killed + 10 * lease_s, "the killed task's turn never lapsed"
                time.sleep(0.2)
            assert store.names("_turns/running") == ["0002-next"]
        assert store.names("_turns/running") == [] and store.names("_turns/waiting") == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_store_opened_after_the_endpoint_changed_reaches_the_new_endpoint(location, tmp_path):
    """fsspec keeps one file system per set of arguments: a store opened against a second
    server must not reuse the first one's."""
    from iqp_dev.s3 import s3_server

    open_store(location).put("here.json", {"server": 1})
    with s3_server(tmp_path) as second:
        other = second.bucket("objects") + "/" + location.rsplit("/", 1)[-1]
        assert other == location  # the same name, on another server
        assert open_store(other).get("here.json") is None
        open_store(other).put("here.json", {"server": 2})
    assert open_store(location).get("here.json") == {"server": 1}


def test_a_log_s_records_are_fetched_once_per_process_and_handed_out_as_copies(location, monkeypatch):
    store = open_store(location)
    for units in (1, 2, 3):
        store.record_cost(query="q", kind="batch", units=units, batches=1, wall_seconds=1.0)
    fetched: list[str] = []
    get_many = ObjectStore.get_many

    def counting(self, keys):
        fetched.extend(keys)
        return get_many(self, keys)

    monkeypatch.setattr(ObjectStore, "get_many", counting)
    assert [r["units"] for r in store.cost_history("q")] == [1, 2, 3]
    assert len(fetched) == 3
    store.record_cost(query="q", kind="final", units=3, batches=2, wall_seconds=2.0)
    again = open_store(location)  # another store object in the same process: the same records
    assert [(r["kind"], r["units"]) for r in again.cost_history("q")] == [("batch", 1), ("batch", 2), ("batch", 3),
                                                                       ("final", 3)]
    assert len(fetched) == 4  # only the new record was read
    records = again.cost_history("q")
    records[0]["units"] = 99  # a caller's change does not reach the next reader
    assert again.cost_history("q", kind="batch")[0]["units"] == 1
