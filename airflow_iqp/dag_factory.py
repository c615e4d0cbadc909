"""``iqp_dag``: one recurring query as a DAG, in about ten lines.

::

    from datetime import timedelta
    from airflow_iqp.dag_factory import iqp_dag

    dag = iqp_dag(
        query="cq2",
        landing="/data/landing/orders/{{ data_interval_start | ts_nodash }}",
        static="/data/tpch/static",
        units=240, window=timedelta(hours=1), deadline_offset=timedelta(minutes=10),
        rate=240 / 3600, cost_hint={"kind": "linear", "per_unit": 0.05, "per_batch": 20},
    )

The DAG: ``plan`` (BatchPlanOperator) -> per batch, a mapped task group ``batch`` of
``wait`` (BatchReadySensor, deferred to the triggerer) and ``submit``
(BatchSubmitOperator, spark-submit of the batch job; BatchConnectOperator with
``backend="spark-connect"``) -> ``final`` (FinalAggregationOperator, or
FinalConnectOperator). Runs come from a WindowTimetable: one per window, created
as the window opens.

With ``fuse_tail=True`` the last batch is not a mapped task: ``tail_wait`` (the same
sensor, deferred, claiming nothing) wakes ``tail_lead`` seconds before the window's end,
and ``final`` starts then, opens its session (on spark-submit: starts its job, JVM and
all), runs on it the batches that become ready after it started (each when ready, as the
sensor would fire it), waits for the last batch's input, claims it, and runs the batch
and the merge in one job. After the window's end only that work is left: no task start,
no JVM start. The price is one worker held for ``tail_lead`` seconds and more. Several
query DAGs on one cluster take turns with those batches (``tail_slots``, earliest deadline
first) and plan for the turns of those due before them (``ahead``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Mapping

import pendulum
from airflow.sdk import DAG, XComArg, task_group

from airflow_iqp.errors import ConfigError
from airflow_iqp.query import Query, decompose
from airflow_iqp.streams import as_streams, ddl_columns, landing_of
from airflow_iqp.operators.final import FinalAggregationOperator
from airflow_iqp.operators.plan import BatchPlanOperator
from airflow_iqp.operators.submit import BatchSubmitOperator
from airflow_iqp.window.config import BACKENDS
from airflow_iqp.sensors.ready import BatchReadySensor
from airflow_iqp.timetables.window import WindowTimetable

#: A batch's name in the UI, e.g. "batch 2/3 · 240 units · ready 10:04".
BATCH_LABEL = "{{ task.batch.label }}"


def iqp_dag(*, window: dt.timedelta, deadline_offset: dt.timedelta, units: int | None = None,
            grace: float | dt.timedelta | None = None, late: str = "record",
            lateness: float | dt.timedelta | None = None, query: str | Query | None = None,
            sql: str | None = None, name: str | None = None, streams: Mapping | None = None,
            landing: str | None = None, static: str | Mapping | None = None, allow_single_batch: bool = False,
            dag_id: str | None = None, rate: float | None = None, profile: str = "fixed",
            arrival: str = "hint", cost_hint: dict | None = None, final_agg_hint: dict | None = None,
            backend: str = "spark-submit", state_dir: str | None = None, mode: str = "plan", rsf: float = 0.5,
            c_max: float | None = None, max_batches: int = 16, margin: float | None = None, pool: str | None = None,
            weight_rule: str | None = None, retries: int = 2, deadline_alert: bool = True,
            deadline_callback: Any = None, on_deadline_risk: Any = None, anchor: dt.datetime | None = None,
            start_date: dt.datetime | None = None, catchup: bool = False, tags: tuple[str, ...] = (),
            spark_conf: dict | None = None, fuse_tail: bool = False, tail_lead: float | None = None,
            dispatch: float | None = None, tail_slots: int = 0, ahead: float | None = None,
            shares: dict | None = None, cost_scale: float | None = None, **dag_kwargs) -> DAG:
    """Build the DAG of one recurring query.

    :param sql: the query, one aggregate SELECT in Spark SQL over ``streams`` and ``static``
        tables. It is split into a per-batch step and a final step when the DAG file is
        parsed; a query that cannot be split is refused then, with one line that says why
        (:func:`airflow_iqp.query.decompose`).
    :param name: the query's id with ``sql=`` (the DAG is ``iqp_<name>``; it names the query's
        state directory): letters, digits, ``_``, ``.``, ``-``.
    :param streams: the tables whose rows arrive over the window: name -> landing path
        (templated, e.g. with ``data_interval_start``) or :class:`~airflow_iqp.streams.Stream`.
        One file per unit by default; streams joined in one query land together, each unit a
        directory holding one file per stream (``Stream(..., unit="dir")``).
    :param static: the static tables: name -> path (a file or a directory of files).
    :param allow_single_batch: run a query that cannot be split anyway, as one batch after
        the window's end.
    :param query: instead of ``sql``: a catalogued query's id (cq1..cq4, q1, q3, ..., on the
        TPC-H layout, with ``landing`` and ``static`` a directory of ``<table>.parquet``), or a
        :class:`~airflow_iqp.query.Query` (e.g. ``Query(partial=fn, final=fn)`` of PySpark functions).
    :param landing: a catalogued query's landing path (with ``sql``, the streams give it).
    :param units: units expected per window, if known. Without it the count is estimated: the
        median of earlier windows' counts, or ``rate`` times the window for the first; the
        plan is checked against what has arrived at checkpoints through the window, and the
        last batch takes everything present at the window's end plus ``grace``.
    :param grace: how long after the window's end units may still land for the last batch
        (seconds or a timedelta; default 0).
    :param late: units that land after the last claim are recorded (``"record"``, the
        default: ``late.json``, the result marked partial), or also merged (``"merge"``): the
        next window's run claims them ``lateness`` after this window's end plus ``grace``,
        computes them and writes this window's result again as a new revision, and the
        result's Asset event fires again. The deadline stays that of the first revision.
    :param window: the window length; runs are created as each window opens.
    :param deadline_offset: the result is due this long after the window's end.
    :param backend: ``"spark-submit"`` (default; one spark-submit per batch, for YARN, Kubernetes,
        standalone) or ``"spark-connect"`` (every batch and final on the Spark Connect server of
        the ``[iqp] spark_connect_conn_id`` connection).
    :param margin: seconds kept between a batch's input being ready and its latest start (default 10).
    :param pool: an Airflow pool whose slots are the batches the Spark cluster runs at once.
    :param weight_rule: ``"airflow_iqp.priority.EDFPriority"``, ``...LLFPriority`` or ``...SJFPriority``.
    :param deadline_alert: attach a DeadlineAlert (off for ``airflow dags test``, which crashes on one in 3.3.2).
    :param mode: ``"plan"`` (Algorithm 1), ``"dynamic"`` (MinBatches) or ``"one_batch"`` (the whole
        window after its end: the baseline, on the same deployment).
    :param fuse_tail: run the last batch inside the final task, started ``tail_lead`` seconds
        before the window's end; batches ready after it starts run in it too.
    :param tail_lead: seconds before the window's end that the final task starts (default
        ``airflow_iqp.window.readiness.tail_lead(backend)``: 5 s, 15 s on spark-submit, whose job starts a JVM; 0
        starts it at the window's end). Longer leads take batches near the end off Airflow's
        task starts, at the price of a worker slot held meanwhile.
    :param tail_slots: with fused tails, how many of the state directory's final tasks' batches
        run at once, earliest deadline first (0, the default: no limit; 1: the paper's one batch
        at a time). With it the turn is the gate's: ``ahead`` no longer holds the last batch back.
        On Spark Connect every batch takes its turn, mapped ones too (a spark-submit batch
        would hold the turn while its JVM starts).
    :param dispatch: seconds Airflow takes from a batch's claim to its Spark work (sensor
        resume, task start, session), added to every planned batch (default 0).
    :param cost_scale: plan with the calibrated costs times this (default 1): the load the
        deployment adds while a window runs, which an idle calibration does not see.
    :param shares: the other queries on this cluster over the same arriving units, query id ->
        deadline offset (timedelta or seconds): each window is planned in the executor time the
        queries due before it leave (joint planning, earliest deadline first; they are planned
        with this DAG's settings and their own calibrated cost models). Use with ``tail_slots``.
    :param ahead: seconds after the window's end that the cluster is busy with the final work
        of queries due before this one (several query DAGs on one cluster, with ``tail_slots``):
        the window is planned against its deadline less this, and its last batch waits for it.
        For queries sharing a cluster, the deadline offset of the query due just before this
        one reserves the cluster for it until its deadline (earliest deadline first).
    """
    from airflow_iqp.deadlines import window_deadline_alert

    q, stream_list, landing = _query_and_streams(query, sql, name, streams, landing, static, allow_single_batch)
    if q.single_batch:
        mode = "one_batch"
    query = q.id
    if backend not in BACKENDS:
        raise ConfigError(f"must be one of {', '.join(BACKENDS)}, got {backend!r}", "backend")
    if backend == "spark-connect":
        from airflow_iqp.operators.connect import BatchConnectOperator as batch_op
        from airflow_iqp.operators.connect import FinalConnectOperator as final_op
    else:
        batch_op, final_op = BatchSubmitOperator, FinalAggregationOperator
    if deadline_alert:
        dag_kwargs["deadline"] = window_deadline_alert(deadline_offset, deadline_callback, query=query)
    with DAG(
        dag_id=dag_id or f"iqp_{query}",
        schedule=WindowTimetable(window=window, deadline_offset=deadline_offset, anchor=anchor),
        start_date=start_date or pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=catchup,
        tags=("iqp", query, *tags),
        doc_md=f"Recurring query **{query}**: windows of {window}, result due {deadline_offset} after each."
               + (f"\n\n```sql\n{q.sql.strip()}\n```" if q.sql else ""),
        **dag_kwargs,
    ) as dag:
        plan = BatchPlanOperator(
            task_id="plan", query=q, landing=landing, units=units, static=static, state_dir=state_dir,
            grace=_seconds(grace), late=late, lateness=_seconds(lateness),
            streams=[st.to_dict() for st in stream_list] if stream_list else None,
            rate=rate, profile=profile, arrival=arrival, cost_hint=cost_hint, final_agg_hint=final_agg_hint,
            backend=backend, mode=mode, rsf=rsf, c_max=c_max, max_batches=max_batches, margin=margin,
            on_deadline_risk=on_deadline_risk, fuse_tail=fuse_tail, dispatch=dispatch, ahead=ahead,
            tail_lead=tail_lead, shares=shares, cost_scale=cost_scale)
        spark = {"pool": pool} if pool else {}
        # On Spark Connect every batch takes a turn on the one server; a spark-submit batch
        # would hold its turn through its JVM's start, so there only fused tails do.
        turns = {"slots": tail_slots} if backend == "spark-connect" else {}
        if weight_rule:
            spark["weight_rule"] = weight_rule

        @task_group(group_id="batch")
        def batch(entry):
            wait = BatchReadySensor(task_id="wait", batch=entry, map_index_template=BATCH_LABEL)
            submit = batch_op(task_id="submit", batch=entry, map_index_template=BATCH_LABEL,
                              retries=retries, retry_delay=dt.timedelta(seconds=5), conf=spark_conf, **spark, **turns)
            wait >> submit

        tail = XComArg(plan, key="tail") if fuse_tail else None
        final = final_op(task_id="final", query=query, plan=plan.output, tail=tail, tail_slots=tail_slots,
                         state_dir=state_dir,
                         conf=spark_conf, retries=retries, retry_delay=dt.timedelta(seconds=5), **spark)
        batch.expand(entry=plan.output) >> final
        if late == "merge":  # the window before this one: its late units, merged into its result
            late_batch = XComArg(plan, key="late")
            BatchReadySensor(task_id="late_wait", batch=late_batch) >> final_op(
                task_id="late", query=query, late=late_batch, state_dir=state_dir, conf=spark_conf, retries=retries,
                retry_delay=dt.timedelta(seconds=5), **spark)
        if fuse_tail:
            BatchReadySensor(task_id="tail_wait", batch=tail, claim=False) >> final
    return dag


def _seconds(value: float | dt.timedelta | None) -> float | None:
    return value.total_seconds() if isinstance(value, dt.timedelta) else value


def _query_and_streams(query, sql, name, streams, landing, static, allow_single_batch):
    """The Query, the streams it reads (None: the TPC-H layout) and its landing path."""
    from airflow_iqp.query.catalogue import get_query

    if (query is None) == (sql is None):
        raise ConfigError("give the query as sql=... (with streams=) or as query=... (a catalogue id or a Query), "
                          "one of the two", "sql")
    if sql is not None:
        if not name:
            raise ConfigError("a SQL query needs a name= (it names the DAG and the query's state)", "name")
        if not streams:
            raise ConfigError("a SQL query needs streams={'table': '<landing path>'}", "streams")
        if static is not None and not isinstance(static, Mapping):
            raise ConfigError("with sql=, give static tables as {'table': '<path>'}", "static")
        declared = as_streams(streams)
        schemas = {s.name: ddl_columns(s.schema) for s in declared if s.schema}
        check = schemas if not static and len(schemas) == len(declared) else None
        query = decompose(sql, id=name, streams=[s.name for s in declared], static=list(static or ()),
                          schemas=check, allow_single_batch=allow_single_batch)
    elif isinstance(query, str):
        query = get_query(query)
        if landing is None:
            raise ConfigError(f"query {query.id}: give landing= (where each window's units land)", "landing")
        return query, None, landing
    if not isinstance(query, Query):
        raise ConfigError(f"must be a catalogue id or a Query, got {type(query).__name__}", "query")
    if streams is None:
        raise ConfigError(f"query {query.id}: give streams={{'table': '<landing path>'}}", "streams")
    read = [s for s in as_streams(streams) if s.name in query.streams]
    missing = sorted(set(query.streams) - {s.name for s in read})
    if missing:
        raise ConfigError(f"query {query.id} reads stream(s) {', '.join(missing)}: declare them in streams=",
                          "streams")
    return query, read, landing_of(read)

