"""How a unit file is checked (airflow_iqp.filecheck): corrupt files, wrong schemas and types
named, quarantined or failed, and the columns a window's first good unit sets (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_iqp.errors import DataError
from airflow_iqp.filecheck import expected_columns, inspect_files
from airflow_iqp.query import decompose
from airflow_iqp.query.store import Saved
from airflow_iqp.store import open_store
from airflow_iqp.streams import Stream


def _parquet(path: Path, **cols) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path)
    return path


def _saved(stream: Stream) -> Saved:
    return Saved(decompose("SELECT k, sum(x) AS s FROM events GROUP BY k", id="q", streams=["events"]), (stream,))


@pytest.fixture
def window(tmp_path) -> Path:
    d = tmp_path / "events"
    _parquet(d / "1.parquet", k=["a", "b"], x=[1, 2])
    _parquet(d / "2.parquet", k=["a"], x=[3])
    (d / "3.parquet").write_bytes(b"PAR1 this is not a parquet file")              # corrupt
    _parquet(d / "4.parquet", k=["a"], y=[3])                                     # wrong schema
    _parquet(d / "5.parquet", k=["c"], x=[1.5])                                   # wrong type
    return d


def test_fail_mode_names_the_corrupt_file(window):
    files = [str(window / "1.parquet"), str(window / "3.parquet")]
    with pytest.raises(DataError, match=r"3\.parquet: not a readable parquet file for stream events"):
        inspect_files(files, _saved(Stream("events", on_bad_unit="fail")))


def test_fail_mode_names_the_wrong_schema_file_and_the_mismatch(window):
    for name, why in (("4.parquet", "column x is missing"), ("5.parquet", "column x is double, expected BIGINT")):
        with pytest.raises(DataError, match=f"{name}: wrong schema for stream events: {why}"):
            inspect_files([str(window / "1.parquet"), str(window / name)], _saved(Stream("events", on_bad_unit="fail")))


def test_quarantine_mode_takes_the_bad_units_out_and_names_them(window):
    files = [str(window / f"{i}.parquet") for i in range(1, 6)]
    ins = inspect_files(files, _saved(Stream("events", on_bad_unit="quarantine")))
    assert ins.files == files[:2]
    assert [(q["unit"], q["file"]) for q in ins.quarantined] == [(f"{i}.parquet", files[i - 1]) for i in (3, 4, 5)]
    assert "column x is missing" in ins.quarantined[1]["reason"]


def test_the_first_units_schema_is_recorded_and_binds_later_batches(window, tmp_path):
    record = open_store(tmp_path / "state").query("q")
    assert expected_columns(Stream("events"), str(window / "1.parquet"), record) == {"k": "STRING", "x": "BIGINT"}
    # A later batch whose first file has another schema is still checked against the record.
    assert expected_columns(Stream("events"), str(window / "5.parquet"), record) == {"k": "STRING", "x": "BIGINT"}
    with pytest.raises(DataError, match="5.parquet: wrong schema"):
        inspect_files([str(window / "5.parquet")], _saved(Stream("events", on_bad_unit="fail")), record)


def test_a_stream_named_as_a_tpch_table_has_its_own_files_columns(tmp_path):
    """A user's stream called orders, of directory units, is not TPC-H's: with no declared
    schema its columns are those of its first unit's file, not TPC-H's orders columns."""
    unit = _parquet(tmp_path / "000001" / "orders.parquet", region=["eu"], amount=[2])
    assert expected_columns(Stream("orders", unit="dir"), str(unit)) == {"region": "STRING", "amount": "BIGINT"}


def test_a_corrupt_file_leading_a_batch_is_quarantined_not_taken_for_the_columns(window, tmp_path):
    """The columns come from the first readable file: a corrupt one leading the batch is
    quarantined (it used to fail the batch while the columns were read from it)."""
    record = open_store(tmp_path / "state").query("q")
    files = [str(window / "3.parquet"), str(window / "2.parquet")]
    ins = inspect_files(files, _saved(Stream("events", on_bad_unit="quarantine")), record)
    assert ins.files == [files[1]] and [q["unit"] for q in ins.quarantined] == ["3.parquet"]
    assert expected_columns(Stream("events"), [files[1]], record) == {"k": "STRING", "x": "BIGINT"}


def test_the_windows_first_good_unit_sets_the_columns_whatever_batch_runs_first(window, tmp_path):
    """A later batch that runs first, led by a wrong-schema unit, takes the columns from the
    window's earlier claimed units: the wrong-schema unit is quarantined, not made the rule."""
    record = open_store(tmp_path / "state").query("q")
    claimed = [str(window / "3.parquet"), str(window / "1.parquet"),    # batch 1: corrupt, good
               str(window / "4.parquet"), str(window / "2.parquet")]    # batch 2: wrong schema, good
    ins = inspect_files(claimed[2:], _saved(Stream("events", on_bad_unit="quarantine")), record, claimed=claimed)
    assert ins.files == [claimed[3]] and [q["unit"] for q in ins.quarantined] == ["4.parquet"]
    assert record.columns("events")["taken_from"] == claimed[1]


def test_csv_and_json_units_are_parsed_with_the_expected_types(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    (d / "1.csv").write_text("k,x\na,1\nb,2\n")
    (d / "2.csv").write_text("k,x\na,three\n")
    stream = Stream("events", format="csv", schema="k STRING, x BIGINT", on_bad_unit="fail")
    assert inspect_files([str(d / "1.csv")], _saved(stream)).infos[0].rows == 2
    with pytest.raises(DataError, match=r"2\.csv: wrong schema for stream events: column x has 'three', expected BIGINT"):
        inspect_files([str(d / "2.csv")], _saved(stream))
    (d / "3.json").write_text('{"k": "a", "x": 1}\n{"k": "b", "x": 2}\n')
    (d / "4.json").write_text('{"k": "a", "x": 1}\n{"k": ')
    js = Stream("events", format="json", schema="k STRING, x BIGINT", on_bad_unit="fail")
    assert inspect_files([str(d / "3.json")], _saved(js)).infos[0].rows == 2
    with pytest.raises(DataError, match=r"4\.json: not a readable json file"):
        inspect_files([str(d / "4.json")], _saved(js))
