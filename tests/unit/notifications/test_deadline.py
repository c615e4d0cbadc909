"""DeadlineRiskNotifier: a warning in the log and a JSON record when a plan cannot meet its deadline."""

from __future__ import annotations

import json
import logging

from airflow.sdk.bases.notifier import BaseNotifier

from airflow_iqp.notifications.deadline import DeadlineRiskNotifier

PLAN = {"query": "orders", "window_id": "20240301T000000", "deadline": 1709253000.0,
        "plan": {"reason": "the last batch cannot finish before the deadline", "sizes": [240]}}


def test_notify_writes_the_record_the_plan_operator_asks_for(tmp_path):
    record = tmp_path / "q" / "w" / "deadline_risk.json"
    DeadlineRiskNotifier().notify({"iqp_plan": PLAN, "iqp_record": str(record), "run_id": "scheduled__w"})
    got = json.loads(record.read_text())
    assert {k: got[k] for k in ("query", "window", "deadline", "reason", "run_id")} == {
        "query": "orders", "window": "20240301T000000", "deadline": 1709253000.0,
        "reason": "the last batch cannot finish before the deadline", "run_id": "scheduled__w"}
    assert got["noted_at"] > 0
    assert not [p for p in record.parent.iterdir() if p.name.startswith(".")]  # written in place atomically


def test_the_warning_names_the_query_and_the_reason(caplog):
    with caplog.at_level(logging.WARNING, logger="airflow_iqp.notifications.deadline"):
        DeadlineRiskNotifier().notify({"iqp_plan": PLAN})
    [line] = [r.getMessage() for r in caplog.records if "IQP deadline at risk" in r.getMessage()]
    assert '"query": "orders"' in line and "cannot finish before the deadline" in line


def test_without_a_record_path_or_a_plan_it_only_logs(tmp_path):
    DeadlineRiskNotifier().notify({})
    assert list(tmp_path.iterdir()) == []


def test_it_is_an_airflow_notifier_called_with_the_context(tmp_path):
    record = tmp_path / "risk.json"
    notifier = DeadlineRiskNotifier()
    assert isinstance(notifier, BaseNotifier)
    notifier({"iqp_plan": PLAN, "iqp_record": str(record)})  # as Airflow calls a notifier: rendered, then notify
    assert json.loads(record.read_text())["query"] == "orders"
