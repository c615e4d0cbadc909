"""Two bad CSV files under the default setting, through the real claim, the batch job's own
function and the final task: the window gets its result from the good files, marked partial,
and the report names both bad files with their problems."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest

from tests.support.reference import assert_same_rows
from tests.support.tasks import START, TI, context

from airflow_iqp.query import decompose
from airflow_iqp.query.store import Saved, save_query
from airflow_iqp.spark.batch import batch_work, execute_batch
from airflow_iqp.spark.merge import execute_final
from airflow_iqp.streams import Stream
from airflow_iqp.window.config import window_id
from airflow_iqp.window.readiness import claim_batch
from tests.support.batches import make_batch

pytestmark = pytest.mark.spark

SQL = ("SELECT page, count(*) AS clicks, count(DISTINCT user_id) AS users, avg(latency) AS avg_latency, "
       "max(latency) AS max_latency FROM clicks GROUP BY page ORDER BY page")
COLUMNS = {"ts": "BIGINT", "page": "VARCHAR", "user_id": "BIGINT", "latency": "DOUBLE"}
SCHEMA = "ts BIGINT, page STRING, user_id BIGINT, latency DOUBLE"
BAD = {"0003.csv": "ts,page,user_id,latency\n1,/a,1,0.5\n2,/b,2\n",            # a row with three fields
       "0005.csv": "ts,page,user_id,latency\n1,/a,1,0.5\n2,/b,2,slow\n"}       # latency 'slow' is no DOUBLE


def _write(landing, name: str, i: int) -> None:
    rows = "".join(f"{i * 100 + r},/p{(i + r) % 3},{(i * r) % 5},{(i + r) * 0.25}\n" for r in range(12))
    (landing / name).write_text(BAD.get(name, "ts,page,user_id,latency\n" + rows))


def _duckdb(files) -> list[tuple]:
    import duckdb

    con = duckdb.connect()
    con.execute(f"CREATE VIEW clicks AS SELECT * FROM read_csv({[str(f) for f in files]!r}, header=true, "
                f"columns={COLUMNS!r})")
    rows = [tuple(r) for r in con.execute(SQL).fetchall()]
    con.close()
    return rows


def test_two_bad_files_under_the_default_leave_a_partial_result_from_the_good_ones_naming_both(spark, tmp_path):
    from airflow_iqp.operators.final import FinalOperator

    landing, state = tmp_path / "landing", tmp_path / "state"
    landing.mkdir()
    stream = Stream("clicks", path=str(landing), format="csv", schema=SCHEMA)   # on_bad_unit: the default
    save_query(state, Saved(decompose(SQL, id="clicks_q", streams=["clicks"]), (stream,)))
    t0 = START.timestamp()
    batches = [make_batch(query="clicks_q", window_id=window_id(t0), index=i, of=2, last=i == 2,
                          state_dir=str(state), landing=str(landing), streams=(stream.to_dict(),),
                          deadline_ts=time.time() + 3600, label=f"batch {i}/2") for i in (1, 2)]
    names = [f"{i:04d}.csv" for i in range(1, 7)]
    for i, name in enumerate(names[:3], 1):
        _write(landing, name, i)
    first = claim_batch(batches[0])
    for i, name in enumerate(names[3:], 4):
        _write(landing, name, i)
    second = claim_batch(batches[1])
    assert [q["unit"] for q in first["quarantined"]] == ["0003.csv"]
    assert [q["unit"] for q in second["quarantined"]] == ["0005.csv"]
    for b in batches:
        metrics = execute_batch(spark, batch_work(b.window_state(), b.index, b.static or None),
                                backend="spark-submit", history=False)
        assert metrics["units"] == 2 and metrics["rows_in"] == 24                # the claim's rows, not read again

    op = FinalOperator(task_id="final", query="clicks_q", plan=[b.to_dict() for b in batches], state_dir=str(state))
    op._runner.run_final = lambda ws, **_: execute_final(spark, ws, backend="spark-submit", history=False)
    report = op.execute(context(TI("final")))

    ws = batches[0].window_state()
    manifest = ws.manifest()
    good = [landing / n for n in names if n not in BAD]
    assert sorted(manifest["units"]) == sorted(p.name for p in good)
    got = [tuple(r.values()) for r in pq.read_table(manifest["result"]).to_pylist()]
    assert_same_rows(got, _duckdb(good), True, "the good files")
    assert report["partial"] is True and report["deadline_met"] and report["late"] is False
    reasons = {q["unit"]: q["reason"] for q in report["quarantined"]}
    assert sorted(reasons) == ["0003.csv", "0005.csv"] and report["late_units"] == []
    assert "not a readable csv file" in reasons["0003.csv"] and "Expected 4 columns, got 3" in reasons["0003.csv"]
    assert "column latency has 'slow', expected DOUBLE" in reasons["0005.csv"]
