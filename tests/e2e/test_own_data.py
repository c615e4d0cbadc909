"""Own data end to end: a user's SQL over CSV files of the writer's own naming, with no
``units=``, through real Airflow processes and a real Spark Connect server.

Three consecutive windows of 60 s. A writer drops CSV files at a varying rate, each written
under an in-flight name and renamed, next to ``.crc`` checksums and a ``_SUCCESS`` marker.
The first window (12 files) is planned from the rate hint; the second gets 16 files, 30 %
more than the history (the first window's 12) predicts, and 3 more files 8 s after its
end, after its last claim; the third gets 10, fewer than predicted. Each first revision must
equal DuckDB over the window's files, meet its deadline, and claim every file once. With
``late="merge"`` the third window's run merges the second window's late files into its
result: revision 2 equals DuckDB over all 19 files.

In the same Airflow, beside it, two DAGs on the same server read writers that know
nothing of the DAGs' grid (tests/e2e/dags/iqp_layouts.py), neither with a cost hint: one
drops files into one flat directory, the other into minute partitions named by its own
clock, both at random times across the three windows' boundaries. Each file must be counted
in exactly one window's result, the window it arrived in, and each window must equal DuckDB
over the files that arrived in it. The flat writer also drops two bad files into the second
window: that window still gets its result, from the good files, and names both. The Hive
DAG declares ``units=4`` though about twice as many files arrive in each window: the last
batch claims the rest.
"""

from __future__ import annotations

import json
import random
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from iqp_dev.local_airflow import airflow_env, free_port  # noqa: E402
from tests.support.events import write_csv_file  # noqa: E402
from tests.support.reference import assert_same_rows  # noqa: E402

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

W = 60            # window length, s
OFFSET = 90       # deadline after the window's end, s: the last batch and the merge, while the
                  # three DAGs' tasks and Spark jobs share the machine at every window's end
COUNTS = (12, 16, 10)  # files in the windows: the second 30 % more than the first predicts
LATE = 3          # files landing in the second window's directory after its last claim
LATENESS = 15     # s after its end plus grace that the next run merges them
DAG_ID = "iqp_events_csv"
LAYOUTS = ("events_flat", "events_hive")  # the DAGs of tests/e2e/dags/iqp_layouts.py
PER_WINDOW = 8    # files per window from each of their writers, on average
PARTITIONS = "dt=%Y-%m-%d/hour=%H/minute=%M"
SQL = ("SELECT country, count(*) AS n, sum(amount) AS revenue, avg(qty) AS avg_qty, count(DISTINCT user_id) AS users "
       "FROM events WHERE amount IS NOT NULL GROUP BY country ORDER BY country")


