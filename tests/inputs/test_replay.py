"""Arrival profiles (pure), atomic replay into a landing directory, the CLI's error path, the py-files zip."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.inputs.profiles import PROFILES, arrival_offsets
from airflow_iqp.inputs.replay import replay
from airflow_iqp.spark.submit import build_pyfiles_zip, spark_submit_binary, submit_args, submit_spec
from airflow_iqp.landing import list_units
from airflow_iqp.streams import TPCH

N, RATE = 100, 2.0
T = N / RATE


def _nondecreasing(xs):
    return all(a <= b for a, b in zip(xs, xs[1:]))


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_is_ordered_and_complete(name):
    offs = arrival_offsets(name, RATE, N)
    assert len(offs) == N and _nondecreasing(offs) and offs[0] > 0
    assert arrival_offsets(name.upper(), RATE, 0) == []


def test_profile_shapes_match_figure_9():
    fixed = arrival_offsets("fixed", RATE, N)
    assert fixed == pytest.approx([(i + 1) / RATE for i in range(N)])
    faster = arrival_offsets("faster", RATE, N)
    assert all(f < x for f, x in zip(faster, fixed)) and faster[-1] == pytest.approx(0.75 * T)
    bursty = arrival_offsets("bursty", RATE, N)
    assert len(set(bursty)) == 10 and all(b <= x for b, x in zip(bursty, fixed))
    slower = arrival_offsets("slower", RATE, N)
    assert all(s >= x for s, x in zip(slower, fixed)) and slower[-1] == pytest.approx(T)
    assert slower[N // 2] > fixed[N // 2] + 1  # behind in the middle
    late = arrival_offsets("late", RATE, N)
    assert late[-1] > T and late[:80] == pytest.approx(slower[:80])
    assert sum(t > T for t in late) >= 2  # the last units land after the window end
    stalled = arrival_offsets("stalled", RATE, N)
    gaps = [b - a for a, b in zip(stalled, stalled[1:])]
    assert max(gaps) == pytest.approx(0.25 * T)  # the stall
    assert stalled[N // 2 - 1] == pytest.approx(0.5 * T)
    assert stalled[N // 2] == pytest.approx(0.75 * T)  # nothing lands between half and three quarters
    assert not any(0.5 * T < t < 0.75 * T for t in stalled) and stalled[-1] == pytest.approx(T)
    assert arrival_offsets("fixed", 1.0, 4, window=8.0) == [2.0, 4.0, 6.0, 8.0]


@pytest.mark.parametrize("args,field", [
    (("nope", 1.0, 3), "profile"), (("fixed", 0, 3), "rate"), (("fixed", 1.0, -1), "units"),
    (("fixed", 1.0, 3, 0.0), "window"),
])
def test_profile_errors_name_the_field(args, field):
    with pytest.raises(ConfigError) as err:
        arrival_offsets(*args)
    assert err.value.field == field


def _make_units(root, n):
    for i in range(n):
        d = root / "units" / f"{i:06d}"
        d.mkdir(parents=True)
        (d / "orders.parquet").write_bytes(b"o" * 1000 * (i + 1))
        (d / "lineitem.parquet").write_bytes(b"l" * 4000 * (i + 1))


def test_replay_publishes_whole_units_in_order(tmp_path):
    _make_units(tmp_path / "src", 8)
    landing = tmp_path / "landing"
    seen, stop = [], threading.Event()

    def watch():  # a reader polling the landing dir must never see half a unit
        while not stop.is_set():
            for u in list_units(landing, TPCH):
                i = int(u.name)
                assert (u / "orders.parquet").stat().st_size == 1000 * (i + 1)
                assert (u / "lineitem.parquet").stat().st_size == 4000 * (i + 1)
                if u.name not in seen:
                    seen.append(u.name)

    t = threading.Thread(target=watch)
    t.start()
    try:
        log = replay(tmp_path / "src", landing, arrival_offsets("bursty", 1.0, 8), speedup=40)
    finally:
        stop.set()
        t.join()
    assert [r["unit"] for r in log] == [f"{i:06d}" for i in range(8)]
    assert all(r["published"] >= r["planned"] - 1e-3 for r in log)
    assert [u.name for u in list_units(landing, TPCH)] == [f"{i:06d}" for i in range(8)]
    assert seen == sorted(seen)
    assert not [p for p in landing.iterdir() if p.name.startswith(".")]


def test_a_unit_due_at_the_windows_end_is_published_inside_the_window(tmp_path):
    """Its copy and rename take a moment: published when due, it would land after the end,
    in the next window of a flat landing directory. A late profile's units stay late."""
    from airflow_iqp.inputs.replay import END_MARGIN_S

    _make_units(tmp_path / "src", 4)
    now = [0.0]
    log = replay(tmp_path / "src", tmp_path / "landing", [1.0, 2.0, 4.0, 6.0], window=4.0, speedup=2.0,
                 clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert [r["planned"] for r in log] == [0.5, 1.0, 2.0 - END_MARGIN_S, 3.0]


def test_replay_cli_and_config_errors_exit_2(tmp_path):
    _make_units(tmp_path / "src", 3)
    ok = subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "replay", "--from", str(tmp_path / "src"),
                         "--to", str(tmp_path / "landing"), "--profile", "slower", "--speedup", "100", "--json"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert len(list_units(tmp_path / "landing", TPCH)) == 3
    bad = subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "replay", "--from", str(tmp_path / "src"),
                          "--to", str(tmp_path / "l2"), "--profile", "wobbly"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "profile: unknown profile 'wobbly'" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "run-window", "--query", "q99", "--data",
                          str(tmp_path / "src"), "--batches", "2", "--out", str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "query: unknown query 'q99'" in bad.stderr


def test_submit_args_and_pyfiles_zip(tmp_path, monkeypatch):
    argv = submit_args("/x/batch_job.py", ["--work-file", "w.json", "--backend", "spark-submit"], master="local[2]",
                       conf={"spark.sql.shuffle.partitions": "8"}, py_files=["a.zip"])
    assert Path(argv[0]).name == "spark-submit" and argv[1:3] == ["--master", "local[2]"]
    assert argv[-5:] == ["/x/batch_job.py", "--work-file", "w.json", "--backend", "spark-submit"]
    assert "spark.sql.shuffle.partitions=8" in argv and "spark.ui.enabled=false" in argv
    assert argv[argv.index("--py-files") + 1] == "a.zip"
    # without an activated venv (PATH lacks .venv/bin) the one beside this interpreter is found
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert spark_submit_binary() == str(Path(sys.executable).parent / "spark-submit")
    remote = submit_args("app.py", [], master="spark://h:7077", spark_submit="/opt/spark/bin/spark-submit")
    assert remote[0] == "/opt/spark/bin/spark-submit"
    assert "spark.ui.enabled=false" not in remote
    spec = submit_spec("/x/final_job.py", ["--query", "cq2", "--expect-units", 3], master="yarn", conf={"a": 1},
                       py_files=["p.zip", "q.zip"])
    assert spec["application_args"] == ["--query", "cq2", "--expect-units", "3"] and spec["py_files"] == "p.zip,q.zip"
    assert spec["conf"] == {"spark.hadoop.fs.permissions.umask-mode": "027", "a": "1"}  # not world-readable
    z = build_pyfiles_zip(tmp_path / "pkg.zip")
    names = zipfile.ZipFile(z).namelist()
    assert "airflow_iqp/spark/batch_job.py" in names and "airflow_iqp/store/local.py" in names
    assert not [n for n in names if "__pycache__" in n]
    # The zip alone is enough for a driver to load a saved, split query and the jobs: no sqlglot.
    from airflow_iqp.query.catalogue import get_query

    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import airflow_iqp.spark.batch_job, "
            "airflow_iqp.spark.final_job, airflow_iqp.spark.batch, airflow_iqp.spark.merge, airflow_iqp.spark.tail; "
            "from airflow_iqp.query.model import Query; "
            "import airflow_iqp.query.store as s; assert s.__file__.startswith(sys.argv[1]); "
            "q = Query.from_dict(json.loads(sys.argv[2])); print(q.id, 'sqlglot' in sys.modules)")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(z), json.dumps(get_query("q9").to_dict())],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["q9", "False"]


def test_run_window_resolves_generated_and_landing_dirs(tmp_path):
    from airflow_iqp.spark.window import resolve_data, run_window, split_consecutive

    _make_units(tmp_path / "gen", 3)
    (tmp_path / "gen" / "static").mkdir()
    assert resolve_data(tmp_path / "gen") == (tmp_path / "gen" / "units", tmp_path / "gen" / "static")
    landing = tmp_path / "gen" / "units"
    assert resolve_data(landing) == (landing, None)
    assert resolve_data(landing, tmp_path / "gen" / "static") == (landing, tmp_path / "gen" / "static")
    with pytest.raises(ConfigError, match="static"):  # a join query on a landing dir needs --static
        run_window("q3", landing, 2, tmp_path / "state")
    with pytest.raises(ConfigError, match="3 batches for 2 units"):
        run_window("cq1", _two_units(tmp_path), 3, tmp_path / "state")
    assert not (tmp_path / "state").exists()  # refused before claiming anything
    assert split_consecutive(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_consecutive([], 2) == [[], []]


def _two_units(tmp_path):
    _make_units(tmp_path / "two", 2)
    return tmp_path / "two"
