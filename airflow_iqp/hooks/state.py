"""IQPStateHook: the state directory as the operators use it.

Claims, plans, cost history, a window's state and its report all live under one state
directory (``docs/state-layout.md``). The operators touch it only through this hook; the
hook holds no logic of its own and delegates to :mod:`airflow_iqp.state` (the layout,
claims, atomic writes, the cost history) and :mod:`airflow_iqp.window.accounting` (late
data, observed arrivals, task CPU), which the sensor, the trigger and the Spark jobs use
too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from airflow_iqp import config
from airflow_iqp.query.store import Saved, save_query
from airflow_iqp.state import WindowState, atomic_write_json, read_claims, read_cost_history, read_json
from airflow_iqp.window import accounting
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import QueryConfig, window_id
from airflow_iqp.window.plan import WindowPlan, store_plan

#: Files of a window's directory beside the layout of :mod:`airflow_iqp.state`.
PLAN, REPORT, LATE = "plan.json", "report.json", "late.json"


class IQPStateHook(BaseHook):
    """The state directory: claims, plans, cost history, window state and reports.

    :param state_dir: the state directory (default ``[iqp] state_dir``). A batch carries its
        own (``Batch.state_dir``): build the hook with it to read that batch's state.
    """

    hook_name = "Intermittent Query Processing: state directory"

    def __init__(self, state_dir: str | os.PathLike | None = None) -> None:
        super().__init__()
        self.state_dir = str(state_dir or config.state_dir())

    def get_conn(self) -> Path:
        """The state directory's path."""
        return Path(self.state_dir)

    # ------------------------------------------------------------------ windows

    def window(self, query: str, window_start: float) -> WindowState:
        """The state of ``query``'s window that starts at ``window_start`` (Unix seconds)."""
        return WindowState(self.state_dir, query, window_id(window_start))

    def window_of(self, batch: Batch) -> WindowState:
        """The state of the window ``batch`` belongs to."""
        return WindowState(self.state_dir, batch.query, batch.window_id)

    # ------------------------------------------------------------------ claims and partials

    def claim(self, batch: Batch) -> dict | None:
        """The batch's claim manifest, or None before its sensor claimed."""
        path = self.window_of(batch).claim_path(batch.index)
        return read_json(path) if path.is_file() else None

    def claims(self, ws: WindowState) -> dict[int, dict]:
        """Every claim manifest of a window, by batch number."""
        return read_claims(ws)

    def claim_path(self, batch: Batch) -> Path:
        """Where the batch's claim manifest is (what its job reads)."""
        return self.window_of(batch).claim_path(batch.index)

    def partial_path(self, batch: Batch) -> Path:
        """Where the batch's partial result goes (what its job writes)."""
        return self.window_of(batch).partial_path(batch.index)

    def metrics(self, ws: WindowState, index: int) -> dict:
        """What batch ``index``'s job recorded (``{}`` if it has not run)."""
        path = ws.metrics_path(index)
        return read_json(path) if path.is_file() else {}

    # ------------------------------------------------------------------ results and reports

    def result_manifest(self, ws: WindowState) -> dict:
        """The window's result manifest (written by the final job)."""
        return read_json(ws.result_manifest)

    def write_result_manifest(self, ws: WindowState, manifest: dict) -> Path:
        return atomic_write_json(ws.result_manifest, manifest)

    def report(self, ws: WindowState) -> dict:
        """The window's report (``{}`` before its final task wrote one)."""
        path = ws.root / REPORT
        return read_json(path) if path.is_file() else {}

    def write_report(self, ws: WindowState, report: dict) -> Path:
        return atomic_write_json(ws.root / REPORT, report)

    def write_late(self, ws: WindowState, late: dict) -> Path:
        """The window's late units (``late.json``)."""
        return atomic_write_json(ws.root / LATE, late)

    # ------------------------------------------------------------------ accounting

    def late_units(self, batch: Batch, window_start: float) -> dict:
        """Units of the window no batch claimed (:func:`airflow_iqp.window.accounting.late_units`)."""
        return accounting.late_units(batch, window_start)

    def record_arrivals(self, batch: Batch, window_start: float) -> Path:
        """The window's observed arrivals, for the next plan
        (:func:`~airflow_iqp.window.accounting.record_arrivals`)."""
        return accounting.record_arrivals(batch, window_start)

    def record_task_cpu(self, ws: WindowState, ti: Any, phase: str = "run") -> dict:
        """This task process's CPU so far (:func:`~airflow_iqp.window.accounting.record_task_cpu`)."""
        return accounting.record_task_cpu(ws.root, ti, phase)

    def record_attempt(self, ws: WindowState, name: str, ti: Any) -> Path:
        """An attempt of a task on ``name`` starts (:func:`~airflow_iqp.window.accounting.record_attempt`)."""
        return accounting.record_attempt(ws.root, name, ti)

    def attempts(self, ws: WindowState) -> dict[str, list[int]]:
        """The window's recorded attempts, name -> try numbers."""
        return accounting.attempts(ws.root)

    def window_task_cpu(self, ws: WindowState) -> dict:
        """The CPU the window's tasks recorded, summed."""
        return accounting.window_task_cpu(ws.root)

    # ------------------------------------------------------------------ plans and cost history

    def late_entry(self, cfg: QueryConfig, window_start: float, window_end: float) -> Batch | None:
        """With ``late="merge"``, the earlier window's late batch for this run to merge
        (:func:`~airflow_iqp.window.accounting.late_entry`), read from that window's plan."""
        return accounting.late_entry(cfg, window_start, window_end)

    def plan(self, ws: WindowState) -> dict | None:
        """The window's stored plan (``plan.json``), or None before it was planned."""
        path = ws.root / PLAN
        return read_json(path) if path.is_file() else None

    def store_plan(self, wp: WindowPlan) -> Path:
        """Store a window's plan as its ``plan.json`` (:func:`airflow_iqp.window.plan.store_plan`)."""
        return store_plan(wp)

    def save_query(self, saved: Saved) -> Path:
        """Save what the jobs run for a query (:func:`airflow_iqp.query.store.save_query`)."""
        return save_query(self.state_dir, saved)

    def cost_history(self, query: str | None = None, kind: str | None = None,
                     backend: str | None = None) -> list[dict]:
        """Records of the cost history, oldest first (:func:`airflow_iqp.state.read_cost_history`)."""
        return read_cost_history(self.state_dir, query, kind, backend)
