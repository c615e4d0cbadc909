"""A job's work handed over as a document of the state store, for work too long for one
argument of a command line: the job reads it back from a local store or an object store
(pure Python: no Spark session)."""

from __future__ import annotations

import pytest

from airflow_iqp.spark.batch import MAX_WORK_ARG, work_args
from airflow_iqp.spark.entry import load_work
from airflow_iqp.store import open_store


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_work_too_long_for_an_argument_is_read_back_from_the_store(kind, tmp_path, request):
    location = (str(tmp_path / "state") if kind == "local"
                else request.getfixturevalue("s3_server").bucket("work") + f"/{tmp_path.name}")
    ws = open_store(location).window("q", "w")
    work = {"batch": 3, "files": [f"/landing/unit-{i:06d}/part-0.parquet" for i in range(4000)]}
    args = work_args(ws, work)
    assert len(str(work)) > MAX_WORK_ARG and args[0] == "--work-file"
    assert load_work(None, args[1]) == work
    short = {"batch": 0, "files": ["/landing/unit-000000/part-0.parquet"]}
    assert work_args(ws, short)[0] == "--work" and load_work(work_args(ws, short)[1], None) == short
