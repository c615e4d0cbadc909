"""The default notifier when a window's deadline cannot be met: a log line and a JSON record."""

from __future__ import annotations

import json
import logging
import time

from airflow.sdk.bases.notifier import BaseNotifier


log = logging.getLogger(__name__)


class DeadlineRiskNotifier(BaseNotifier):
    """Warns that a plan cannot meet its deadline: logs it and records it with the window.

    The plan operator calls it with the run's context plus ``iqp_plan`` (the window plan
    as a dict) and ``iqp_window`` (the window's :class:`~airflow_iqp.store.WindowState`,
    where the record goes). Any other Airflow notifier (Slack,
    SMTP, ...) can be passed to the operator instead, or wrapped alongside this one.
    """

    def notify(self, context) -> None:
        plan = context.get("iqp_plan") or {}
        record = {"query": plan.get("query"), "window": plan.get("window_id"), "deadline": plan.get("deadline"),
                  "reason": (plan.get("plan") or {}).get("reason"), "noted_at": time.time(),
                  "run_id": context.get("run_id")}
        log.warning("IQP deadline at risk: %s", json.dumps(record))
        if context.get("iqp_window") is not None:
            context["iqp_window"].write_doc("deadline_risk", record)
