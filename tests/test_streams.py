"""Streams without Spark: what a unit is and when it is complete (how a unit file is checked:
``test_filecheck.py``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.landing import count_names, list_units
from airflow_iqp.streams import Stream, as_streams, files_of
from tests.support.batches import TPCH


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


def test_a_query_and_its_batches_must_declare_their_streams():
    """No layout is assumed: the settings and every plan entry name the streams they read,
    and a stream given as its JSON form is read as a Stream once, when they are built."""
    from airflow_iqp.window.config import QueryConfig
    from tests.support.batches import make_batch

    for missing in (None, (), {}):
        with pytest.raises(ConfigError, match="no streams declared") as err:
            QueryConfig(query="q", landing="/d", state_dir="/s", streams=missing)
        assert err.value.field == "streams"
    with pytest.raises(ConfigError) as err:
        make_batch(streams=())
    assert err.value.field == "batch.streams"
    batch = make_batch(streams=(Stream("events", path="/d", format="csv").to_dict(),))
    assert batch.streams == (Stream("events", path="/d", format="csv"),)
    assert batch.to_dict()["streams"] == [Stream("events", path="/d", format="csv").to_dict()]
