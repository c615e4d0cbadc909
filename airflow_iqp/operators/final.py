"""Final aggregation: merge a window's partials before the deadline, and account for it.

``_FinalTask`` is the accounting both backends share; :class:`FinalAggregationOperator`
runs ``airflow_iqp/spark/final_job.py`` through spark-submit,
``airflow_iqp.operators.connect.FinalConnectOperator`` runs the same ``execute_final`` on a
Spark Connect server.
"""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

from airflow.sdk import Asset, TriggerRule

from airflow_iqp import config
from airflow_iqp.operators.submit import _IQPSparkSubmit
from airflow_iqp.window.accounting import late_units, record_arrivals, record_task_cpu, window_task_cpu
from airflow_iqp.window.batch import Batch, batches_from
from airflow_iqp.window.config import window_id
from airflow_iqp.state import WindowState, atomic_write_json, read_claims, read_json


def result_asset(query: str) -> Asset:
    """The Airflow Asset of a query's results; downstream DAGs can be scheduled on it."""
    return Asset(name=f"iqp_{query}_result", uri=f"file://{config.state_dir()}/{query}/result")


class _FinalTask:
    """What a final aggregation does around the merge, whichever backend runs it."""

    @staticmethod
    def _final_defaults(kwargs: dict, query: str, late: Any = None) -> dict:
        if late is None:  # a late merge runs only after its sensor claimed something
            kwargs.setdefault("trigger_rule", TriggerRule.NONE_FAILED)
        kwargs.setdefault("outlets", [result_asset(query)])
        return kwargs

    def _final_init(self, query: str, plan: Any, state_dir: str | None, tail: Any = None,
                    tail_slots: int = 0, late: Any = None) -> None:
        self.query = query
        self.plan = plan
        self.tail = tail
        self.tail_slots = tail_slots
        self.late = late
        self.state_dir = state_dir or config.state_dir()

    def _late_index(self) -> int | None:
        return Batch.from_dict(self.late).index if self.late else None

    def _after(self, context) -> dict:
        return self._after_late(context) if self.late else self._after_final(context, self._window(context))

    def _after_late(self, context) -> dict:
        """After a late merge: the earlier window's manifest and report say what the new
        revision covers; its first revision's time, which its deadline was about, stays."""
        entry = Batch.from_dict(self.late)
        ws = entry.window_state()
        manifest = read_json(ws.result_manifest)
        late = late_units(entry, entry.window_start_ts)
        manifest["partial"] = bool(late["units"] or manifest.get("quarantined"))
        manifest["late_units"] = late["units"]
        atomic_write_json(ws.result_manifest, manifest)
        atomic_write_json(ws.root / "late.json", late)
        report = read_json(ws.root / "report.json") if (ws.root / "report.json").is_file() else {}
        report.update({"revision": manifest["revision"], "revisions": manifest["revisions"],
                       "partial": manifest["partial"], "late_units": late["units"]})
        atomic_write_json(ws.root / "report.json", report)
        context["outlet_events"][result_asset(self.query)].extra = {
            "window": ws.window_id, "result": manifest["result"], "partial": manifest["partial"],
            "revision": manifest["revision"]}
        self.log.info("window %s: late data merged, revision %d of %s", ws.window_id, manifest["revision"],
                      manifest["result"])
        return report

    def _batches(self) -> list[Batch]:
        """Every batch of the window: the mapped ones, and the fused tail's (those it ran first too)."""
        if not self.tail:
            return batches_from(self.plan)
        tail = Batch.from_dict(self.tail)
        return batches_from(self.plan) + list(tail.before) + [tail]

    def _window(self, context) -> WindowState:
        if self.late:
            return Batch.from_dict(self.late).window_state()
        start = context["data_interval_start"].timestamp()
        return WindowState(self.state_dir, self.query, window_id(start))

    def _after_final(self, context, ws: WindowState) -> dict:
        start = context["data_interval_start"].timestamp()
        batches = self._batches()
        task_end = time.time()
        manifest = read_json(ws.result_manifest)
        # The result is complete when its manifest is written (a fused tail writes its last
        # batch's partial after that): that is the time the deadline is about.
        finished = manifest.get("written_at") or task_end
        late = late_units(batches[0], start) if batches else {"units": [], "files": [], "arrival_times": []}
        if batches:
            record_arrivals(batches[0], start)
        manifest["partial"] = bool(late["units"] or manifest.get("quarantined"))
        manifest["late_units"] = late["units"]
        atomic_write_json(ws.result_manifest, manifest)
        if late["units"]:
            atomic_write_json(ws.root / "late.json", late)
            self.log.warning("%d units arrived after the last claim: recorded in %s; the result is partial",
                             len(late["units"]), ws.root / "late.json")
        for bad in manifest.get("quarantined", []):
            self.log.warning("unit %s quarantined, the result is partial: %s", bad["unit"], bad["reason"])
        # A backfilled window's deadline passed long ago; there is none to meet.
        deadline = batches[0].deadline_ts if batches and not batches[0].backfill else None
        record_task_cpu(ws.root, context["ti"])
        report = {**self._report(ws, batches, finished, deadline, manifest), "task_end_ts": task_end}
        atomic_write_json(ws.root / "report.json", report)
        context["outlet_events"][result_asset(self.query)].extra = {
            "window": ws.window_id, "result": manifest["result"], "partial": manifest["partial"]}
        self.log.info("result %s (%d rows) at %.0f; deadline %s", manifest["result"], manifest.get("rows_out") or 0,
                      finished, "met" if report["deadline_met"] else "MISSED")
        return report

    def _report(self, ws, batches, finished, deadline, manifest) -> dict:
        claims = read_claims(ws)
        rows = []
        for b in batches:
            claim = claims.get(b.index, {})
            mpath = ws.metrics_path(b.index)
            metrics = read_json(mpath) if mpath.exists() else {}
            rows.append({"index": b.index, "planned_units": b.units, "planned_cumulative": b.cumulative,
                         "ready_ts": b.ready_ts, "latest_start_ts": b.latest_start_ts,
                         "planned_cost": b.cost, "claimed_units": len(claim.get("units", [])),
                         "claimed_at": claim.get("claimed_at"), "wall_seconds": metrics.get("wall_seconds"),
                         "cpu_seconds": metrics.get("cpu_seconds"), "written_at": metrics.get("written_at")})
        return {"query": self.query, "window": ws.window_id, "deadline_ts": deadline, "finished_ts": finished,
                "deadline_met": deadline is None or finished <= deadline, "batches": rows,
                "final_wall_seconds": manifest.get("wall_seconds"), "final_cpu_seconds": manifest.get("cpu_seconds"),
                "backend": manifest.get("backend"), "task_cpu": window_task_cpu(ws.root),
                "result": manifest["result"], "partial": manifest["partial"],
                "late_units": manifest["late_units"], "quarantined": manifest.get("quarantined", [])}


