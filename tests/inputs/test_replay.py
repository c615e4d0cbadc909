"""Atomic replay into a landing directory, and the CLI's error path."""

from __future__ import annotations

import subprocess
import sys
import threading

from airflow_iqp.inputs.profiles import arrival_offsets
from airflow_iqp.inputs.replay import replay
from airflow_iqp.landing import list_units
from tests.support.batches import TPCH


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
