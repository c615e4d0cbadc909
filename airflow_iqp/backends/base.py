"""What every backend is: :class:`Backend`, the user's typed options and the backend's facts,
and the two kinds of runner it makes (:class:`Runner` for a task, :class:`CalibrationRunner`
for ``airflow-iqp calibrate``).

A backend is one class in a module of its own (``spark_submit.py``, ``spark_connect.py``),
found by its name through the registry (:mod:`airflow_iqp.backends`). What differs between
backends is a class attribute or a method here, never a comparison of names elsewhere.

Pure Python at import: the window runtime validates and plans with these classes without
Airflow or Spark, so a runner imports the Airflow hooks and PySpark inside its methods.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from airflow_iqp._values import _flag, _name, _seconds, _set, _whole
from airflow_iqp.errors import ConfigError
from airflow_iqp.paths import check_name

if TYPE_CHECKING:
    from airflow_iqp.hooks.spark import IQPSparkHook
    from airflow_iqp.store import WindowState
    from airflow_iqp.window.batch import Batch

#: A fused tail's task starts at least this long before the window's end by default: enough
#: for Airflow to resume the deferred sensor ``tail_wait`` and then start the task after it
#: (two task starts in a row, each slower on a small machine busy with the window's
#: batches), and for the task to open its Spark session and hold its queries' static
#: schemas. A task started early waits in its process, holding a worker slot and an idle
#: session: a lead too long costs little, one too short makes the tail late for every query
#: it merges. A deployment whose tails start slower than this learns a longer lead from
#: their start-ups (:func:`~airflow_iqp.window.costs.tail_start_lead`).
TAIL_LEAD_S = 20.0


@dataclass(frozen=True, kw_only=True)
class Backend:
    """Which backend runs the batches and the final aggregation: :class:`SparkSubmit` or
    :class:`SparkConnect`. What they share:

    :param conn_id: the Airflow connection (default: ``[iqp] spark_conn_id``, or
        ``[iqp] spark_connect_conn_id`` for Spark Connect).
    :param pool: an Airflow pool whose slots are the batches the Spark cluster runs at once.
    :param weight_rule: ``"airflow_iqp.priority.EDFPriority"``, ``...LLFPriority`` or
        ``...SJFPriority``: which ready batch of the queries in the pool runs first.
    :param retries: retries of each batch and final task.
    :param fuse_tail: run the last batch inside the final task, started ``tail_lead``
        seconds before the window's end; batches ready after it starts run in it too, so
        after the window's end no task or session starts. The price is a worker slot held
        for the lead and more. None (the default): a group's (``iqp_group``) tail is fused,
        where one job then runs every member's merge with the last batch; a single query's
        (``iqp_dag``) is not.
    :param tail_lead: seconds before the window's end that the final task starts (None: the
        backend's :attr:`lead`, or longer where this query's tails took longer to start in
        its last windows, :func:`~airflow_iqp.window.costs.tail_start_lead`; 0 starts it at
        the window's end). A group's tail starts
        earlier still by twice the planned seconds of the members it rehearses, never
        before its first batch is ready (:func:`~airflow_iqp.window.readiness.tail_lead`).
    :param tail_slots: how many of the state directory's batches run at once, earliest
        deadline first (0: no limit; 1: the paper's one batch at a time).
    :param cluster: the name of the Spark cluster this query shares with others. The queries
        of one state store that name the same cluster and window length are planned
        jointly, earliest deadline first: each window's plan reads, from the store, the
        other queries registered on it (their deadlines, arrivals and cost models) and plans
        in the executor time those due earlier leave. None: planned as if alone.
    :param dispatch: seconds Airflow takes from a batch's claim to its Spark work (sensor
        resume, task start, session), added to every planned batch whose cost leaves it out:
        a ``cost_hint`` and an ``airflow-iqp calibrate`` fit. The built-in default and the
        cost history run from the claim and include it. None (the default): learned, with
        ``Cut.cost_scale``, from the batches of the last windows
        (:func:`airflow_iqp.window.costs.margins`); the backend's :attr:`first_dispatch`
        before there are any.
    """

    #: The backend's name: ``QueryConfig.backend``, and what plans, metrics and the cost
    #: history record.
    name: ClassVar[str]
    #: The default of ``tail_lead`` on this backend.
    default_tail_lead: ClassVar[float]
    #: The cost of one batch from its claim to its written partial that a query's first
    #: window is planned with, before it has a cost history: a conservative linear model,
    #: start-up and per unit, of what calibration measures on a small (2-core) machine.
    default_cost: ClassVar[Mapping[str, Any]]
    #: The same for the final aggregation of k partials, from the last batch's end to the
    #: written result.
    default_final_agg: ClassVar[Mapping[str, Any]]
    #: Whether every job starts a Spark application of its own (a JVM), so that a merge run
    #: in the last batch's job (a fused tail) saves one start-up.
    job_startup: ClassVar[bool]
    #: The share of each query's fixed cost per batch that a group's shared batch pays again
    #: for every query beyond the one with the largest (``planning.models.shared_batch_cost``):
    #: small where that cost is mostly the job's start-up, which the group pays once; whole
    #: where it is each query's own Spark jobs (planning, scheduling, the partial's commit).
    group_fixed_share: ClassVar[float]
    #: Whether every mapped batch takes a turn on the cluster (``tail_slots``). A batch whose
    #: job starts its own JVM would hold its turn through that start, so on such a backend
    #: only fused tails take turns.
    mapped_batches_take_turns: ClassVar[bool]
    #: Seconds a batch's execution_timeout allows on top of its planned cost for the
    #: backend's start-up, with room for a loaded machine.
    timeout_overhead: ClassVar[float]
    #: The ``dispatch`` a query is planned with before the learned margins have history:
    #: Airflow's part of a batch, from its claim to its Spark work (the sensor's resume on a
    #: worker, the task's start, its Spark session), added to the batches whose cost leaves
    #: it out (a hint, a calibrated fit). On a LocalExecutor with two cores that part takes
    #: up to about 3 s; erring long plans a first window's batches earlier, never later.
    first_dispatch: ClassVar[float] = 3.0
    #: The backend a query runs on unless its DAG names one.
    default_name: ClassVar[str] = "spark-submit"
    #: The backends by name, each added as its class is defined (the package's
    #: ``__init__`` imports every backend's module): the window runtime finds a backend's
    #: facts here by the name a plan records, importing no backend's runner.
    _registry: ClassVar[dict[str, type["Backend"]]] = {}

    conn_id: str | None = None
    pool: str | None = None
    weight_rule: str | None = None
    retries: int = 2
    fuse_tail: bool | None = None
    tail_lead: float | dt.timedelta | None = None
    tail_slots: int = 0
    cluster: str | None = None
    dispatch: float | dt.timedelta | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            Backend._registry[cls.name] = cls

    @staticmethod
    def registered() -> dict[str, type["Backend"]]:
        """The backends by name, the default first."""
        return dict(sorted(Backend._registry.items(), key=lambda item: item[0] != Backend.default_name))

    @staticmethod
    def named(name: Any, field: str = "backend") -> type["Backend"]:
        """The backend named ``name``; else a ConfigError naming ``field`` (the setting that
        gave the name) and listing the choices."""
        if not isinstance(name, str) or name not in Backend._registry:
            raise ConfigError(f"must be one of {', '.join(Backend.registered())}, got {name!r}", field)
        return Backend._registry[name]

    def __post_init__(self):
        if type(self) is Backend:  # the backends are its subclasses, each registered by name
            raise ConfigError(f"give {' or '.join(f'{c.__name__}()' for c in Backend.__subclasses__())}", "backend")
        _name(self.conn_id, "backend.conn_id", "an Airflow connection id")
        _name(self.pool, "backend.pool", "an Airflow pool's name")
        _name(self.weight_rule, "backend.weight_rule", "a priority weight strategy's class path")
        _whole(self.retries, "backend.retries", 0)
        if self.fuse_tail is not None:
            _flag(self.fuse_tail, "backend.fuse_tail")
        _set(self, "tail_lead", _seconds(self.tail_lead, "backend.tail_lead", optional=True))
        _whole(self.tail_slots, "backend.tail_slots", 0)
        if self.cluster is not None:  # it names a directory of the state store
            check_name(_name(self.cluster, "backend.cluster", "a cluster's name"), "backend.cluster")
        _set(self, "dispatch", _seconds(self.dispatch, "backend.dispatch", optional=True))
        if self.tail_slots and self.fuse_tail is False and not self.mapped_batches_take_turns:
            turns = " or ".join(f"{b.__name__}()" for b in Backend._registry.values() if b.mapped_batches_take_turns)
            raise ConfigError(f"takes turns among fused tails only on {self.name}: give fuse_tail=True, or use "
                              f"{turns}", "backend.tail_slots")

    def with_fuse_tail(self, default: bool) -> "Backend":
        """This backend with ``fuse_tail`` decided: ``default`` if it was not given."""
        return self if self.fuse_tail is not None else replace(self, fuse_tail=default)

    @property
    def lead(self) -> float:
        """Seconds before the window's end that a fused tail's task starts."""
        return self.default_tail_lead if self.tail_lead is None else self.tail_lead

    def query_config(self) -> dict[str, Any]:
        """This object's part of the runtime's ``QueryConfig``."""
        return {"backend": self.name, "fuse_tail": bool(self.fuse_tail), "dispatch": self.dispatch, "cluster": self.cluster}

    def task_kwargs(self) -> dict[str, Any]:
        """What every batch and final task of this backend takes."""
        out = {"retries": self.retries, "conn_id": self.conn_id, "pool": self.pool, "weight_rule": self.weight_rule}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def runner(cls, conn_id: str | None = None, conf: Mapping[str, Any] | None = None,
               **spark_kwargs: Any) -> Runner:
        """A runner of one task's Spark work on this backend, one per operator (it holds the
        running job, for ``on_kill``). Refuses, naming the argument, what the backend cannot
        honour (Spark conf on a running server)."""
        raise NotImplementedError

    @classmethod
    def calibration_runner(cls, *, master: str = "local[*]", conf: Mapping[str, Any] | None = None,
                           url: str | None = None, port: int | None = None, server_pid: int | None = None,
                           log=None) -> CalibrationRunner:
        """The runner ``airflow-iqp calibrate`` measures this backend with, outside Airflow.
        Each backend takes what concerns it: a Spark ``master`` and ``conf`` for a job of
        its own, or a server's ``url`` (else a local server on ``port``, started for the
        calibration) and its JVM's ``server_pid``. Use it as a context manager."""
        raise NotImplementedError