def wid(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y%m%dT%H%M%S")


def writer(landing: Path, start: float, count: int, seed: int, out: list[str], late: list[str] | None = None) -> None:
    """``count`` files through the window at a varying rate (a burst, a lull, a trickle);
    with ``late``, :data:`LATE` more 8 s after the window's end."""
    rng = random.Random(seed)
    landing.mkdir(parents=True, exist_ok=True)
    offsets = sorted([rng.uniform(2, 12) for _ in range(count // 2)]
                     + [rng.uniform(30, W - 4) for _ in range(count - count // 2)])
    for off in offsets:
        time.sleep(max(0.0, start + off - time.time()))
        out.append(write_csv_file(landing, rng))
    time.sleep(max(0.0, start + W - 1 - time.time()))
    (landing / "_SUCCESS").write_text("")
    if late is not None:
        time.sleep(max(0.0, start + W + 8 - time.time()))
        late.extend(write_csv_file(landing, rng) for _ in range(LATE))


def grid_blind_writer(root: Path, first: float, last: float, seed: int, out: dict[str, float],
                      partitions: str | None = None, bad_at: float | None = None) -> None:
    """Files at random times in ``[first, last)``, some a moment either side of a multiple of
    :data:`W` from ``first`` (the writer does not know it is a window boundary), into ``root``
    or into the partition of ``partitions`` its clock names. ``out``: file path -> its
    last-modified time. With ``bad_at``, two bad files then: a CSV file missing columns, and
    a file of bytes that is no CSV."""
    rng = random.Random(seed)
    times = sorted([rng.uniform(first + 1, last - 1) for _ in range(3 * PER_WINDOW - 6)]
                   + [first + k * W + d for k in (1, 2) for d in (-0.6, -0.2, 0.4)])
    bad = [] if bad_at is None else [bad_at, bad_at + 1.5]
    for at in sorted(times + bad):
        time.sleep(max(0.0, at - time.time()))
        where = root / datetime.now(timezone.utc).strftime(partitions) if partitions else root
        where.mkdir(parents=True, exist_ok=True)
        if at in bad:
            path = where / f"bad-{bad.index(at)}.csv"
            tmp = where / f".{path.name}.inprogress"
            tmp.write_bytes(b"user_id,country\n1,fr\n" if bad.index(at) == 0 else bytes(range(256)) * 4)
            tmp.rename(path)
        else:
            path = where / write_csv_file(where, rng)
        out[str(path)] = path.stat().st_mtime


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    data = tmp_path_factory.mktemp("own_data")
    anchor = (int(time.time()) // 10) * 10 + 50
    env = {"IQP_DATA": str(data), "IQP_ANCHOR": datetime.fromtimestamp(anchor, timezone.utc).isoformat(),
           "IQP_END": datetime.fromtimestamp(anchor + 2 * W + 1, timezone.utc).isoformat(),
           "IQP_WINDOW_S": str(W), "IQP_DEADLINE_S": str(OFFSET), "IQP_RATE": str(COUNTS[0] / W),
           "IQP_LATE": "merge", "IQP_LATENESS_S": str(LATENESS), "IQP_HIVE_UNITS": "4",
           "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
           "AIRFLOW__IQP__STATE_DIR": str(data / "state")}
    starts = [anchor, anchor + W, anchor + 2 * W]
    written: dict[float, list[str]] = {s: [] for s in starts}
    late: list[str] = []
    out = {"data": data, "starts": starts, "written": written, "late": late}
    from airflow_iqp.spark.connect import start_server, stop_server

    port = free_port()
    start_server(port, base=data / "connect", driver_memory="1g")
    env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"] = json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1",
                                                           "port": port})
    arrived = {name: {} for name in LAYOUTS}
    out.update(arrived=arrived)
    try:
        with airflow_env(ROOT / "tests" / "e2e" / "dags", extra_env=env) as af:
            for dag_id in (DAG_ID, *(f"iqp_{n}" for n in LAYOUTS)):
                af.wait_for_dag(dag_id)
                af.unpause(dag_id)
            threads = [threading.Thread(target=writer, args=(data / "landing" / wid(s), s, n, i, written[s],
                                                             late if i == 1 else None))
                       for i, (s, n) in enumerate(zip(starts, COUNTS))]
            threads += [threading.Thread(target=grid_blind_writer, args=(data / "flat", anchor, anchor + 3 * W, 11,
                                                                         arrived["events_flat"]),
                                         kwargs={"bad_at": anchor + W + 20}),
                        threading.Thread(target=grid_blind_writer, args=(data / "hive", anchor, anchor + 3 * W, 12,
                                                                         arrived["events_hive"]),
                                         kwargs={"partitions": PARTITIONS})]
            for t in threads:
                t.start()
            out["run_ids"] = {d: [af.window_run(d, s, timeout=W + 180) for s in starts]
                              for d in (DAG_ID, *(f"iqp_{n}" for n in LAYOUTS))}
            out["all_runs"] = {d: [af.wait_for_run(d, r, timeout=3 * W + OFFSET + 300, expect_success=False)
                                   for r in ids] for d, ids in out["run_ids"].items()}
            out["all_tis"] = {d: [af.task_instances(d, r) for r in ids] for d, ids in out["run_ids"].items()}
            out["runs"], out["tis"] = out["all_runs"][DAG_ID], out["all_tis"][DAG_ID]
            out["logs"] = "\n".join(  # what failed, in the assertion message
                f"--- {d} {r} {t['task_id']}[{t['map_index']}] ---\n"
                + af.task_log(d, r, t["task_id"], max(1, t["try_number"]), t["map_index"])[-3000:]
                for d, ids in out["run_ids"].items() for r, tis in zip(ids, out["all_tis"][d])
                for t in tis if t["state"] == "failed")
            for t in threads:
                t.join(timeout=W + 10)
    finally:
        stop_server(port, base=data / "connect")
    return out


def test_each_window_equals_duckdb_over_its_files_and_meets_its_deadline(run):
    import pyarrow.parquet as pq

    from airflow_iqp.store import open_store

    assert [r["state"] for r in run["runs"]] == ["success"] * 3, run["logs"]
    for i, (start, count) in enumerate(zip(run["starts"], COUNTS)):
        names = run["written"][start]
        assert len(names) == count
        ws = open_store(run["data"] / "state").window("events_csv", wid(start))
        claims = ws.claims()
        units = [u for c in claims.values() for u in c["units"]]
        everything = names + (run["late"] if i == 1 else [])
        assert len(units) == len(set(units)) and sorted(units) == sorted(everything), "lost or counted twice"
        report, manifest = ws.doc("report"), ws.manifest()
        assert report["deadline_met"] and report["quarantined"] == []
        first = manifest["revisions"][0]
        assert sorted(first["units"]) == sorted(names) and first["written_at"] <= report["deadline_ts"]
        assert report["finished_ts"] == first["written_at"]
        got = [tuple(r.values()) for r in pq.read_table(manifest["result"]).to_pylist()]
        assert_same_rows(got, duckdb_csv(run, start, everything), ordered=True, label=ws.window_id)
        assert manifest["revision"] == (2 if i == 1 else 1) and not manifest["partial"]


def duckdb_csv(run, start, names) -> list[tuple]:
    import duckdb

    files = [str(run["data"] / "landing" / wid(start) / n) for n in names]
    con = duckdb.connect()
    con.execute(f"CREATE VIEW events AS SELECT * FROM read_csv({files!r}, header = true)")
    return con.execute(SQL).fetchall()


def test_late_files_are_merged_by_the_next_run_as_a_second_revision(run):
    from airflow_iqp.store import open_store

    assert len(run["late"]) == LATE
    ws = open_store(run["data"] / "state").window("events_csv", wid(run["starts"][1]))
    manifest, report = ws.manifest(), ws.doc("report")
    assert [r["revision"] for r in manifest["revisions"]] == [1, 2] == [r["revision"] for r in report["revisions"]]
    assert sorted(set(manifest["revisions"][1]["units"]) - set(manifest["revisions"][0]["units"])) == sorted(run["late"])
    late_tis = {t["task_id"]: t["state"] for t in run["tis"][2] if t["task_id"] in ("late_wait", "late")}
    assert late_tis == {"late_wait": "success", "late": "success"}
    # The first window had nothing late: the second run's late batch skipped.
    assert {t["task_id"]: t["state"] for t in run["tis"][1] if t["task_id"] == "late"} == {"late": "skipped"}


def test_the_second_window_is_planned_from_the_first_and_gets_30_percent_more(run):
    from airflow_iqp.store import open_store

    first, second, third = (open_store(run["data"] / "state").window("events_csv", wid(s)).doc("plan")
                            for s in run["starts"])
    assert "12 units expected (rate hint)" in first["models"]
    assert "12 units expected (median of 1 earlier windows)" in second["models"]
    assert len(run["written"][run["starts"][1]]) == round(12 * 1.3)
    assert "units expected (median of 2 earlier windows)" in third["models"]
    assert all(b.get("known_total") is False for b in second["batches"] + third["batches"])


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_grid_blind_writers_files_each_count_once_in_the_window_they_arrived_in(run, name):
    """A flat directory and a Hive layout: every file in exactly one window's result, the
    window of its last-modified time, each window equal to DuckDB over its files."""
    import duckdb
    import pyarrow.parquet as pq

    from airflow_iqp.store import open_store

    assert [r["state"] for r in run["all_runs"][f"iqp_{name}"]] == ["success"] * 3, run["logs"]
    arrived = run["arrived"][name]
    bad = sorted(p for p in arrived if Path(p).name.startswith("bad-"))
    claimed: list[str] = []
    for start in run["starts"]:
        ws = open_store(run["data"] / "state").window(name, wid(start))
        mine = sorted(p for p, at in arrived.items() if start <= at < start + W)
        good = [p for p in mine if p not in bad]
        claims = ws.claims()
        files = [f for c in claims.values() for f in c["files"]]  # bad files too: claimed, then quarantined
        assert sorted(files) == mine, f"{ws.window_id}: claimed files are not the ones that arrived in it"
        claimed += files
        report, manifest = ws.doc("report"), ws.manifest()
        assert report["deadline_met"], report
        if name == "events_hive":  # units=4 undercounts: the last batch took the rest
            assert len(mine) > 4 and len(claims[max(claims)]["units"]) >= len(mine) - 4
        con = duckdb.connect()
        con.execute(f"CREATE VIEW events AS SELECT * FROM read_csv({good!r}, header = true)")
        got = [tuple(r.values()) for r in pq.read_table(manifest["result"]).to_pylist()]
        assert_same_rows(got, con.execute(SQL).fetchall(), ordered=True, label=f"{name} {ws.window_id}")
        in_bad = [p for p in bad if p in mine]
        if in_bad:  # the window with the two bad files: a result all the same, both named
            assert manifest["partial"] and all(Path(p).name in json.dumps(report) for p in in_bad), report
    assert sorted(claimed) == sorted(arrived) and len(claimed) == len(set(claimed)), "lost or counted twice"
    if name == "events_flat":
        assert len(bad) == 2
