"""Bad files found when a batch claims them, before any Spark job: named, recorded, quarantined
by default, and never claimed again."""

from __future__ import annotations

import logging

import pytest

from airflow_iqp.errors import DataError
from airflow_iqp.filecheck import SAMPLE_BYTES, files_to_read, inspect_files, kept_units, still_bad
from airflow_iqp.query import decompose
from airflow_iqp.query.store import Saved
from airflow_iqp.store import open_store
from airflow_iqp.streams import Stream
from airflow_iqp.window.readiness import claim_batch
from tests.support.batches import make_batch

SCHEMA = "ts BIGINT, page STRING, user_id BIGINT, latency DOUBLE"
GOOD = "ts,page,user_id,latency\n1,/a,7,0.5\n2,/b,8,1.25\n"
BAD = {
    "0003.csv": "ts,page,user_id,latency\n3,/a,9,0.5\n4,/b,10,2.0,extra\n",    # a row with five fields
    "0005.csv": "ts,page,user_id,latency\n5,/a,11,fast\n",                     # latency is no DOUBLE
}


def _landing(tmp_path, names=("0001.csv", "0002.csv", "0003.csv", "0004.csv", "0005.csv", "0006.csv")):
    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    for name in names:
        (landing / name).write_text(BAD.get(name, GOOD))
    return landing


def _batch(tmp_path, index=1, schema=SCHEMA, **stream):
    s = Stream("clicks", path=str(tmp_path / "landing"), format="csv", schema=schema, **stream)
    return make_batch(query="clicks_q", window_id="w1", index=index, of=2, state_dir=str(tmp_path / "state"),
                      landing=str(tmp_path / "landing"), streams=(s.to_dict(),), last=index == 2)


def test_the_claim_names_every_bad_file_on_its_first_line_records_them_and_claims_the_good_units(tmp_path, caplog):
    _landing(tmp_path)
    with caplog.at_level(logging.WARNING, logger="airflow_iqp.filecheck"):
        claim = claim_batch(_batch(tmp_path))
    # Every unit is claimed, the bad ones too: no later batch or window takes them.
    assert claim["units"] == ["0001.csv", "0002.csv", "0003.csv", "0004.csv", "0005.csv", "0006.csv"]
    assert kept_units(claim) == ["0001.csv", "0002.csv", "0004.csv", "0006.csv"]
    assert [f.rsplit("/", 1)[1] for f in files_to_read(claim)] == ["0001.csv", "0002.csv", "0004.csv", "0006.csv"]
    reasons = {q["unit"]: q["reason"] for q in claim["quarantined"]}
    assert sorted(reasons) == ["0003.csv", "0005.csv"] == sorted(b["unit"] for b in claim["bad"])
    assert "not a readable csv file for stream clicks" in reasons["0003.csv"] and "Expected 4 columns, got 5" in \
        reasons["0003.csv"]
    assert reasons["0005.csv"].endswith("wrong schema for stream clicks: column latency has 'fast', expected DOUBLE")
    first = caplog.records[-1].getMessage().splitlines()[0]
    assert "2 bad input files quarantined" in first and all(r in first for r in reasons.values())
    # Small files are checked whole: the batch does not parse them again, and knows their rows.
    assert sorted(claim["checked"].values()) == [2, 2, 2, 2]


def test_a_later_batch_claims_only_what_arrived_since_and_the_manifest_is_re_read(tmp_path):
    _landing(tmp_path, ("0001.csv", "0003.csv"))
    first = claim_batch(_batch(tmp_path, 1))
    _landing(tmp_path, ("0004.csv", "0005.csv"))
    second = claim_batch(_batch(tmp_path, 2))
    assert first["units"] == ["0001.csv", "0003.csv"] and second["units"] == ["0004.csv", "0005.csv"]
    assert [q["unit"] for q in first["quarantined"]] == ["0003.csv"]
    assert [q["unit"] for q in second["quarantined"]] == ["0005.csv"]
    assert claim_batch(_batch(tmp_path, 2)) == second                  # a retry re-reads its claim
    claimed = [u for c in _batch(tmp_path).window_state().claims().values() for u in c["units"]]
    assert sorted(claimed) == sorted(set(claimed))                     # each unit claimed once


def test_without_a_declared_schema_the_windows_first_good_unit_sets_the_columns(tmp_path):
    _landing(tmp_path, ("0003.csv", "0004.csv", "0005.csv"))           # a bad file leads the window
    claim = claim_batch(_batch(tmp_path, schema=None))
    assert sorted(q["unit"] for q in claim["quarantined"]) == ["0003.csv", "0005.csv"]
    assert "column latency has 'fast', expected DOUBLE" in claim["quarantined"][1]["reason"]
    assert open_store(tmp_path / "state").query("clicks_q").columns("clicks")["taken_from"].endswith("0004.csv")


def test_fail_mode_records_the_bad_files_and_the_batch_names_them_all_until_they_are_replaced(tmp_path):
    landing = _landing(tmp_path)
    batch = _batch(tmp_path, on_bad_unit="fail")
    claim = claim_batch(batch)
    assert "quarantined" not in claim and sorted(b["unit"] for b in claim["bad"]) == ["0003.csv", "0005.csv"]
    assert files_to_read(claim) == claim["files"]
    record = open_store(batch.state_dir).query(batch.query)
    assert [b["unit"] for b in still_bad(claim, batch.streams, record)] == ["0003.csv", "0005.csv"]
    saved = Saved(decompose("SELECT page, count(*) AS n FROM clicks GROUP BY page", id="clicks_q",
                            streams=["clicks"]), batch.streams)
    with pytest.raises(DataError) as err:                              # the batch's own check says the same
        inspect_files(claim["files"], saved, record, checked=claim["checked"])
    first = str(err.value).splitlines()[0]
    assert first.startswith("2 bad input files: ") and "0003.csv" in first and "0005.csv" in first
    (landing / "0005.csv").write_text(GOOD)                            # one file is replaced
    assert [b["unit"] for b in still_bad(claim, batch.streams, record)] == ["0003.csv"]


def test_a_large_file_is_checked_by_its_first_rows_when_claimed_and_whole_in_the_batch(tmp_path):
    rows = "".join(f"{i},/p{i % 7},{i},0.25\n" for i in range(SAMPLE_BYTES // 16))
    _landing(tmp_path, ())
    (tmp_path / "landing" / "big.csv").write_text("ts,page,user_id,latency\n" + rows + "9,/z,9,slow\n")
    claim = claim_batch(_batch(tmp_path))
    assert "quarantined" not in claim and "checked" not in claim       # the sample was good; rows unknown
    saved = Saved(decompose("SELECT page, count(*) AS n FROM clicks GROUP BY page", id="clicks_q",
                            streams=["clicks"]), _batch(tmp_path).streams)
    found = inspect_files(files_to_read(claim), saved, open_store(tmp_path / "state").query("clicks_q"))
    assert found.files == [] and "column latency has 'slow'" in found.quarantined[0]["reason"]
