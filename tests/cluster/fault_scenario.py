"""The fault suite's run: one cluster harness, seven one-window DAGs, the faults injected into them.

Shared by ``tests/cluster/test_faults.py`` and ``benchmarks/faults.py`` (one way to do a
thing): :func:`run_faults` starts the cluster (:func:`iqp_dev.cluster.cluster_env`), writes
the DAGs' input as it arrives, injects the process faults at the batches they are about, and
returns a :class:`Run`; :mod:`tests.cluster.fault_checks` turns it into one verdict per fault.

Two phases keep each fault's effect its own while the module stays short:

* phase 1 (Spark Connect): ``f_conn`` (faults 3, 2, 4: the triggerer, a batch's task
  process, the scheduler), then ``f_data`` (7, 8, 9: bad, republished and late units),
  ``f_empty`` (10), ``f_tight`` (11) and ``f_fail`` (12, with its cleared rerun), whose
  windows open once the triggerer is back;
* phase 2, after phase 1's runs are over: ``f_submit`` on spark-submit (faults 1 and 5:
  a driver JVM, the Spark worker) and ``f_conn2`` on Spark Connect (fault 6: the server).

Every batch pauses :data:`PAUSE_S` between writing its partial to a temporary directory and
renaming it into place (``AIRFLOW_IQP_PAUSE_BEFORE_RENAME``, the batch job's test hook): the
process faults strike a batch there, mid-batch, at the point where a lost or doubled
partial would show.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DAGS = Path(__file__).resolve().parent / "dags"
SQL = ("SELECT country, count(*) AS n, sum(amount) AS s, count(DISTINCT user_id) AS u FROM events "
       "GROUP BY country ORDER BY country NULLS FIRST")
PAUSE_S = 4.0
LEAD_S = 40.0          # from the cluster being up to phase 1's first window: DAG parsing, unpausing
PHASE2_GAP_S = 10.0    # from phase 1's last run to phase 2's first window, besides parsing


def wid(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y%m%dT%H%M%S")


def dag_specs(t0: float) -> dict[str, dict]:
    """Each DAG's window and options (the file ``IQP_FAULTS`` names, read by ``dags/iqp_faults.py``),
    for a phase that starts at ``t0`` (0: not yet: the DAG is not defined)."""
    conn = {"backend": "spark-connect", "cut": "minbatches"}
    if not t0:
        return {d: {**s, "anchor": 0} for d, s in dag_specs(1.0).items()}
    return {
        "f_conn": {**conn, "anchor": t0, "window": 100, "offset": 120, "units": 6, "retries": 3},
        # after f_conn's scheduler fault: a run created while the scheduler is down would start late
        "f_data": {**conn, "anchor": t0 + 110, "window": 60, "offset": 120, "units": 8, "retries": 3,
                   "on_bad_unit": "quarantine"},
        # a first window that is empty: its stream's columns are declared (none was recorded yet);
        # its deadline leaves room for a merge beside the phase's other faults, and ends before f_data's
        "f_empty": {"backend": "spark-connect", "anchor": t0 + 110, "window": 30, "offset": 90, "rate": 0.1,
                    "schema": "ts TIMESTAMP, user_id BIGINT, country STRING, amount DOUBLE, qty INT"},
        "f_tight": {"backend": "spark-connect", "anchor": t0 + 110, "window": 30, "offset": 3, "rate": 0.1,
                    "cost_hint": {"kind": "linear", "per_unit": 0.5, "per_batch": 60.0}},
        # batch 1 claims every unit landed when it claims: the bad one lands 34 s after batch 1's
        # input, room for a slow start of batch 1's task on a busy machine
        "f_fail": {**conn, "anchor": t0 + 110, "window": 45, "offset": 40, "units": 4, "retries": 1},
        # the Connect server's fault first; f_submit's batch 2 long after its batch 1 (faults 1 and 5)
        "f_submit": {"backend": "spark-submit", "cut": "minbatches", "anchor": t0 + 20, "window": 90,
                     "offset": 300, "units": 4, "retries": 3},
        "f_conn2": {**conn, "anchor": t0, "window": 40, "offset": 300, "units": 4, "retries": 4},
    }


PHASE1 = ("f_conn", "f_data", "f_empty", "f_tight", "f_fail")
PHASE2 = ("f_submit", "f_conn2")


# ---------------------------------------------------------------------------------- input data

def event_table(rng: random.Random, rows: int = 30, drop: str | None = None):
    import pyarrow as pa

    cols = {
        "ts": pa.array([datetime(2026, 1, 1, 0, rng.randint(0, 59)) for _ in range(rows)], pa.timestamp("us")),
        "user_id": pa.array([rng.choice([None, *range(1, 12)]) for _ in range(rows)], pa.int64()),
        "country": pa.array([rng.choice([None, "fr", "de", "us", "jp"]) for _ in range(rows)], pa.string()),
        "amount": pa.array([rng.choice([None, round(rng.uniform(-20, 500), 3)]) for _ in range(rows)], pa.float64()),
        "qty": pa.array([rng.choice([None, *range(10)]) for _ in range(rows)], pa.int32()),
    }
    cols.pop(drop, None)
    return pa.table(cols)


def parquet_bytes(table) -> bytes:
    import io

    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def publish(landing: Path, name: str, data: bytes) -> Path:
    """A writer's atomic publication: a hidden temporary name, then a rename."""
    landing.mkdir(parents=True, exist_ok=True)
    tmp = landing / f".{name}.tmp-{os.getpid()}"
    tmp.write_bytes(data)
    return tmp.rename(landing / name)


