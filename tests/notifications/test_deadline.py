"""DeadlineRiskNotifier: a warning in the log and a JSON record when a plan cannot meet its deadline."""

from __future__ import annotations

import logging
import os

from airflow.sdk.bases.notifier import BaseNotifier

from airflow_iqp.notifications.deadline import DeadlineRiskNotifier
from airflow_iqp.store import open_store

PLAN = {"query": "orders", "window_id": "20240301T000000", "deadline": 1709253000.0,
        "plan": {"reason": "the last batch cannot finish before the deadline", "sizes": [240]}}


def test_notify_writes_the_record_the_plan_operator_asks_for(tmp_path):
    ws = open_store(tmp_path).window("q", "w")
    DeadlineRiskNotifier().notify({"iqp_plan": PLAN, "iqp_window": ws, "run_id": "scheduled__w"})
    got = ws.doc("deadline_risk")
    assert {k: got[k] for k in ("query", "window", "deadline", "reason", "run_id")} == {
        "query": "orders", "window": "20240301T000000", "deadline": 1709253000.0,
        "reason": "the last batch cannot finish before the deadline", "run_id": "scheduled__w"}
    assert got["noted_at"] > 0
    assert not [n for n in os.listdir(ws.location) if n.startswith(".")]  # written in place atomically


def test_the_warning_names_the_query_and_the_reason(caplog):
    with caplog.at_level(logging.WARNING, logger="airflow_iqp.notifications.deadline"):
        DeadlineRiskNotifier().notify({"iqp_plan": PLAN})
    [line] = [r.getMessage() for r in caplog.records if "IQP deadline at risk" in r.getMessage()]
    assert '"query": "orders"' in line and "cannot finish before the deadline" in line


def test_without_a_record_path_or_a_plan_it_only_logs(tmp_path):
    DeadlineRiskNotifier().notify({})
    assert list(tmp_path.iterdir()) == []


def test_it_is_an_airflow_notifier_called_with_the_context(tmp_path):
    ws = open_store(tmp_path).window("q", "w")
    notifier = DeadlineRiskNotifier()
    assert isinstance(notifier, BaseNotifier)
    notifier({"iqp_plan": PLAN, "iqp_window": ws})  # as Airflow calls a notifier: rendered, then notify
    assert ws.doc("deadline_risk")["query"] == "orders"
