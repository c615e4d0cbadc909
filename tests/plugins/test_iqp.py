"""IQPPlugin: what it registers, and that Airflow finds it by its entry point with default settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from airflow.plugins_manager import AirflowPlugin

from airflow_iqp.deadlines import WindowEndDeadline
from airflow_iqp.plugins.iqp import IQPPlugin
from airflow_iqp.priority import EDFPriority, LLFPriority, SJFPriority
from airflow_iqp.timetables.window import WindowTimetable


def test_the_plugin_registers_what_airflow_accepts_only_from_plugins():
    assert issubclass(IQPPlugin, AirflowPlugin) and IQPPlugin.name == "airflow_iqp"
    assert IQPPlugin.timetables == [WindowTimetable]
    assert IQPPlugin.priority_weight_strategies == [EDFPriority, LLFPriority, SJFPriority]
    assert IQPPlugin.deadline_references == [WindowEndDeadline]


def test_the_plugin_is_declared_by_an_entry_point_not_by_the_provider_info():
    from importlib.metadata import entry_points

    from airflow_iqp import get_provider_info

    assert "airflow_iqp.plugins.iqp:IQPPlugin" in [e.value for e in entry_points(group="airflow.plugins")]
    assert "airflow_iqp.priority" in [e.value for e in entry_points(group="airflow.policy")]
    assert "plugins" not in get_provider_info()  # Airflow would load it twice and reject the second


def test_plugin_lists_timetable_strategies_and_deadline_reference(tmp_path):
    """`airflow plugins -o json` with default settings (a fresh AIRFLOW_HOME) lists them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env["AIRFLOW_HOME"] = str(tmp_path)
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    out = subprocess.run([airflow, "plugins", "-o", "json"], env=env, capture_output=True, text=True, check=True, timeout=120)
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    iqp = plugins["airflow_iqp"]
    assert iqp["timetables"] == ["airflow_iqp.timetables.window.WindowTimetable"]
    assert iqp["priority_weight_strategies"] == [
        "airflow_iqp.priority.EDFPriority",
        "airflow_iqp.priority.LLFPriority",
        "airflow_iqp.priority.SJFPriority",
    ]
    assert "entry_point" in iqp["source"].lower() or "EntryPoint" in iqp["source"]
    # The CLI does not print deadline_references; ask the plugins manager the same way.
    code = (
        "from airflow import plugins_manager as p; import json; "
        "print(json.dumps(sorted(p.get_deadline_references_plugins())))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["airflow_iqp.deadlines.WindowEndDeadline"]