def good(rng: random.Random) -> bytes:
    return parquet_bytes(event_table(rng, rng.randint(20, 40)))


#: What lands in each DAG's window: (seconds after the window's start, unit name, kind).
#: Kinds: good; corrupt (not parquet), schema (no ``amount`` column), half (a writer died
#: half-way: the first half of a parquet file under its final name), inflight (never renamed),
#: again (a good unit published a second time, same name and bytes), late (after the last
#: claim), bad (a wrong schema that fails its batch, replaced by a good file later).
ARRIVALS: dict[str, list[tuple[float, str, str]]] = {
    "f_conn": [(t, f"part-{i:03d}.parquet", "good") for i, t in enumerate((20, 25, 50, 55, 85, 90))],
    "f_data": [(3, "part-000.parquet", "good"), (8, "part-001.parquet", "good"),
               (18, "part-002.parquet", "corrupt"), (22, "part-003.parquet", "good"),
               (30, "part-001.parquet", "again"), (33, "part-004.parquet", "schema"),
               (38, "part-005.parquet", "half"), (40, "part-009.parquet", "inflight"),
               (48, "part-006.parquet", "good"), (53, "part-007.parquet", "good"),
               (None, "part-008.parquet", "late")],
    "f_empty": [],
    "f_tight": [(5, "part-000.parquet", "good"), (15, "part-001.parquet", "good"), (25, "part-002.parquet", "good")],
    "f_fail": [(3, "part-000.parquet", "good"), (6, "part-001.parquet", "good"),
               (34, "part-002.parquet", "good"), (40, "part-003.parquet", "bad")],
    "f_submit": [(t, f"part-{i:03d}.parquet", "good") for i, t in enumerate((4, 10, 75, 80))],
    "f_conn2": [(t, f"part-{i:03d}.parquet", "good") for i, t in enumerate((4, 10, 24, 30))],
}


