"""A query and its inputs in the state store: what a job loads is what was saved, or nothing."""

from __future__ import annotations

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.query.catalogue import get_query
from airflow_iqp.query.split import decompose
from airflow_iqp.query.store import Saved, catalogued, load_query, save_query
from airflow_iqp.streams import Stream


def test_a_query_id_with_nothing_saved_is_an_error_even_when_the_catalogue_has_it(tmp_path):
    assert get_query("q1").id == "q1"   # the catalogue has a q1
    with pytest.raises(ConfigError, match=rf"no query q1 is saved in the state store {tmp_path}"):
        load_query("q1", tmp_path)


def test_a_users_query_named_as_a_catalogued_one_loads_as_saved(tmp_path):
    clicks = Stream(name="clicks", path=str(tmp_path / "landing"), format="csv",
                    schema="page STRING, ms BIGINT")
    mine = decompose("SELECT page, count(*) AS n FROM clicks GROUP BY page", id="q1", streams=["clicks"])
    save_query(tmp_path, Saved(mine, (clicks,)))
    got = load_query("q1", tmp_path)
    assert got.query == mine and got.streams == (clicks,) and got.static is None
    assert got.query != catalogued("q1").query


def test_a_catalogued_query_saved_with_its_static_tables_loads_as_saved(tmp_path):
    saved = catalogued("q4", str(tmp_path / "units"), str(tmp_path / "static"))
    save_query(tmp_path / "state", saved)
    assert load_query("Q4", tmp_path / "state") == saved