class FinalAggregationOperator(_FinalTask, _IQPSparkSubmit):
    """Runs the final job through spark-submit; it merges every batch's partial into the window's result.

    ``trigger_rule="none_failed"``, so batches skipped for want of input do not skip it.
    The job checks that every claimed unit is covered exactly once. Afterwards this
    operator records units that arrived after the last claim as late data (the result is
    then marked partial), the window's observed arrivals (for the next plan), and a
    report of planned against actual times; it emits an Asset event for the result and
    returns whether the deadline was met.

    With a fused tail (``tail``, the plan's last batch) the task starts its spark-submit
    at once; the job waits for that batch's input, claims it, and runs it and the merge.

    :param query: query id of the catalogue.
    :param plan: the plan task's output (the mapped batch entries).
    :param tail: the plan's fused tail (:func:`~airflow_iqp.window.readiness.split_tail`): the last
        batch's entry, and the batches the final task runs before it.
    :param tail_slots: fused tails of the state directory's queries that run at once, earliest
        deadline first (:func:`~airflow_iqp.coordination.cluster_turn`); 0, the default, is no limit.
    :param state_dir: the state directory (default ``[iqp] state_dir``).
    :param late: instead of this window's merge, the earlier window's late batch
        (:func:`~airflow_iqp.window.accounting.late_entry`), merged into its result as a new revision.
    """

    template_fields: Sequence[str] = (*_IQPSparkSubmit.template_fields, "plan", "tail", "state_dir", "late")

    def __init__(self, *, query: str, plan: Any = None, tail: Any = None, state_dir: str | None = None,
                 tail_slots: int = 0, late: Any = None, **kwargs):
        kwargs.setdefault("conn_id", config.get("spark_conn_id"))
        kwargs.setdefault("name", f"iqp-{'late' if late is not None else 'final'}-{query}")
        super().__init__(**self._final_defaults(kwargs, query, late))
        self._final_init(query, plan, state_dir, tail, tail_slots, late)

    def render_template_fields(self, context, jinja_env=None) -> None:
        super().render_template_fields(context, jinja_env)
        self._prepare("final", [self.query, str(self._window(context).root)])

    def execute(self, context) -> Any:
        if self.tail:
            # The job waits for the last batch's input, claims it and takes its turn in its
            # driver, with the JVM already up (final_job.run_tail).
            self.application_args = [*self.application_args, "--tail", json.dumps(Batch.from_dict(self.tail).to_dict()),
                                     "--tail-slots", str(self.tail_slots)]
        if self.late:  # the earlier window's late batch, merged as a new revision (final_job.execute_late)
            self.application_args = [*self.application_args, "--late", str(self._late_index())]
        super().execute(context)
        return self._after(context)