def writer(run: Run, dag: str, stop: threading.Event) -> None:
    """Land ``dag``'s units on time; a late unit once the window's last batch has claimed."""
    spec = run.specs[dag]
    start, landing = spec["anchor"], run.landing(dag)
    landing.mkdir(parents=True, exist_ok=True)
    rng = random.Random(dag)
    for offset, name, kind in ARRIVALS[dag]:
        if offset is None:  # late: after the last claim, before the final task looks
            ws = run.window(dag)
            while not stop.is_set() and not _last_claimed(ws):
                time.sleep(0.1)
        else:
            while not stop.is_set() and time.time() < start + offset:
                time.sleep(min(0.2, max(0.0, start + offset - time.time())))
        if stop.is_set():
            return
        if kind == "inflight":
            (landing / f".{name}.inprogress").write_bytes(good(rng)[:100])
        elif kind == "again":
            publish(landing, name, (landing / name).read_bytes())
        else:
            data = {"corrupt": lambda: rng.randbytes(900), "schema": lambda: parquet_bytes(event_table(rng, 25, "amount")),
                    "half": lambda: (b := good(rng))[: len(b) // 2], "bad": lambda: parquet_bytes(
                        event_table(rng, 25, "amount"))}.get(kind, lambda: good(rng))()
            publish(landing, name, data)
        run.published[dag].append({"name": name, "kind": kind, "at": time.time()})


def _last_claimed(ws) -> bool:
    plan = ws.doc("plan")
    if plan is None:
        return False
    last = max(b["index"] for b in plan["batches"])
    return ws.has_claim(last)


# ---------------------------------------------------------------------------------- the run

@dataclass
class Run:
    """What :func:`run_faults` saw: the DAGs' specs, their runs, what landed, what was injected."""

    data: Path
    specs: dict[str, dict]
    cluster: Any = None
    runs: dict[str, str] = field(default_factory=dict)            # dag -> run id
    final: dict[str, dict] = field(default_factory=dict)          # dag -> run JSON at its end
    tis: dict[str, list[dict]] = field(default_factory=dict)      # dag -> task instances at its end
    published: dict[str, list[dict]] = field(default_factory=dict)
    faults: dict[int, dict] = field(default_factory=dict)         # fault -> what was injected, when
    logs: dict[str, str] = field(default_factory=dict)            # dag -> failed tasks' log tails
    errors: list[str] = field(default_factory=list)               # an injection that could not happen

    #: The state store's location: a directory under ``data`` unless given (an ``s3://`` prefix).
    location: str | None = None
    #: Whether the verdicts hold each window to its deadline (no alert, no risk warning where
    #: the fault is survivable): only for a run with nothing else on the machine beside it.
    on_time: bool = True

    @property
    def state(self) -> str:
        return self.location or str(self.data / "state")

    def store(self):
        from airflow_iqp.store import open_store

        return open_store(self.state)

    def alert(self, dag: str) -> dict | None:
        """The deadline-miss record of the DAG's run, None if none was written."""
        rid = self.runs.get(dag, "").replace("/", "_").replace(":", "_")
        return self.store().get(f"{dag}/deadline_missed/{rid}.json")

    def landing(self, dag: str) -> Path:
        return self.data / dag / wid(self.specs[dag]["anchor"])

    def window(self, dag: str):
        return self.store().window(dag, wid(self.specs[dag]["anchor"]))

    def dag_id(self, dag: str) -> str:
        return f"iqp_{dag}"

    def run_id(self, dag: str) -> str:
        """The DAG's run of its window, once the scheduler created it (waiting for it the first time)."""
        if dag not in self.runs:
            self.runs[dag] = self.cluster.airflow.window_run(self.dag_id(dag), self.specs[dag]["anchor"], timeout=180)
        return self.runs[dag]


