"""``iqp_dag``: one recurring query as a DAG, in about ten lines.

::

    from datetime import timedelta
    from airflow_iqp.dag_factory import iqp_dag
    from airflow_iqp.options import Arrival

    dag = iqp_dag(
        query="cq2",
        streams="/data/landing/orders/{{ data_interval_start | ts_nodash }}",
        static="/data/tpch/static",
        window=timedelta(hours=1), deadline_offset=timedelta(minutes=10),
        arrival=Arrival(units=240, rate=240 / 3600),
    )

No cost needs to be given: the first window is planned with the backend's built-in
default, every later one with what the query's batches and merges took (the cost history).

The DAG: ``plan`` (BatchPlanOperator) -> per batch, a mapped task group ``batch`` of
``wait`` (BatchReadySensor, deferred to the triggerer) and ``submit`` (BatchOperator:
spark-submit of the batch job, or the same job on a Spark Connect server with
``backend=SparkConnect()``) -> ``final`` (FinalOperator, on the same backend). Runs come
from a WindowTimetable: one per window, created as the window opens.

With ``SparkSubmit(fuse_tail=True)`` (or ``SparkConnect(...)``) the last batch is not a
mapped task: ``tail_wait`` (the same sensor, deferred, claiming nothing) wakes
``tail_lead`` seconds before the window's end, and ``final`` starts then, opens its
session (on spark-submit: starts its job, JVM and all), runs on it the batches that become
ready after it started (each when ready, as the sensor would fire it), waits for the last
batch's input, claims it, and runs the batch and the merge in one job. After the window's
end only that work is left: no task start, no JVM start. The price is one worker held for
``tail_lead`` seconds and more. Several query DAGs on one cluster take turns with those
batches (``tail_slots``, earliest deadline first) and plan for the turns of those due
before them (``Algorithm1(ahead=...)`` or ``Algorithm1(shares=...)``).
"""

from __future__ import annotations

import datetime as dt
from typing import Mapping, Sequence

import pendulum
from airflow.sdk import DAG, XComArg, task_group

from airflow_iqp.backends import typed_choices
from airflow_iqp.errors import ConfigError
from airflow_iqp.backends import Backend, SparkSubmit
from airflow_iqp.options import Alerts, Algorithm1, Arrival, Cut, OneBatch, expect
from airflow_iqp.query import Query, decompose
from airflow_iqp.query.model import check_query_id
from airflow_iqp.streams import as_streams, ddl_columns, landing_of
from airflow_iqp.operators.batch import BatchOperator
from airflow_iqp.operators.final import FinalOperator
from airflow_iqp.operators.plan import BatchPlanOperator
from airflow_iqp.sensors.ready import BatchReadySensor
from airflow_iqp.timetables.window import WindowTimetable

#: A batch's name in the UI, e.g. "batch 2/3 · 240 units · ready 10:04".
BATCH_LABEL = "{{ task.batch.label }}"

#: The keywords ``iqp_dag`` took before its settings became objects, and where each went.
MOVED = {
    **dict.fromkeys(("units", "rate", "profile", "grace", "late", "lateness"), "arrival=Arrival({}=...)"),
    **dict.fromkeys(("margin", "shares", "ahead"), "cut=Algorithm1({}=...)"),
    **dict.fromkeys(("rsf", "c_max", "max_batches"), "cut=MinBatches({}=...)"),
    **dict.fromkeys(("cost_hint", "final_agg_hint", "cost_scale"), "cut=Algorithm1({}=...) (or MinBatches, OneBatch)"),
    "mode": "cut=: Algorithm1() for 'plan', MinBatches() for 'dynamic', OneBatch() for 'one_batch'",
    "allow_single_batch": "cut=OneBatch()",
    **dict.fromkeys(("pool", "weight_rule", "retries", "fuse_tail", "tail_lead", "tail_slots", "dispatch"),
                    "backend=SparkSubmit({}=...) (or SparkConnect)"),
    "spark_conf": "backend=SparkSubmit(conf=...) (a Spark Connect server takes no spark-submit conf)",
    "deadline_alert": "alerts=Alerts(deadline=...)",
    "deadline_callback": "alerts=Alerts(on_miss=...)",
    "on_deadline_risk": "alerts=Alerts(on_risk=...)",
    "landing": "streams= (a catalogued query's landing path: streams='<path>')",
}


