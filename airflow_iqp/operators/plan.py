"""BatchPlanOperator: the deadline-aware operator that plans a window's batches."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any, Mapping, Sequence

from airflow.sdk import BaseOperator

from airflow_iqp import config
from airflow_iqp.backends import typed_choices
from airflow_iqp.errors import ConfigError
from airflow_iqp.notifications.deadline import DeadlineRiskNotifier
from airflow_iqp.backends import Backend, SparkSubmit
from airflow_iqp.options import Algorithm1, Arrival, Cut, expect
from airflow_iqp.query import Query
from airflow_iqp.query.catalogue import get_query
from airflow_iqp.hooks.state import IQPStateHook
from airflow_iqp.query.store import Saved
from airflow_iqp.window.config import QueryConfig, clock
from airflow_iqp.window.accounting import late_entry, record_task_cpu
from airflow_iqp.window.costs import tail_start_lead
from airflow_iqp.window.group import plan_group
from airflow_iqp.window.plan import format_window_plan, plan_window, register_on_cluster, store_plan, wait_for_cluster
from airflow_iqp.window.readiness import split_tail, tail_lead


def _json(batch) -> dict:
    """A batch as XCom holds it: its JSON form, or an empty dict for none (an XComArg must
    resolve to a value; the sensor skips an empty one)."""
    return batch.to_dict() if batch is not None else {}


class BatchPlanOperator(BaseOperator):
    """Plans the fewest, largest batches of this run's window that meet its deadline.

    Reads the window (the run's data interval) and the deadline (the window's end plus
    ``deadline_offset``, by default the ``WindowTimetable``'s). The arrival model is
    ``arrival``'s hint (:class:`~airflow_iqp.options.Arrival`) or, with ``observed=True``, the
    previous window's observed arrivals; the cost model is fitted to the cost history of
    ``backend`` (:func:`~airflow_iqp.window.costs.cost_models`), with ``cut``'s ``cost_hint``
    and ``final_agg_hint``, else the backend's built-in default, as the fallback; ``cut``
    says how the window is cut. If the window's input is already complete (a backfill) it
    plans one batch.

    It logs the plan as a table, stores it as the window's plan in the state store and as
    the XCom ``plan``, and returns one entry per batch for mapping. With the backend's
    ``fuse_tail`` the last batch is not mapped: it goes to the XCom ``tail``, for the final
    task to run, which starts the backend's ``lead`` seconds before the window's end; so
    do the batches ready after that (:func:`~airflow_iqp.window.readiness.split_tail`). If
    the deadline cannot be met it warns through ``on_deadline_risk`` (default
    :class:`DeadlineRiskNotifier`: a log line and a record with the window) and returns the
    best-effort plan, the one that finishes earliest.
    """

    template_fields: Sequence[str] = ("landing", "static", "state_dir")
    ui_color = "#f5e6c8"

    def __init__(self, *, query: str | Query, landing: str, streams: Sequence[dict], static: str | dict | None = None,
                 per_window: bool | None = None, state_dir: str | None = None,
                 arrival: Arrival = Arrival(), cut: Cut = Algorithm1(), backend: Backend = SparkSubmit(),
                 deadline_offset: dt.timedelta | None = None, on_deadline_risk: Any = None,
                 members: Mapping[str, Query] | None = None, deadlines: Mapping[str, dt.timedelta] | None = None,
                 **kwargs):
        super().__init__(**kwargs)
        # A group (``iqp_group``): ``query`` is the group's id, ``members`` its queries by id,
        # each due ``deadlines[id]`` after the window's end.
        self.members = dict(members or {})
        self.deadlines = {m: (deadlines or {})[m] for m in self.members}
        arrival = expect(arrival, Arrival, "arrival", "Arrival(...)")
        cut = expect(cut, Cut, "cut", "Algorithm1(...), MinBatches(...) or OneBatch()")
        backend = expect(backend, Backend, "backend", typed_choices())
        self.fuse_tail = bool(backend.fuse_tail)
        self.tail_lead = backend.lead
        # None: learned from the window's tails before (at least the backend's lead).
        self.lead_given = backend.tail_lead is not None
        # A catalogued query is named by its id; a user's query is the Query itself.
        self.query_def = query if isinstance(query, Query) else None
        self.query = query.id if isinstance(query, Query) else query
        self.landing, self.static = landing, static
        # Whether the landing path names the window (a directory per window) is a property
        # of the path as written, before Airflow renders it: a plain path is a flat or
        # partitioned layout, whose files belong to windows by their arrival, unless
        # ``per_window`` says the directory given is the window's.
        self.per_window = per_window if per_window is not None else "{{" in str(landing) or "{%" in str(landing)
        if not streams:
            raise ConfigError("no streams declared: give streams=[Stream(...).to_dict(), ...]", "streams")
        self.streams = tuple(streams)
        self.state_dir = state_dir or config.state_dir()
        # QueryConfig's fields but the query, where it lands and the state directory.
        self.options = {**arrival.query_config(), **cut.query_config(), **backend.query_config()}
        self.units = self.options.pop("units")
        self.deadline_offset = deadline_offset
        self.on_deadline_risk = on_deadline_risk or DeadlineRiskNotifier()

    def _offset(self, context) -> dt.timedelta:
        if self.deadline_offset is not None:
            return self.deadline_offset
        offset = getattr(getattr(context["dag"], "timetable", None), "deadline_offset", None)
        if offset is None:
            raise ConfigError("no deadline: give deadline_offset, or schedule the DAG with a WindowTimetable",
                              "deadline_offset")
        return offset

    def execute(self, context) -> list[dict]:
        start, end = context["data_interval_start"], context["data_interval_end"]
        if start is None or end is None or end <= start:
            raise ConfigError("this run has no window: trigger it with a logical date, or let the "
                              "WindowTimetable schedule it", "data_interval")
        cfg = QueryConfig(query=self.query, landing=self.landing, state_dir=self.state_dir, units=self.units,
                          static=self.static, streams=self.streams, **self.options)
        state = IQPStateHook(cfg.state_dir)
        # What the batch and final jobs run: saved with this window's plan, loaded by the jobs.
        for q in self.members.values() or [self.query_def or get_query(self.query)]:
            state.save_query(Saved(q, cfg.streams, cfg.static))
        if self.members:
            cfg = replace(cfg, members={m: off.total_seconds() for m, off in self.deadlines.items()})
        if not self.per_window:  # this window's files are those that arrived in it
            bound = [s.for_window(start.timestamp(), end.timestamp(), templated=False) for s in cfg.streams]
            cfg = replace(cfg, streams=tuple(bound))
        deadline = (end + self._offset(context)).timestamp()
        if self.members:  # shared batches, compared with each query apart
            wp = plan_group(cfg, start.timestamp(), end.timestamp(), store=True)
            # Registered as planned: with the group's summed costs, as the others plan with it.
            register_on_cluster(QueryConfig.from_dict(wp.config), start.timestamp(), end.timestamp(), deadline)
        else:
            # Registered before it plans: the other queries on its cluster plan with it from now on.
            register_on_cluster(cfg, start.timestamp(), end.timestamp(), deadline)
            wait_for_cluster(cfg, start.timestamp(), (end - start).total_seconds())
            wp = plan_window(cfg, start.timestamp(), end.timestamp(), deadline)
            store_plan(wp)
        self.log.info("plan\n%s", format_window_plan(wp))
        path = state.window(cfg.query, start.timestamp()).location
        context["ti"].xcom_push(key="plan", value=wp.to_dict())
        # The window before this one: its late batch, merged by this run (late="merge").
        # (An empty dict, not None, when there is none: an XComArg must resolve to a value.)
        context["ti"].xcom_push(key="late", value=_json(late_entry(cfg, start.timestamp(), end.timestamp())))
        ws = state.window(cfg.query, start.timestamp())
        if wp.advice:  # before any data moves: what the group would do better apart
            self.log.warning("group %s: %s", cfg.query, wp.models.rsplit("; shared by ", 1)[-1])
        if not wp.plan.feasible and not wp.backfill:
            context["iqp_plan"] = wp.to_dict()
            context["iqp_window"] = ws
            self.on_deadline_risk(context)
        record_task_cpu(ws, context["ti"])
        self.log.info("plan stored in %s: %d batches", path, len(wp.batches))
        if not self.fuse_tail:
            return [b.to_dict() for b in wp.batches]
        lead = self.tail_lead if self.lead_given else tail_start_lead(cfg, self.tail_lead)
        ahead = tail_lead(wp.batches, lead)
        mapped, tail = split_tail(wp.batches, ahead)
        if tail:
            self.log.info("the final task starts at %s, %.1f s before its last batch is ready (%s)%s",
                          clock(tail.start_ts), ahead, "tail_lead given" if self.lead_given else
                          "the backend's lead" if lead <= self.tail_lead else
                          f"a lead of {lead:.1f} s, from its tails' start-ups before",
                          f", and runs batches {[b.index for b in tail.before]} too" if tail.before else "")
        context["ti"].xcom_push(key="tail", value=_json(tail))
        return [b.to_dict() for b in mapped]
