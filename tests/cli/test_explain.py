"""``airflow-iqp explain`` over the user's own files: the format comes from the files unless
``--format`` says it, the header names what was given, the types come from the files'
schemas, and refusals point to the way to run the query as one batch where they are read.
(That the derived types are Spark's is checked against Spark in tests/query/test_split_types.py.)"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.csv
import pyarrow.orc
import pyarrow.parquet as pq
import pytest

from airflow_iqp.cli.main import main
from airflow_iqp.query import QueryRefused, decompose
from airflow_iqp.query.split import step_types

SQL = "SELECT page, count(DISTINCT user) AS users, avg(latency) AS lat, max(latency) AS top FROM clicks GROUP BY page"
CLICKS = pa.table({"page": ["a", "b", "a"], "user": [1, 2, 3], "latency": [10, 20, 30]})
TYPES = {"page": "string", "users": "bigint", "lat": "double", "top": "bigint"}


def write(table: pa.Table, path: Path, fmt: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        pyarrow.csv.write_csv(table, path)
    elif fmt == "parquet":
        pq.write_table(table, path)
    elif fmt == "orc":
        pyarrow.orc.write_table(table, path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in table.to_pylist()))
    return path


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["explain", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json", "orc"])
@pytest.mark.parametrize("extension", [True, False], ids=["extension", "content"])
def test_the_format_comes_from_the_files(tmp_path, capsys, fmt, extension):
    for i in range(2):
        write(CLICKS, tmp_path / "clicks" / (f"part-{i}.{fmt}" if extension else f"part-{i}"), fmt)
    (tmp_path / "clicks" / "_SUCCESS").write_text("")
    code, out, err = run(capsys, "--sql", SQL, "--stream", f"clicks={tmp_path / 'clicks'}", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["formats"] == {"clicks": fmt} and shown["types"] == TYPES


def test_format_given_is_used_as_it_is(tmp_path, capsys):
    write(CLICKS, tmp_path / "clicks" / "0.csv", "csv")
    code, _, err = run(capsys, "--sql", SQL, "--stream", f"clicks={tmp_path / 'clicks'}", "--format", "parquet")
    assert code == 2 and "files matching *.parquet" in err


def test_a_directory_of_two_formats_asks_for_one(tmp_path, capsys):
    write(CLICKS, tmp_path / "clicks" / "0.csv", "csv")
    write(CLICKS, tmp_path / "clicks" / "1.parquet", "parquet")
    code, _, err = run(capsys, "--sql", SQL, "--stream", f"clicks={tmp_path / 'clicks'}")
    assert code == 2 and "csv and parquet files" in err and "--format" in err and len(err.splitlines()) == 1


def test_a_static_table_and_shared_unit_directories_take_their_formats_from_their_files(tmp_path, capsys):
    for unit in ("001", "002"):
        write(CLICKS, tmp_path / "units" / unit / "clicks.json", "json")
        write(pa.table({"user": [1, 2], "age": [30, 40]}), tmp_path / "units" / unit / "users.csv", "csv")
    write(pa.table({"page": ["a"], "title": ["A"]}), tmp_path / "pages", "csv")
    sql = ("SELECT p.title, sum(u.age) AS ages FROM clicks c JOIN users u ON c.user = u.user "
           "JOIN pages p ON c.page = p.page GROUP BY p.title")
    code, out, err = run(capsys, "--sql", sql, "--stream", f"clicks={tmp_path / 'units'}", "--stream",
                         f"users={tmp_path / 'units'}", "--static", f"pages={tmp_path / 'pages'}", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["formats"] == {"clicks": "json", "users": "csv"} and shown["types"] == {"title": "string",
                                                                                         "ages": "bigint"}


def test_the_header_names_the_streams_and_a_query_only_when_named(tmp_path, capsys):
    d = write(CLICKS, tmp_path / "clicks" / "0.csv", "csv").parent
    code, out, _ = run(capsys, "--sql", SQL, "--stream", f"clicks={d}")
    assert code == 0 and out.splitlines()[0] == f"streams clicks (csv files in {d}); static tables none"
    (tmp_path / "q.sql").write_text(SQL)
    code, out, _ = run(capsys, "--sql-file", str(tmp_path / "q.sql"), "--name", "clicks_by_page")
    assert code == 0 and out.splitlines()[0] == "query clicks_by_page: streams clicks; static tables none"
    assert "query query" not in out


def test_types_come_from_the_files(tmp_path, capsys):
    prices = pa.table({"page": ["a", "b"], "price": pa.array([Decimal("1.50"), Decimal("2.25")], pa.decimal128(15, 2))})
    d = write(prices, tmp_path / "clicks" / "0.parquet", "parquet").parent
    sql = "SELECT page, avg(price) AS ap, sum(price) AS sp FROM clicks GROUP BY page"
    code, out, _ = run(capsys, "--sql", sql, "--stream", f"clicks={d}")
    assert code == 0 and "<" not in out
    assert "  partial columns: _k0 string, _s0 decimal(25,2), _s1 bigint" in out
    assert "AS decimal(19,6)) AS _a0" in out and "CAST(SUM(_s0) AS decimal(25,2)) AS _a1" in out
    assert "columns: page string, ap decimal(19,6), sp decimal(25,2)" in out
    code, out, _ = run(capsys, "--sql", sql)  # without the files: the types are not known
    assert code == 0 and "<AVG type for _s0>" in out and "columns: page, ap, sp\n" in out


def test_an_expression_without_a_known_rule_gets_no_type_rather_than_a_guess():
    schemas = {"events": {"k": "STRING", "x": "INT"}}
    q = decompose("SELECT k, avg(levenshtein(k, 'x')) AS a, sum(x) AS s FROM events GROUP BY k", id="t",
                  streams=["events"], schemas=schemas)
    partial, result = step_types(q, schemas)
    assert partial == {"_k0": "string", "_s0": None, "_s1": "bigint", "_s2": "bigint"}
    assert result == {"k": "string", "a": None, "s": "bigint"}


@pytest.mark.parametrize("sql", ["SELECT k, percentile_approx(x, 0.5) AS p FROM events GROUP BY k",
                                 "SELECT approx_percentile(x, array(0.5, 0.9)) FROM events"])
def test_percentile_approx_is_refused_as_an_approximate_percentile_that_does_not_merge(sql):
    with pytest.raises(QueryRefused) as err:
        decompose(sql, id="t", streams=["events"])
    text = str(err.value)
    assert "is an approximate percentile whose per-batch results cannot be merged into the window's answer" in text
    assert "exact" not in text and text.endswith("(cut=OneBatch())") and "\n" not in text


def test_a_refusal_points_to_the_one_batch_switch_of_where_it_is_read(tmp_path, capsys):
    sql = "SELECT k, median(x) AS m FROM events GROUP BY k"
    with pytest.raises(QueryRefused) as err:
        decompose(sql, id="t", streams=["events"])
    assert "(cut=OneBatch())" in str(err.value) and "--allow-single-batch" not in str(err.value)
    code, _, cli = run(capsys, "--sql", sql)
    assert code == 2 and "(--allow-single-batch here, cut=OneBatch() in a DAG)" in cli
    assert cli.split(": ", 2)[2].replace("--allow-single-batch here, cut=OneBatch() in a DAG", "cut=OneBatch()") \
        == str(err.value).split(": ", 1)[1] + "\n"


def test_a_directory_without_a_table_file_names_what_it_looked_for(tmp_path, capsys):
    (tmp_path / "clicks").mkdir()
    (tmp_path / "clicks" / "notes.txt").write_text("x")
    code, _, err = run(capsys, "--sql", SQL, "--stream", f"clicks={tmp_path / 'clicks'}")
    assert code == 2 and err.startswith("airflow-iqp explain: --stream: ")
    assert "holds no .parquet, .csv, .json, .orc file" in err