def iqp_dag(*, sql: str | None = None, name: str | None = None, query: str | Query | None = None,
            streams: str | Mapping | None = None, static: str | Mapping | None = None,
            window: dt.timedelta, deadline_offset: dt.timedelta, arrival: Arrival = Arrival(),
            cut: Cut = Algorithm1(), backend: Backend = SparkSubmit(), alerts: Alerts = Alerts(),
            state_dir: str | None = None, anchor: dt.datetime | None = None, **dag_kwargs) -> DAG:
    """Build the DAG of one recurring query.

    :param sql: the query, one aggregate SELECT in Spark SQL over ``streams`` and ``static``
        tables. It is split into a per-batch step and a final step when the DAG file is
        parsed; a query that cannot be split is refused then, with one line that says why
        (:func:`airflow_iqp.query.decompose`), unless ``cut=OneBatch()``.
    :param name: the query's id with ``sql=`` (the DAG is ``iqp_<name>``; it names the query's
        state directory): letters, digits, ``_``, ``.``, ``-``.
    :param query: instead of ``sql``: a catalogued query's id (cq1..cq4, q1, q3, ...) or a
        :class:`~airflow_iqp.query.Query` (e.g. ``Query(partial=fn, final=fn)`` of PySpark functions).
    :param streams: where the input lands. The tables whose rows arrive over the window: name
        -> landing path (templated, e.g. with ``data_interval_start``) or
        :class:`~airflow_iqp.streams.Stream`; one file per unit by default, and streams joined
        in one query land together, each unit a directory holding one file per stream
        (``Stream(..., unit="dir")``). For a catalogued query, a string: the landing path of
        TPC-H units (a directory of ``<table>.parquet`` per unit).
    :param static: the static tables: name -> path (a file or a directory of files); for a
        catalogued query, a directory of ``<table>.parquet``.
    :param window: the window length; runs are created as each window opens.
    :param deadline_offset: the result is due this long after the window's end.
    :param arrival: how input arrives (:class:`~airflow_iqp.options.Arrival`).
    :param cut: how a window is cut (:class:`~airflow_iqp.options.Algorithm1`,
        :class:`~airflow_iqp.options.MinBatches` or :class:`~airflow_iqp.options.OneBatch`).
    :param backend: which backend runs it (:class:`~airflow_iqp.backends.SparkSubmit` or
        :class:`~airflow_iqp.backends.SparkConnect`).
    :param alerts: deadline alerts (:class:`~airflow_iqp.options.Alerts`).
    :param state_dir: the state directory (default ``[iqp] state_dir``).
    :param anchor: a window boundary; no window starts before it.
    :param dag_kwargs: passed to the ``DAG``: ``dag_id`` (default ``iqp_<query>``),
        ``start_date`` (default ``anchor``, else 2026-01-01 UTC), ``catchup`` (default False),
        ``tags`` (added to ``iqp`` and the query's id), ``end_date``, ...
    """
    from airflow_iqp.deadlines import window_deadline_alert

    moved = sorted(set(dag_kwargs) & set(MOVED))
    if moved:
        raise ConfigError(f"moved to {MOVED[moved[0]].format(moved[0])}", moved[0])
    arrival = expect(arrival, Arrival, "arrival", "Arrival(...) (arrival='observed' is Arrival(observed=True))")
    cut = expect(cut, Cut, "cut", "Algorithm1(...), MinBatches(...) or OneBatch()")
    backend = expect(backend, Backend, "backend", typed_choices()).with_fuse_tail(False)
    alerts = expect(alerts, Alerts, "alerts", "Alerts(...)")
    q, stream_list, landing = _query_and_streams(query, sql, name, streams, static, isinstance(cut, OneBatch))
    # streams='<path>' names the directory each window's TPC-H units land in, templated or not.
    per_window = True if isinstance(streams, str) else None
    if q.single_batch and not isinstance(cut, OneBatch):
        raise ConfigError(f"query {q.id} cannot be split: run it with cut=OneBatch()", "cut")
    query = q.id
    if alerts.deadline:
        dag_kwargs["deadline"] = window_deadline_alert(deadline_offset, alerts.on_miss, query=query)
    dag_kwargs.setdefault("catchup", False)
    with DAG(
        dag_id=dag_kwargs.pop("dag_id", None) or f"iqp_{query}",
        schedule=WindowTimetable(window=window, deadline_offset=deadline_offset, anchor=anchor),
        start_date=dag_kwargs.pop("start_date", None) or anchor or pendulum.datetime(2026, 1, 1, tz="UTC"),
        tags=("iqp", query, *dag_kwargs.pop("tags", ())),
        doc_md=f"Recurring query **{query}**: windows of {window}, result due {deadline_offset} after each."
               + (f"\n\n```sql\n{q.sql.strip()}\n```" if q.sql else ""),
        **dag_kwargs,
    ) as dag:
        # A retried plan task plans its window again, and stores that plan in place of its own.
        plan = BatchPlanOperator(
            task_id="plan", query=q, landing=landing, static=static, state_dir=state_dir,
            streams=[st.to_dict() for st in stream_list], per_window=per_window,
            arrival=arrival, cut=cut, backend=backend, on_deadline_risk=alerts.on_risk,
            retries=backend.retries, retry_delay=dt.timedelta(seconds=5))
        spark = _spark_kwargs(backend)
        batch = _batch_group(backend)
        tail = XComArg(plan, key="tail") if backend.fuse_tail else None
        final = FinalOperator(task_id="final", query=query, plan=plan.output, tail=tail,
                              tail_slots=backend.tail_slots, state_dir=state_dir, **spark)
        batch.expand(entry=plan.output) >> final
        if arrival.late == "merge":  # the window before this one: its late units, merged into its result
            late_batch = XComArg(plan, key="late")
            BatchReadySensor(task_id="late_wait", batch=late_batch) >> FinalOperator(
                task_id="late", query=query, late=late_batch, state_dir=state_dir, **spark)
        if backend.fuse_tail:
            BatchReadySensor(task_id="tail_wait", batch=tail, claim=False) >> final
    return dag