def run_faults(data: Path, *, keep: bool = False, state: str | None = None,
               spark_conf: dict[str, str] | None = None, on_time: bool = True) -> Run:
    """Start the cluster, run both phases with their faults, stop the cluster; return the Run.

    ``state``: the state store's location (default: a directory under ``data``); an
    ``s3://`` prefix needs the S3A connector's ``spark_conf``
    (:func:`iqp_dev.s3a.s3a_spark_conf`) for Spark to write the partials there.
    ``on_time``: hold each window to its deadline (:attr:`Run.on_time`)."""
    from iqp_dev.cluster import cluster_env
    from tests.cluster import fault_inject as inject

    run = Run(data=data, specs=dag_specs(0.0), location=state, on_time=on_time)
    run.published = {d: [] for d in run.specs}
    spec_file = data / "faults.json"
    env = {"IQP_FAULTS": str(spec_file), "AIRFLOW__IQP__STATE_DIR": run.state,
           "AIRFLOW_IQP_PAUSE_BEFORE_RENAME": str(PAUSE_S)}
    config = {"CORE__PARALLELISM": "8", "CORE__MAX_ACTIVE_TASKS_PER_DAG": "8",
              # A task process whose scheduler died with it is reset within a minute.
              "SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60", "SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "10"}
    dags = data / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    (dags / "iqp_faults.py").write_text((DAGS / "iqp_faults.py").read_text())
    with cluster_env(dags, extra_env=env, config=config, keep=keep, spark_conf=spark_conf) as cl:
        run.cluster = cl
        _open(run, PHASE1, time.time() + LEAD_S, spec_file)
        _phase(run, PHASE1, inject.phase1, after=inject.rerun_after_fix)
        _open(run, PHASE2, time.time() + PHASE2_GAP_S + 20, spec_file)
        _phase(run, PHASE2, inject.phase2)
    return run


def _open(run: Run, dags: tuple[str, ...], t0: float, spec_file: Path) -> None:
    """Anchor the phase's DAGs at ``t0`` (as dag_specs offsets them), write the spec the DAG
    file reads, and unpause them once parsed."""
    fresh = dag_specs(float(int(t0)))
    for dag in dags:
        run.specs[dag] = fresh[dag]
    tmp = spec_file.with_name(f".{spec_file.name}.tmp")
    tmp.write_text(json.dumps({"sql": SQL, "data": str(run.data), "dags": {d: s for d, s in run.specs.items() if s["anchor"]}}))
    tmp.rename(spec_file)
    af = run.cluster.airflow
    for dag in dags:
        af.wait_for_dag(run.dag_id(dag), timeout=120)
        af.unpause(run.dag_id(dag))


def _phase(run: Run, dags: tuple[str, ...], injector: Callable[[Run], None],
           after: Callable[[Run], None] | None = None) -> None:
    """Land the phase's input, inject its faults (in this thread), wait for its runs, then ``after``."""
    af = run.cluster.airflow
    stop = threading.Event()
    writers = [threading.Thread(target=writer, args=(run, d, stop), daemon=True) for d in dags]
    for t in writers:
        t.start()
    try:
        injector(run)
        for dag in dags:
            spec = run.specs[dag]
            left = spec["anchor"] + spec["window"] + spec["offset"] + 240 - time.time()
            run.final[dag] = af.wait_for_run(run.dag_id(dag), run.run_id(dag), timeout=max(60.0, left),
                                             expect_success=False)
            run.tis[dag] = af.task_instances(run.dag_id(dag), run.runs[dag])
            run.logs[dag] = failed_logs(run, dag)
        if after is not None:
            after(run)
    finally:
        stop.set()
        for t in writers:
            t.join(timeout=10)


def failed_logs(run: Run, dag: str) -> str:
    af = run.cluster.airflow
    out = []
    for t in af.task_instances(run.dag_id(dag), run.runs[dag]):
        if t["state"] in ("failed", "upstream_failed") or t["try_number"] > 1:
            for attempt in range(1, max(1, t["try_number"]) + 1):
                try:
                    text = af.task_log(run.dag_id(dag), run.runs[dag], t["task_id"], attempt, t["map_index"])
                except Exception as exc:  # noqa: BLE001 - diagnostics only
                    text = repr(exc)
                out.append(f"--- {t['task_id']}[{t['map_index']}] try {attempt} ---\n{text[-2500:]}")
    return "\n".join(out)

