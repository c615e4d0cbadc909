"""Streams without Spark: what a unit is, when it is complete, and how a unit file is checked."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.query import decompose
from airflow_iqp.query.store import Saved
from airflow_iqp.filecheck import expected_columns, inspect_files
from airflow_iqp.landing import count_names, list_units
from airflow_iqp.store import open_store
from airflow_iqp.streams import TPCH, Stream, as_streams, files_of


def _parquet(path: Path, **cols) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path)
    return path


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_file_units_skip_in_flight_names_markers_and_checksums(tmp_path):
    for name in ("b-17.parquet", "a-3.parquet", ".a-9.parquet.tmp", "_SUCCESS", "_temporary", "a-3.parquet.crc",
                 "notes.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "_temporary2").mkdir()
    units = list_units(tmp_path, (Stream("events"),))
    assert [u.name for u in units] == ["a-3.parquet", "b-17.parquet"]
    assert units[0].files == {"events": (str(tmp_path / "a-3.parquet"),)} and os.fspath(units[0]) == units[0].path
    assert count_names(tmp_path) == 3   # an upper bound: a-3, b-17, notes.txt
    assert [u.name for u in list_units(tmp_path, (Stream("events", format="csv", pattern="*.txt"),))] == ["notes.txt"]


def test_numbered_units_sort_by_number(tmp_path):
    for i in (10, 2, 1):
        (tmp_path / f"{i}.parquet").write_text("x")
    assert [u.name for u in list_units(tmp_path, (Stream("e"),))] == ["1.parquet", "2.parquet", "10.parquet"]


def test_directory_units_need_every_streams_file(tmp_path):
    (tmp_path / "000001").mkdir()
    (tmp_path / "000001" / "orders.parquet").write_text("x")
    (tmp_path / "000002").mkdir()
    for f in ("orders.parquet", "lineitem.parquet"):
        (tmp_path / "000002" / f).write_text("x")
    (tmp_path / ".000003.tmp").mkdir()
    assert [u.name for u in list_units(tmp_path, TPCH)] == ["000002"]
    assert [u.name for u in list_units(tmp_path, TPCH[:1])] == ["000001", "000002"]
    assert files_of(list_units(tmp_path, TPCH), TPCH) == [str(tmp_path / "000002" / f)
                                                          for f in ("orders.parquet", "lineitem.parquet")]


def test_a_directory_unit_with_a_ready_marker_is_complete_once_the_marker_is_in(tmp_path):
    stream = Stream("events", unit="dir", pattern="part-*.json", format="json", ready_marker="_SUCCESS")
    unit = tmp_path / "batch-0007"
    unit.mkdir()
    (unit / "part-00000.json").write_text("{}")
    (unit / "part-00001.json").write_text("{}")
    (unit / "part-00001.json.crc").write_text("x")
    assert list_units(tmp_path, (stream,)) == []
    (unit / "_SUCCESS").write_text("")
    [u] = list_units(tmp_path, (stream,))
    assert u.files["events"] == (str(unit / "part-00000.json"), str(unit / "part-00001.json"))


def test_min_age_waits_until_a_unit_has_stopped_changing(tmp_path):
    stream = Stream("events", min_age=30)
    f = tmp_path / "a.parquet"
    f.write_text("x")
    assert list_units(tmp_path, (stream,)) == []
    _age(f, 31)
    assert [u.name for u in list_units(tmp_path, (stream,))] == ["a.parquet"]
    assert list_units(tmp_path, (stream,), now=time.time() - 10) == []


def test_a_missing_landing_directory_has_no_units(tmp_path):
    assert list_units(tmp_path / "nope", (Stream("e"),)) == [] and count_names(tmp_path / "nope") == 0


@pytest.mark.parametrize("kwargs, field", [
    (dict(name="bad name"), "streams"),
    (dict(name="e", format="xml"), "streams.e.format"),
    (dict(name="e", unit="zip"), "streams.e.unit"),
    (dict(name="e", ready_marker="_SUCCESS"), "streams.e.ready_marker"),
    (dict(name="e", min_age=-1), "streams.e.min_age"),
    (dict(name="e", on_bad_unit="ignore"), "streams.e.on_bad_unit"),
])
def test_a_bad_stream_declaration_names_the_field(kwargs, field):
    with pytest.raises(ConfigError) as err:
        Stream(**kwargs)
    assert err.value.field == field


def test_a_mapping_names_its_streams():
    s = as_streams({"events": Stream(path="/d", format="csv"), "clicks": "/c", "views": {"path": "/v", "unit": "dir"}})
    assert [(x.name, x.path, x.format, x.unit) for x in s] == [("events", "/d", "csv", "file"),
                                                                ("clicks", "/c", "parquet", "file"),
                                                                ("views", "/v", "parquet", "dir")]


# ----------------------------------------------------------------------- bad units


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