def iqp_group(*, name: str, queries: Mapping[str, str | Query] | Sequence[str | Query],
              streams: str | Mapping, static: str | Mapping | None = None, window: dt.timedelta,
              deadline_offset: dt.timedelta | Mapping[str, dt.timedelta], arrival: Arrival = Arrival(),
              cut: Cut = Algorithm1(), backend: Backend = SparkSubmit(), alerts: Alerts = Alerts(),
              state_dir: str | None = None, anchor: dt.datetime | None = None, **dag_kwargs) -> DAG:
    """Build one DAG for several queries over the same streams: shared batches, a final task per query.

    Each batch is one Spark job that reads its units once and writes one partial per query;
    each query has its own ``final_<query>`` task, result, Asset, deadline and Deadline
    Alert. With the backend's ``fuse_tail`` (a group's default), one task (``tail``), started before the
    window's end, runs the last shared batch and every query's merge, earliest deadline
    first, in one Spark job; each ``final_<query>`` task then accounts for its query and
    emits its Asset event, with no Spark job of its own. The batches are planned once, for every query's work with one start-up, against
    the earliest deadline. Each query is planned on its own too: when that would cost less
    (their deadlines far apart) or meet a deadline that sharing misses, the plan task says so
    and why, before any data moves, and which queries to give DAGs of their own
    (:func:`airflow_iqp.window.group.plan_group`); the batches stay shared, since every
    final task waits for them.

    :param name: the group's id: the DAG is ``iqp_<name>``, and its shared batches' claims
        are in its state.
    :param queries: the queries: id -> SQL text (or a :class:`~airflow_iqp.query.Query`), or
        a list of catalogued ids (or Queries).
    :param deadline_offset: each query's result is due this long after the window's end: one
        for all, or query id -> offset.
    :param streams: static: window: arrival: cut: backend: alerts: state_dir: anchor: as
        for :func:`iqp_dag`; ``arrival`` without ``late="merge"``.
    """
    from airflow_iqp.deadlines import window_deadline_alert

    check_query_id(name)
    arrival = expect(arrival, Arrival, "arrival", "Arrival(...)")
    cut = expect(cut, Cut, "cut", "Algorithm1(...), MinBatches(...) or OneBatch()")
    # One job merging every member with the last batch saves a start-up per member.
    backend = expect(backend, Backend, "backend", typed_choices()).with_fuse_tail(True)
    alerts = expect(alerts, Alerts, "alerts", "Alerts(...)")
    if arrival.late == "merge":
        raise ConfigError("a group records late units (late='record'); merge them with one DAG per query",
                          "arrival.late")
    if not queries:
        raise ConfigError("give the group's queries: {'id': 'SELECT ...', ...} or ['cq1', 'q6', ...]", "queries")
    given = queries.items() if isinstance(queries, Mapping) else [(None, q) for q in queries]
    members: dict[str, Query] = {}
    stream_list, landing = None, None
    for qid, q in given:
        sql = q if isinstance(q, str) and qid is not None else None
        query, read, where = _query_and_streams(None if sql else q, sql, qid if sql else None, streams, static,
                                                isinstance(cut, OneBatch))
        if query.single_batch and not isinstance(cut, OneBatch):
            raise ConfigError(f"query {query.id} cannot be split: run the group with cut=OneBatch()", "cut")
        if query.id in members or query.id.lower() == name.lower():
            raise ConfigError(f"query id {query.id} is given twice (the group's own id counts)", "queries")
        members[query.id] = query
        if stream_list is None or len(read) > len(stream_list):
            stream_list, landing = read, where
    offsets = ({q: deadline_offset for q in members} if isinstance(deadline_offset, dt.timedelta)
               else dict(deadline_offset))
    missing = sorted(set(members) - set(offsets))
    if missing:
        raise ConfigError(f"no deadline for {', '.join(missing)}: give deadline_offset={{'{missing[0]}': ...}}",
                          "deadline_offset")
    first = min(offsets[q] for q in members)
    if alerts.deadline:  # each query's own: its alert says whether its result was on time
        dag_kwargs["deadline"] = [window_deadline_alert(offsets[q], alerts.on_miss, name=f"iqp-window-deadline-{q}",
                                                        query=q, member_of=name, state_dir=state_dir)
                                   for q in members]
    dag_kwargs.setdefault("catchup", False)
    with DAG(
        dag_id=dag_kwargs.pop("dag_id", None) or f"iqp_{name}",
        schedule=WindowTimetable(window=window, deadline_offset=first, anchor=anchor),
        start_date=dag_kwargs.pop("start_date", None) or anchor or pendulum.datetime(2026, 1, 1, tz="UTC"),
        tags=("iqp", name, *members, *dag_kwargs.pop("tags", ())),
        doc_md=f"Group **{name}**: queries {', '.join(members)} over the same streams, windows of {window}; "
               f"shared batches, a final task per query.",
        **dag_kwargs,
    ) as dag:
        plan = BatchPlanOperator(
            task_id="plan", query=name, landing=landing, static=static, state_dir=state_dir,
            streams=[st.to_dict() for st in stream_list], per_window=True if isinstance(streams, str) else None,
            arrival=arrival, cut=cut, backend=backend, on_deadline_risk=alerts.on_risk, members=members,
            deadlines={q: offsets[q] for q in members}, retries=backend.retries, retry_delay=dt.timedelta(seconds=5))
        spark = _spark_kwargs(backend)
        batches = _batch_group(backend).expand(entry=plan.output)
        if not backend.fuse_tail:
            for q in members:
                batches >> FinalOperator(task_id=f"final_{q}", query=q, plan=plan.output, group=name,
                                         deadline_offset=offsets[q], state_dir=state_dir, **spark)
            return dag
        # A fused tail: one task, started before the window's end, runs the last shared batch
        # and every member's merge in one job; each member's own final task then publishes.
        tail = XComArg(plan, key="tail")
        merge = FinalOperator(task_id="tail", query=name, plan=plan.output, tail=tail, tail_slots=backend.tail_slots,
                              state_dir=state_dir, outlets=[], **spark)
        batches >> merge
        BatchReadySensor(task_id="tail_wait", batch=tail, claim=False) >> merge
        for q in members:
            merge >> FinalOperator(task_id=f"final_{q}", query=q, plan=plan.output, tail=tail, group=name,
                                   merged=True, deadline_offset=offsets[q], state_dir=state_dir, backend=backend,
                                   retries=backend.retries, retry_delay=dt.timedelta(seconds=5))
    return dag


