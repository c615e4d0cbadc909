"""FinalOperator: merge a window's partials before the deadline, by spark-submit or on a Spark
Connect server, and account for the window."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, BaseOperator, TriggerRule

from airflow_iqp import config
from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.filecheck import bad_files_message
from airflow_iqp.hooks.state import IQPStateHook
from airflow_iqp.operators._backends import OnBackend
from airflow_iqp.store import WindowState, batch_name
from airflow_iqp.window import accounting
from airflow_iqp.window.batch import Batch, batches_from
from airflow_iqp.window.group import entries_of
from airflow_iqp.window.replan import effective


def result_asset(query: str) -> Asset:
    """The Airflow Asset of a query's results; downstream DAGs can be scheduled on it."""
    return Asset(name=f"iqp_{query}_result", uri=f"file://{config.state_dir()}/{query}/result")


class FinalOperator(OnBackend, BaseOperator):
    """Merges every batch's partial into the window's result; then accounts for the window.

    ``backend="spark-submit"`` runs ``airflow_iqp/spark/final_job.py`` through spark-submit;
    ``backend="spark-connect"`` runs the same ``execute_final`` on a session of a running
    Spark Connect server. ``trigger_rule="none_failed"``, so batches skipped for want of
    input do not skip it. The job checks that every claimed unit is covered exactly once.
    Afterwards this operator records units that arrived after the last claim as late data
    (the result is then marked partial, as it is when units were quarantined), the window's
    observed arrivals (for the next plan), and a report of planned against actual times; it
    emits an Asset event for the result and returns the report, which says whether the
    deadline was met. A result written after the deadline (a batch retried past it still
    runs) is marked ``late`` in its manifest, the report and the Asset event.

    With a fused tail (``tail``, the plan's last batch) the task starts before the window's
    end and opens its session (on spark-submit: starts its job); it runs the batches ready
    after it started, waits for the last batch's input, claims it, and runs it with the merge.

    :param query: the query's id.
    :param plan: the plan task's output (the mapped batch entries).
    :param tail: the plan's fused tail (:func:`~airflow_iqp.window.readiness.split_tail`).
    :param tail_slots: fused tails of the state directory's queries that run at once, earliest
        deadline first (:func:`~airflow_iqp.coordination.cluster_turn`); 0, the default, is no limit.
    :param state_dir: the state directory (default ``[iqp] state_dir``).
    :param late: instead of this window's merge, the earlier window's late batch
        (:func:`~airflow_iqp.window.accounting.late_entry`), merged into its result as a new revision.
    :param backend: a backend's name in the registry (:data:`airflow_iqp.backends.BACKENDS`:
        ``"spark-submit"``, ``"spark-connect"``), or its typed object,
        :class:`~airflow_iqp.backends.SparkSubmit` / :class:`~airflow_iqp.backends.SparkConnect`.
    :param conn_id: the Spark connection (default as for :class:`~airflow_iqp.operators.batch.BatchOperator`).
    :param conf: Spark conf of the spark-submit; refused on Spark Connect.
    :param spark_kwargs: more arguments of the Spark provider's ``SparkSubmitHook`` (spark-submit only).
    :param group: the group this query is a member of (``iqp_group``): its batches are the
        plan entries shared with it, and before the merge the query takes
        the group's claims of its shared batches as its own, so that the merge checks every
        claimed unit against this query's partials.
    :param deadline_offset: this query's own deadline after the window's end (default: the
        plan entries', which in a group are the earliest member's).
    :param merged: a group member whose result the group's fused tail (the group's final
        task, ``query`` the group's id) merged already: this task runs no Spark job; it
        accounts for the window, writes the member's report and emits its Asset event.
    """

    template_fields: Sequence[str] = ("plan", "tail", "state_dir", "late")
    ui_color = "#d4edda"

    def __init__(self, *, query: str, plan: Any = None, tail: Any = None, state_dir: str | None = None,
                 tail_slots: int = 0, late: Any = None, backend: Any = "spark-submit", conn_id: str | None = None,
                 conf: Mapping[str, Any] | None = None, spark_kwargs: Mapping[str, Any] | None = None,
                 group: str | None = None, deadline_offset: Any = None, merged: bool = False, **kwargs: Any) -> None:
        if late is None:  # a late merge runs only after its sensor claimed something
            kwargs.setdefault("trigger_rule", TriggerRule.NONE_FAILED)
        kwargs.setdefault("outlets", [result_asset(query)])
        super().__init__(**kwargs)
        self.query = query
        self.plan = plan
        self.tail = tail
        self.tail_slots = tail_slots
        self.late = late
        self.state_dir = state_dir or config.state_dir()
        self.group = group
        self.deadline_offset = deadline_offset
        self.merged = merged
        if merged and not group:
            raise ConfigError("merged=True is a group member's final task: give group=", "merged")
        self._use_backend(backend, conn_id, conf, spark_kwargs)

    def execute(self, context) -> dict:
        state = IQPStateHook(self.state_dir)
        ws = self._window(context, state)
        late = Batch.from_dict(self.late) if self.late else None
        tail = Batch.from_dict(self.tail) if self.tail else None
        kind = "late" if late else "final"
        accounting.record_attempt(ws, kind, context["ti"])
        if self.group and not late:  # the group's claims of its shared batches are this query's too
            ws.adopt_claims(state.window(self.group, context["data_interval_start"].timestamp()).claims())
        if self.merged:
            if ws.manifest() is None:
                raise DataError(f"{ws.location}: group {self.group}'s final task wrote no result for {self.query}; "
                                f"see its log")
        else:
            self._runner.run_final(ws, tail=tail, tail_slots=self.tail_slots, late=late.index if late else None,
                                   app_name=f"iqp-{kind}-{self.query}")
        if late:
            return self._after_late(context, late)
        if tail is not None and tail.members and not self.group:  # a group's tail: its members publish
            accounting.record_task_cpu(ws, context["ti"])
            return {"group": self.query, "window": ws.window_id, "members": list(tail.members)}
        return self._after_final(context, ws)


    def _window(self, context, state: IQPStateHook) -> WindowState:
        if self.late:
            late = Batch.from_dict(self.late)
            return IQPStateHook(late.state_dir).window_of(late)
        return state.window(self.query, context["data_interval_start"].timestamp())

    def _batches(self) -> list[Batch]:
        """Every batch of the window: the mapped ones, and the fused tail's (those it ran first too)."""
        mapped = batches_from(self.plan)
        if self.tail:
            tail = Batch.from_dict(self.tail)
            mapped += [*tail.before, tail]
        return entries_of(mapped, self.query) if self.group else mapped

    def _after_late(self, context, entry: Batch) -> dict:
        """After a late merge: the earlier window's manifest and report say what the new
        revision covers; its first revision's time, which its deadline was about, stays."""
        ws = IQPStateHook(entry.state_dir).window_of(entry)
        manifest = ws.manifest()
        late = accounting.late_units(entry, entry.window_start_ts)
        manifest["partial"] = bool(late["units"] or manifest.get("quarantined"))
        manifest["late_units"] = late["units"]
        ws.write_manifest(manifest)
        ws.write_doc("late", late)
        report = ws.doc("report") or {}
        report.update({"revision": manifest["revision"], "revisions": manifest["revisions"],
                       "partial": manifest["partial"], "late_units": late["units"]})
        ws.write_doc("report", report)
        context["outlet_events"][result_asset(self.query)].extra = {
            "window": ws.window_id, "result": manifest["result"], "partial": manifest["partial"],
            "revision": manifest["revision"]}
        self.log.info("window %s: late data merged, revision %d of %s", ws.window_id, manifest["revision"],
                      manifest["result"])
        return report

    def _after_final(self, context, ws: WindowState) -> dict:
        start = context["data_interval_start"].timestamp()
        batches = self._batches()
        task_end = time.time()
        manifest = ws.manifest()
        # The result is complete when its manifest is written (a fused tail writes its last
        # batch's partial after that): that is the time the deadline is about.
        finished = manifest.get("written_at") or task_end
        late = accounting.late_units(batches[0], start) if batches else {"units": [], "files": [], "arrival_times": []}
        if batches:
            accounting.record_arrivals(batches[0], start)
        # A backfilled window's deadline passed long ago; there is none to meet.
        deadline = batches[0].deadline_ts if batches and not batches[0].backfill else None
        if deadline is not None and self.deadline_offset is not None:  # a group member's own
            deadline = (context["data_interval_end"] + self.deadline_offset).timestamp()
        manifest["partial"] = bool(late["units"] or manifest.get("quarantined"))
        manifest["late_units"] = late["units"]
        # A batch retried past the deadline still ran: the result is written, marked late.
        manifest["late"] = deadline is not None and finished > deadline
        ws.write_manifest(manifest)
        if late["units"]:
            path = ws.write_doc("late", late)
            self.log.warning("%d units arrived after the last claim: recorded in %s; the result is partial",
                             len(late["units"]), path)
        if manifest.get("quarantined"):
            self.log.warning("the result is partial: %s", bad_files_message(manifest["quarantined"], "quarantined"))
        accounting.record_task_cpu(ws, context["ti"])
        report = {**self._report(ws, batches, finished, deadline, manifest), "task_end_ts": task_end}
        ws.write_doc("report", report)
        context["outlet_events"][result_asset(self.query)].extra = {
            "window": ws.window_id, "result": manifest["result"], "partial": manifest["partial"],
            "late": manifest["late"]}
        self.log.info("result %s (%d rows) at %.0f; deadline %s", manifest["result"], manifest.get("rows_out") or 0,
                      finished, "met" if report["deadline_met"] else "MISSED")
        return report

    def _report(self, ws: WindowState, batches: list[Batch], finished: float, deadline: float | None,
                manifest: dict) -> dict:
        claims = ws.claims()
        tries = accounting.attempts(ws)
        rows = []
        for first in batches:
            # As the window's newest re-plan has it (a claim plans the rest again with newer
            # costs, or as units arrive); what the window's plan had first beside it.
            b = effective(first)
            claim = claims.get(b.index, {})
            metrics = ws.metrics(b.index)
            rows.append({"index": b.index, "planned_units": b.units, "planned_cumulative": b.cumulative,
                         "ready_ts": b.ready_ts, "latest_start_ts": b.latest_start_ts,
                         "planned_cost": b.cost, "first_planned_cost": first.cost,
                         "claimed_units": len(claim.get("units", [])),
                         "claimed_at": claim.get("claimed_at"), "wall_seconds": metrics.get("wall_seconds"),
                         "cpu_seconds": metrics.get("cpu_seconds"), "written_at": metrics.get("written_at"),
                         # what planned_cost stands for: the task's start, the JVM or session, the work
                         "claim_to_partial_seconds": _since(claim.get("claimed_at"), metrics.get("written_at")),
                         # attempts started (a fused tail's batches run in the final task's)
                         "attempts": len(tries.get(batch_name(b.index), []))})
        return {"query": self.query, "window": ws.window_id, "deadline_ts": deadline, "finished_ts": finished,
                "deadline_met": deadline is None or finished <= deadline, "batches": rows,
                "final_wall_seconds": manifest.get("wall_seconds"), "final_cpu_seconds": manifest.get("cpu_seconds"),
                "final_end_to_end_seconds": manifest.get("end_to_end_seconds"),
                "final_computed_ahead_ts": manifest.get("computed_ahead_at"),
                "backend": manifest.get("backend"), "task_cpu": accounting.window_task_cpu(ws),
                "final_attempts": len(tries.get("final", [])),
                "retried": sorted(name for name, t in tries.items() if len(t) > 1),
                "result": manifest["result"], "partial": manifest["partial"], "late": manifest["late"],
                "late_units": manifest["late_units"], "quarantined": manifest.get("quarantined", [])}


def _since(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start