class Runner:
    """One task's Spark work on a backend (made by :meth:`Backend.runner`): a batch, or a
    window's final step. The operators keep what does not depend on the backend (skipping,
    retries, accounting); a runner only starts the work and stops it (:meth:`on_kill`).
    Both Spark backends run it through :class:`~airflow_iqp.hooks.spark.IQPSparkHook`."""

    def __init__(self, backend: type[Backend], conn_id: str | None, conf: Mapping[str, Any] | None = None,
                 spark_kwargs: Mapping[str, Any] | None = None) -> None:
        self.backend = backend
        self.conn_id = conn_id
        self.conf = dict(conf or {})
        self.spark_kwargs = dict(spark_kwargs or {})
        self.hook: IQPSparkHook | None = None

    def _hook(self) -> IQPSparkHook:
        from airflow_iqp.hooks.spark import IQPSparkHook

        self.hook = IQPSparkHook(self.conn_id, conf=self.conf, **self.spark_kwargs)
        return self.hook

    def run_batch(self, batch: Batch, ws: WindowState, *, slots: int, app_name: str) -> None:
        """Run one claimed batch into its partial; ``slots``: batches of the state
        directory that run at once (on a backend whose mapped batches take turns)."""
        raise NotImplementedError

    def run_final(self, ws: WindowState, *, tail: Batch | None, tail_slots: int, late: int | None,
                  app_name: str) -> None:
        """Run a window's final step: the merge; with ``tail``, the fused tail and the merge;
        with ``late``, the earlier window's late batch merged as a new revision."""
        raise NotImplementedError

    def on_kill(self) -> None:
        if self.hook is not None:
            self.hook.on_kill()


class CalibrationRunner:
    """Runs a calibration's batches and merges on a backend and measures each, end to end
    as the orchestrator sees it (:func:`airflow_iqp.spark.calibrate.calibrate`)."""

    #: The backend's name, recorded with the measurements and the fit.
    name: ClassVar[str]
    #: Whether one unrecorded batch and merge run first: a session's first call warms
    #: caches that a planned window's calls, on a server that served earlier ones, find warm.
    warm_up_first: ClassVar[bool] = False
    #: Seconds the server this runner started took to start (None: none was started).
    startup_seconds: float | None = None

    def batch(self, query: str, ws: WindowState, b: int, static) -> tuple[float, float | None]:
        """Run claimed batch ``b`` of ``ws``; its wall and CPU seconds (None: unknown)."""
        raise NotImplementedError

    def final(self, query: str, ws: WindowState) -> tuple[float, float | None]:
        """Merge the partials of ``ws``; its wall and CPU seconds (None: unknown)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the runner opened or started."""

    def __enter__(self) -> CalibrationRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