def _spark_kwargs(backend: Backend) -> dict:
    """What every batch and final task of a DAG on ``backend`` takes."""
    return {**backend.task_kwargs(), "backend": backend, "retry_delay": dt.timedelta(seconds=5)}


def _batch_group(backend: Backend):
    """The task group ``batch`` that a DAG maps over its plan entries: per batch, its wait
    (deferred to the triggerer) and its Spark job."""
    spark = _spark_kwargs(backend)
    # Where every batch takes a turn on the cluster, the mapped ones do too; a batch that
    # would hold its turn through its JVM's start leaves the turns to fused tails.
    turns = {"slots": backend.tail_slots} if backend.mapped_batches_take_turns else {}

    @task_group(group_id="batch")
    def batch(entry):
        wait = BatchReadySensor(task_id="wait", batch=entry, map_index_template=BATCH_LABEL)
        submit = BatchOperator(task_id="submit", batch=entry, map_index_template=BATCH_LABEL, **spark, **turns)
        wait >> submit

    return batch


def _query_and_streams(query, sql, name, streams, static, allow_single_batch):
    """The Query, the streams it reads and its landing path."""
    from airflow_iqp.query.catalogue import get_query
    from airflow_iqp.query.store import catalogued

    if (query is None) == (sql is None):
        raise ConfigError("give the query as sql=... (with streams=) or as query=... (a catalogue id or a Query), "
                          "one of the two", "sql")
    if sql is not None:
        if not name:
            raise ConfigError("a SQL query needs a name= (it names the DAG and the query's state)", "name")
        check_query_id(name)  # before the SQL is read: the name becomes a directory of the state
        if not streams:
            raise ConfigError("a SQL query needs streams={'table': '<landing path>'}", "streams")
        if static is not None and not isinstance(static, Mapping):
            raise ConfigError("with sql=, give static tables as {'table': '<path>'}", "static")
        if not isinstance(streams, Mapping):
            raise ConfigError("with sql=, give streams={'table': '<landing path>'} (a string is the TPC-H unit "
                              "layout of a catalogued query)", "streams")
        declared = as_streams(streams)
        schemas = {s.name: ddl_columns(s.schema) for s in declared if s.schema}
        check = schemas if not static and len(schemas) == len(declared) else None
        query = decompose(sql, id=name, streams=[s.name for s in declared], static=list(static or ()),
                          schemas=check, allow_single_batch=allow_single_batch)
    elif isinstance(query, str):
        query = get_query(query)
        if isinstance(streams, str):  # the layout of `airflow-iqp tpch`: a directory per unit
            return query, list(catalogued(query.id, streams).streams), streams
        if streams is None:
            raise ConfigError(f"query {query.id}: give streams='<landing path>' (where each window's TPC-H units "
                              f"land) or streams={{'table': '<landing path>'}}", "streams")
    if not isinstance(query, Query):
        raise ConfigError(f"must be a catalogue id or a Query, got {type(query).__name__}", "query")
    if streams is None:
        raise ConfigError(f"query {query.id}: give streams={{'table': '<landing path>'}}", "streams")
    if not isinstance(streams, Mapping):
        raise ConfigError(f"query {query.id}: give streams={{'table': '<landing path>'}} (a string is the TPC-H "
                          f"unit layout of a catalogued query)", "streams")
    read = [s for s in as_streams(streams) if s.name in query.streams]
    missing = sorted(set(query.streams) - {s.name for s in read})
    if missing:
        raise ConfigError(f"query {query.id} reads stream(s) {', '.join(missing)}: declare them in streams=",
                          "streams")
    return query, read, landing_of(read)
