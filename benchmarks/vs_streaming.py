"""Cost against what users would pick instead: Structured Streaming, one big batch, AvailableNow on a schedule.

Every run gets the same units, replayed at the same rate over the same window into a
fresh landing directory, and runs all of its queries at once (the paper's multi-query
mode). Runs:

* ``streaming_default``: Spark Structured Streaming, default trigger, one application
  started at the window's start;
* ``streaming_10pct``: the same with a processingTime trigger of 10 % of the window;
* ``one_batch``: ``Trigger.AvailableNow`` once, after the window's end (the landing
  directory is filled at once and the run starts at what is then the window's end:
  nothing runs during the window, so there is nothing to wait for);
* ``availablenow_scheduled``: ``Trigger.AvailableNow`` launched every SLA/3 through the
  window (with one checkpoint), and once more after its end, SLA being the 1D deadline;
* ``iqp_<f>D``: this project through Airflow (real scheduler, triggerer, LocalExecutor)
  with spark-submit, each query's deadline ``f`` times its D after the window's end;
* ``iqp_connect_<f>D``: the same on a shared Spark Connect server;
* ``iqp_dynamic_llf_<f>D``: the queries' ``iqp_group`` DAG on Spark Connect in the paper's
  dynamic mode (``MinBatches()``: δRSF and Cmax at their defaults, sized on the group's
  shared batches), one batch at a time on the cluster, the least laxity first, computed by
  the cluster's gate when each batch asks for its turn (with the group alone on the
  cluster, its own batches'; a DAG per query reads each unit ten times, and on this
  machine's two cores the plans say that cannot meet 0.2D);
* ``iqp_group_<f>D``, ``iqp_group_connect_<f>D``: the same queries as one ``iqp_group`` DAG
  whose batches they share (one job per batch for all of them, and one fused tail that runs
  the last batch and every query's merge), set up as a user would: the backend and the
  cluster, no tuning (:data:`GROUP_UNSET`).

D is a query's one-batch cost after the window's end on the same backend, as in the
paper, on the same deployment: a reference run of this project through Airflow plans the
first query's window as one batch (``mode="one_batch"``) started when the window's input
is complete (``tail_lead=0``: nothing runs before the window's end), with all units
landing at the window's end; D is that run's wall time from the last unit landing (the
bulk landing takes a second or so) to the result. Other queries' D is their calibrated one-batch cost (``airflow-iqp calibrate``:
one batch of all units plus one merge; the fits are also what the DAGs plan with) plus
what the reference run measured on top of its own calibrated cost (Airflow's task start,
the session or JVM start). With several queries the deadlines are staggered as in the
paper's multi-query experiment (section 7.4): the i-th query's deadline is f times the
sum of the first i queries' D after the window's end.

The ``iqp_*`` runs fuse the last batch into the final task (``fuse_tail=True``), which
starts ``tail_lead`` seconds before the window's end (staggered across the queries:
:func:`queue_leads`) and runs the batches ready after it starts on its own session; their
planner adds :data:`PLAN_DISPATCH_S` per batch, and those batches run one at a time across
the queries, earliest deadline first (``tail_slots=1``, the paper's one batch at a time).
With several queries each DAG plans its window jointly with the queries due before it
(``shares``: each in the executor time the earlier-due ones leave).

Recorded per run: ``cpu_seconds`` (the Spark applications' whole process trees, by
rusage; for Airflow runs every task process's own CPU and the children it reaped, plus
the server's CPU over the run), ``wall_after_window`` (window end to the last result),
``peak_rss_mb`` (the Spark processes: JVMs and their Python children, the server when
used; Airflow's own components are not counted), ``deadline_met`` (every query by its
deadline; baselines against the 1D spark-submit deadline), ``result_correct`` (every
result equals the DuckDB reference).

    python benchmarks/vs_streaming.py --quick [--json]   # CQ3, SF 0.5, 100 units at 1 unit/s
    python benchmarks/vs_streaming.py                    # 10 queries, SF 1, 300 units (long)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_iqp.backends import SparkConnect, SparkSubmit  # noqa: E402
from airflow_iqp.inputs.profiles import arrival_offsets  # noqa: E402
from airflow_iqp.inputs.replay import publish_unit, replay, source_units  # noqa: E402
from airflow_iqp.inputs.tpch import generate  # noqa: E402
from airflow_iqp.planning.models import cost_model_from_dict, final_agg_from_dict  # noqa: E402
from airflow_iqp.spark import connect  # noqa: E402
from airflow_iqp.spark.calibrate import calibrate  # noqa: E402
from airflow_iqp.query.catalogue import get_query  # noqa: E402
from airflow_iqp.spark.submit import run_submit, submit_args  # noqa: E402
from airflow_iqp.store import open_store  # noqa: E402
from airflow_iqp.store.files import read_json  # noqa: E402
from airflow_iqp.window.accounting import window_task_cpu  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
#: Both presets run this project as a user would set it up (the ``iqp_group`` DAG: the
#: backend and the cluster, no tuning; a group of one query in quick mode); the tuned
#: DAG-per-query runs (``iqp_1D``, ``iqp_connect_0.2D``, ...) remain for ``--runs``.
QUICK = {"queries": ["cq3"], "scale": 0.5, "units": 100,
         "runs": ["streaming_default", "one_batch", "iqp_group_1D", "iqp_group_connect_0.2D"]}
FULL = {"queries": ["cq1", "cq2", "cq3", "cq4", "q1", "q4", "q6", "q9", "q10", "q14"], "scale": 1.0, "units": 300,
        "runs": ["streaming_default", "streaming_10pct", "one_batch", "availablenow_scheduled", "iqp_group_1D",
                 "iqp_group_connect_0.2D", "iqp_group_connect_0.1D", "iqp_dynamic_llf_0.2D"]}
STREAM_CONF = {"spark.sql.streaming.numRecentProgressUpdates": "100000"}
#: The one-batch reference run's window: its length only has to cover planning.
REFERENCE_WINDOW_S = 15.0
#: When the reference run's units are published, in seconds after its window opens: well
#: before its end, since its final task starts at the end whatever has landed. Copying all
#: the units at the end once took 6.5 s on the busy machine: the spark-submit final task's
#: JVM started alongside the copy, and D, counted from the last unit's landing, came out
#: 7.5 s against 11.4-12.0 s in the quick runs before it.
REFERENCE_PUBLISH_S = 3.0
#: Seconds from a batch's claim to its Spark work through this Airflow (sensor resume, task
#: start, session), which the calibrated costs leave out; measured in the quick runs here
#: (claim to end of task, less the Spark step's own wall time), given to the DAGs' planner.
DISPATCH_S = {"spark-submit": 2.0, "spark-connect": 1.7}
#: What the DAGs plan with. On Spark Connect the final tasks start 30 s and more before the
#: window's end (:func:`queue_leads`) and run every batch ready after that on their open
#: sessions, where no batch pays a dispatch; only early batches are mapped tasks, with
#: slack to spare. Planned at 1.7 s each, the nine queries' batches near the end did not
#: fit their deadlines in the joint plan at all.
PLAN_DISPATCH_S = {"spark-submit": DISPATCH_S["spark-submit"], "spark-connect": 0.0}
#: Each query's final task (its fused tail) starts this long before the window's end, plus
#: :data:`LEAD_STEP_S` for each query due after it: the earliest-due starts first, and no two
#: start together. On spark-submit each start is a JVM (about 10 s, 15-20 CPU s here), so all
#: nine are up and idle by the window's end rather than starting beside other queries' last
#: batches. On Spark Connect each start is an Airflow task and a session (2-3 CPU s); the
#: batches ready after it run in it (``split_tail``), one at a time across the queries, so
#: the starts come before the joint plans' big batches, from the window's second minute.
LEAD_BASE_S = {"spark-submit": 20.0, "spark-connect": 100.0}
LEAD_STEP_S = {"spark-submit": 10.0, "spark-connect": 10.0}
#: Planned costs over calibrated ones (``QueryConfig.cost_scale``). Nine queries' batches on one
#: warm Connect server run up to about twice their calibrated cost, with Airflow and the other
#: tasks on the same two cores; planning at 2.0 keeps the batches before the window's end
#: done by it (docs/decisions.md, "Several queries on one Spark Connect server at 0.2D").
#: The planned tails and merges are then pessimistic too, and the tight plans say they are
#: infeasible: they are the plans that finish earliest under that pessimism.
COST_SCALE = {"spark-submit": 1.0, "spark-connect": 2.0}
#: Airflow settings of the Spark Connect runs: Airflow's default for the scheduler's idle
#: loop (the benchmark's 0.2 s takes 0.2-0.25 of a core beside the one Spark server on two
#: cores). Their final tasks start 100 s and more before the window's end, so a slower
#: dispatch costs them nothing. The reference run that measures D keeps the quick loop: it
#: dispatches its one batch after the window's end, and a slower loop there would only make
#: D, and every deadline, later.
CONNECT_AIRFLOW = {"SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1.0"}
#: The settings a group run leaves to the provider's defaults and to what it learns: its DAG
#: names the backend and the cluster only.
GROUP_UNSET = ("IQP_MARGIN", "IQP_FUSE_TAIL", "IQP_DISPATCH", "IQP_TAIL_SLOTS", "IQP_COST_SCALE", "IQP_SHARES",
               "IQP_TAIL_LEAD")
#: A dynamic-mode run's settings (``iqp_dynamic_llf_<f>D``): MinBatches with their defaults,
#: one batch at a time on the cluster (the paper's executor), least laxity first at the
#: gate, and each query's last batch run in its final task.
DYNAMIC_SET = {"IQP_MODE": "dynamic", "IQP_TAIL_SLOTS": "1", "IQP_FUSE_TAIL": "1"}
#: The least warm-up of a fresh server (:func:`warm_server`), in seconds of its work.
WARMUP_MIN_S = 60.0
#: The benchmark's Spark Connect server's driver memory (its JVM heap). The server's
#: resident memory is its heap, which the JVM commits in full under this load, plus about
#: 570 MB; at spark-submit's default, 1g, as the streaming application has, the two
#: peak within tens of MB of each other. The heap holds a shared batch's broadcast hash
#: tables for every query of the group at once, which depends on the queries' plans as
#: much as on the batch's units: 512m did not hold the ten queries' first batch at 0.2D
#: once the server had done the warm-up and calibration; 768m ran every shared batch as
#: fast as 1g (benchmarks/server_memory.py; docs/decisions.md). ``--server-memory`` sets another.
SERVER_MEMORY = "768m"
#: What the preparation measures, kept for ``--reuse-prep``.
PREP_KEYS = ("D", "D_calibrated", "overhead", "reference")


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class RssSampler:
    """Peak summed RSS of the Spark processes, sampled every 0.25 s: every ``java`` process
    and every process below one, each counted once.

    A child that runs its JVM's binary under another name is not counted: it is the JVM
    starting a command (Hadoop's local file system runs ``chmod`` on each file and directory
    a task writes with permissions), caught between its fork and its exec. Java starts
    commands by ``posix_spawn``, whose child shares the JVM's memory until it execs, so its
    RSS is the JVM's own and adding it would count the JVM twice. Read in the middle of its
    exec, such a child can show its old name with another executable, or none; so neither,
    nor a child whose memory reads as the JVM's own, is counted (:func:`counted_child`).
    """

    def __init__(self, exclude: set[int] = frozenset()):
        self.exclude, self.peak, self._stop = set(exclude), 0.0, threading.Event()
        self.at_peak: list[dict] = []  #: the processes of the peak's sample, largest first (:func:`described`)
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            got = self.sample()
            total = sum(got.values()) / 2**20
            if total > self.peak:
                self.peak, self.at_peak = total, described(got)
            self._stop.wait(0.25)

    def sample(self) -> dict[int, int]:
        """{pid: RSS bytes} of the processes counted now (see the class)."""
        import psutil

        rss = {}
        for p in psutil.process_iter(["name", "pid", "exe"]):
            if "java" not in (p.info["name"] or "") or p.info["pid"] in self.exclude:
                continue
            try:
                below = p.children(recursive=True)
            except psutil.Error:
                below = []
            try:
                jvm = p.memory_info()
                rss[p.pid] = jvm.rss
            except psutil.Error:  # gone since the listing
                continue
            for q in below:
                try:
                    if q.pid not in rss:
                        name, exe, own = q.name(), q.exe(), q.memory_info()
                        if counted_child(name, exe, own, p.info["exe"], jvm):
                            rss[q.pid] = own.rss
                except psutil.Error:  # gone since the listing
                    pass
        return rss

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


#: A JVM's child whose resident and virtual sizes are both this close to the JVM's (as a
#: fraction) shares the JVM's memory: the JVM's pages move a little between the two reads.
SHARED_MEMORY_TOLERANCE = 0.02


def counted_child(name: str, exe: str, mem, jvm_exe: str, jvm_mem) -> bool:
    """Whether a process below a JVM counts towards the peak (:class:`RssSampler`); ``mem`` and
    ``jvm_mem`` are psutil's ``memory_info()`` (``rss``, ``vms``). A JVM of its own (``java``
    in its name), or another program (a Python driver or worker), counts. Not a child that
    runs the JVM's binary, or whose binary could not be read (psutil gives ``""``), or whose
    resident and virtual sizes are the JVM's (within :data:`SHARED_MEMORY_TOLERANCE`): each
    is the JVM starting a command, caught before or during its exec, while it still shares
    the JVM's memory."""
    shared = all(abs(getattr(mem, k) - getattr(jvm_mem, k)) <= SHARED_MEMORY_TOLERANCE * getattr(jvm_mem, k)
                 for k in ("rss", "vms"))
    if shared:
        return False
    return "java" in name or (bool(exe) and exe != jvm_exe)


def described(sample: dict[int, int]) -> list[dict]:
    """``[{"pid", "name", "what", "rss_mb"}]`` of an :class:`RssSampler` sample, largest first:
    ``what`` is a Spark application's ``--name``, else the script or class a process runs."""
    import psutil

    out = []
    for pid, rss in sorted(sample.items(), key=lambda kv: -kv[1]):
        try:
            proc = psutil.Process(pid)
            name, cmd = proc.name(), proc.cmdline()
        except psutil.Error:  # gone since the sample
            name, cmd = "?", []
        what = next((cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == "--name"), None)
        out.append({"pid": pid, "name": name, "what": what or (Path(cmd[-1]).name if cmd else ""),
                    "rss_mb": round(rss / 2**20, 1)})
    return out


# ------------------------------------------------------------------------------------------ results


def check_results(out_of: dict, refs: dict) -> dict:
    """{query: bool}: each result directory's rows equal the DuckDB reference."""
    import pyarrow.parquet as pq

    from tests.support.reference import assert_same_rows

    ok = {}
    for q, path in out_of.items():
        try:
            t = pq.read_table(str(path))
            got = [tuple(r.values()) for r in t.to_pylist()]
            assert_same_rows(got, refs[q], ordered=get_query(q).ordered, label=q)
            ok[q] = True
        except Exception as exc:  # noqa: BLE001 - a wrong or missing result is a finding, not a crash
            say(f"{q}: result differs from the reference: {str(exc)[:300]}")
            ok[q] = False
    return ok


def summarise(name, cpu, window_end, finished: dict, deadlines: dict, rss: RssSampler, correct: dict,
              **extra) -> dict:
    last = max(finished.values()) if finished and len(finished) == len(deadlines) else None
    return {"run": name, "cpu_seconds": round(cpu, 2),
            "wall_after_window": None if last is None else round(last - window_end, 2),
            "peak_rss_mb": round(rss.peak, 1), "peak_rss_processes": rss.at_peak,
            "deadline_met": bool(last is not None and all(finished.get(q, 1e18) <= d for q, d in deadlines.items())),
            "result_correct": len(correct) == len(deadlines) and all(correct.values()),  # a missing result is not
            "per_query": {q: {"after_window": None if q not in finished else round(finished[q] - window_end, 2),
                              "deadline_after_window": round(deadlines[q] - window_end, 2),
                              "correct": correct.get(q, False)} for q in deadlines},
            **extra}


# ------------------------------------------------------------------------------------ Spark baselines


def app_argv(ctx, run_dir: Path, landing: Path, name: str, *extra: str) -> list[str]:
    return submit_args(str(ROOT / "benchmarks" / "streaming_app.py"),
                       ["--queries", ",".join(ctx["queries"]), "--landing", str(landing), "--static", ctx["static"],
                        "--out", str(run_dir / "out"), "--checkpoint", str(run_dir / "ckpt"), "--name", name, *extra],
                       conf=STREAM_CONF, name=f"iqp-bench-{name}")


def run_app(argv, env) -> dict:
    res = run_submit(argv, env=env, timeout=7200)
    if res.returncode != 0:
        raise RuntimeError(f"{argv[-1]} failed (exit {res.returncode}):\n{res.tail(60)}")
    return {"cpu": res.cpu_seconds, "wall": res.wall_seconds}


#: The last unit lands this long before the window's end, not on it: a unit landing with the
#: window's end races the claims made then (a fused tail's, the group's last batch), and
#: one landing after it is late data, left out of the result, by the provider's rules.
LAST_UNIT_EARLY_S = 0.5


def window_arrivals(ctx, window: float) -> list[float]:
    """The window's units' landing times (s after its start): evenly through the window, the
    last :data:`LAST_UNIT_EARLY_S` before its end."""
    return [min(a, window - LAST_UNIT_EARLY_S)
            for a in arrival_offsets("fixed", ctx["rate"], ctx["units"], window)]


def replay_thread(ctx, landing: Path) -> tuple[threading.Thread, float]:
    offsets = window_arrivals(ctx, ctx["window"])
    t0 = time.time()
    th = threading.Thread(target=replay, args=(ctx["data"] / "units", landing, offsets), daemon=True)
    th.start()
    return th, t0


def run_streaming(ctx, name: str, trigger: str) -> dict:
    run_dir = ctx["work"] / name
    landing = run_dir / "landing"
    landing.mkdir(parents=True)
    env = {**os.environ, "IQP_BENCH_SOURCE_UNITS": str(ctx["data"] / "units")}
    argv = app_argv(ctx, run_dir, landing, name, "--trigger", trigger, "--units", str(ctx["units"]))
    box = {}
    with RssSampler(ctx["server_pids"]) as rss:
        app = threading.Thread(target=lambda: box.update(run_app(argv, env)))
        th, t0 = replay_thread(ctx, landing)
        app.start()
        th.join()
        app.join()
    window_end = t0 + ctx["window"]
    done = read_json(run_dir / "out" / f"{name}.json")
    correct = check_results({q: run_dir / "out" / q / "result" for q in ctx["queries"]}, ctx["refs"])
    return summarise(name, box["cpu"], window_end, done["finished"], _deadlines(ctx, window_end, 1.0, "spark-submit"),
                     rss, correct, app_wall_seconds=round(box["wall"], 2),
                     note="two-stream queries join inside each micro-batch (foreachBatch)")


def run_one_batch(ctx) -> dict:
    name = "one_batch"
    run_dir = ctx["work"] / name
    landing = run_dir / "landing"
    for u in source_units(ctx["data"] / "units"):
        publish_unit(u, landing)
    window_end = time.time()
    with RssSampler(ctx["server_pids"]) as rss:
        box = run_app(app_argv(ctx, run_dir, landing, name, "--available-now", "--final"), dict(os.environ))
    done = read_json(run_dir / "out" / f"{name}.json")
    correct = check_results({q: run_dir / "out" / q / "result" for q in ctx["queries"]}, ctx["refs"])
    return summarise(name, box["cpu"], window_end, done["finished"], _deadlines(ctx, window_end, 1.0, "spark-submit"),
                     rss, correct, app_wall_seconds=round(box["wall"], 2))


def run_scheduled(ctx) -> dict:
    name = "availablenow_scheduled"
    run_dir = ctx["work"] / name
    landing = run_dir / "landing"
    landing.mkdir(parents=True)
    sla = min(ctx["D"]["spark-submit"].values())
    every = sla / 3
    cpu, launches = 0.0, 0
    with RssSampler(ctx["server_pids"]) as rss:
        th, t0 = replay_thread(ctx, landing)
        window_end = t0 + ctx["window"]
        next_at = t0 + every
        while True:
            time.sleep(max(0.0, next_at - time.time()))
            last = time.time() >= window_end
            if last:
                th.join()
            extra = ("--final",) if last else ()
            cpu += run_app(app_argv(ctx, run_dir, landing, name, "--available-now", *extra), dict(os.environ))["cpu"]
            launches += 1
            if last:
                break
            next_at = max(next_at + every, time.time())
            if next_at > window_end:
                next_at = window_end
    done = read_json(run_dir / "out" / f"{name}.json")
    correct = check_results({q: run_dir / "out" / q / "result" for q in ctx["queries"]}, ctx["refs"])
    return summarise(name, cpu, window_end, done["finished"], _deadlines(ctx, window_end, 1.0, "spark-submit"),
                     rss, correct, launches=launches, every_seconds=round(every, 1))


# ---------------------------------------------------------------------------------------- Airflow


def deadline_offsets(queries: list[str], d: dict, frac: float) -> dict:
    """Each query's deadline, seconds after the window's end: staggered as in the paper's
    multi-query experiment, ``frac`` times the sum of D over the queries up to it."""
    out, total = {}, 0.0
    for q in queries:
        total += d[q]
        out[q] = frac * total
    return out


def queue_leads(offsets: dict, backend: str) -> dict:
    """Each query's ``tail_lead``: :data:`LEAD_BASE_S`, plus :data:`LEAD_STEP_S` per query due after it."""
    order = sorted(offsets, key=offsets.get)
    n = len(order)
    return {q: LEAD_BASE_S[backend] + LEAD_STEP_S[backend] * (n - 1 - i) for i, q in enumerate(order)}


def _deadlines(ctx, window_end: float, frac: float, backend: str) -> dict:
    return {q: window_end + off for q, off in deadline_offsets(ctx["queries"], ctx["D"][backend], frac).items()}


def iqp_env(ctx, backend: str) -> dict:
    """The settings every benchmark DAG of ``benchmarks/dags/iqp_bench.py`` shares on ``backend``."""
    return {"IQP_BACKEND": backend, "IQP_STATIC": ctx["static"], "IQP_UNITS": str(ctx["units"]),
            "IQP_MARGIN": str(ctx["margin"][backend]), "IQP_FUSE_TAIL": "1",
            "IQP_DISPATCH": str(PLAN_DISPATCH_S[backend]), "IQP_TAIL_SLOTS": "1",
            "IQP_COST_SCALE": str(ctx.get("cost_scale", COST_SCALE)[backend]),
            "AIRFLOW__IQP__POLL_INTERVAL": "0.5",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
            "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps(
                {"conn_type": "spark_connect", "host": "127.0.0.1", "port": ctx["port"]})}


def airflow_config(backend: str, reference: bool) -> dict:
    """Airflow settings of a run: :data:`CONNECT_AIRFLOW` on Spark Connect, except for a reference run."""
    config = {"CORE__PARALLELISM": "32", "SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2"}
    if backend == "spark-connect" and not reference:
        config.update(CONNECT_AIRFLOW)
    return config


def start_replay(ctx, landing: Path, arrivals: list[float]) -> tuple[threading.Thread, dict]:
    """Publish the window's units at ``arrivals`` (seconds from now) in a thread; the dict it
    fills is when each unit landed (Unix seconds), by the harness's own clock: the provider's
    arrival times are when it first listed a unit, which is later when nothing lists the
    landing directory until the window's end."""
    landed: dict = {}
    th = threading.Thread(target=replay, args=(ctx["data"] / "units", landing, arrivals), daemon=True,
                          kwargs={"on_publish": lambda _i, path, _at: landed.__setitem__(path.name, time.time())})
    th.start()
    return th, landed


def window_outcome(windows: dict, window_start: float, window_end: float, landed: dict) -> dict:
    """What the final tasks of one window reported: ``windows`` is ``{query: its window's state}``
    (:class:`~airflow_iqp.store.WindowState`)."""
    out = {"finished": {}, "task_cpu": 0.0, "results": {}, "batches": {}, "reports": {}, "last_unit": {},
           "last_unit_seen": {}}
    for q, ws in windows.items():
        report = ws.doc("report")
        if report:
            out["reports"][q] = report
            out["finished"][q] = report["finished_ts"]
            out["task_cpu"] += report["task_cpu"]["cpu_seconds"]
            out["results"][q] = report["result"]
            out["batches"][q] = [b["claimed_units"] for b in report["batches"]]
        if landed:  # when the window's last unit really landed
            out["last_unit"][q] = round(max(landed.values()) - window_end, 2)
        arrivals = ws.doc("arrivals")
        if arrivals is not None:  # when the provider first listed it
            offsets = arrivals["offsets"]
            out["last_unit_seen"][q] = round(window_start + max(offsets) - window_end, 2)
    return out


def run_iqp(ctx, name: str, backend: str, frac: float, *, reference: bool = False, group: bool = False,
            dynamic: bool = False) -> dict:
    """One run of this project through Airflow; a ``reference`` run is the one-batch run that measures D;
    a ``group`` run is one ``iqp_group`` DAG whose batches every query shares; a ``dynamic`` run
    is that group DAG in the paper's dynamic mode (:data:`DYNAMIC_SET`)."""
    from iqp_dev.local_airflow import airflow_env

    run_dir = ctx["work"] / name
    landing, state = run_dir / "landing", run_dir / "state"
    landing.mkdir(parents=True)
    state.mkdir(parents=True)
    shutil.copy2(ctx["history"], state / "cost_history.jsonl")  # the calibrated fits
    queries = ctx["queries"][:1] if reference else ctx["queries"]
    window = REFERENCE_WINDOW_S if reference else ctx["window"]
    if reference:  # every unit has landed by the window's end; the deadline does not bind
        offsets = {queries[0]: 600.0}
        arrivals = [REFERENCE_PUBLISH_S] * ctx["units"]
    else:
        offsets = deadline_offsets(queries, ctx["D"][backend], frac)
        arrivals = window_arrivals(ctx, window)
    anchor = (int(time.time()) // 5) * 5 + 60  # the window opens once Airflow is up
    iso = lambda ts: datetime.fromtimestamp(ts, timezone.utc).isoformat()  # noqa: E731
    env = {**iqp_env(ctx, backend), "IQP_QUERIES": ",".join(queries), "IQP_LANDING": str(landing),
           "IQP_WINDOW_S": str(window), "IQP_ANCHOR": iso(anchor), "IQP_END": iso(anchor + 1),
           "IQP_DEADLINES": json.dumps(offsets), "IQP_SHARES": "0" if reference else "1",
           "IQP_TAIL_LEAD": json.dumps({queries[0]: 0.0} if reference else queue_leads(offsets, backend)),
           **({"IQP_MODE": "one_batch"} if reference else {}),
           "AIRFLOW__IQP__STATE_DIR": str(state)}
    shared = group or dynamic  # a dynamic run is the group's DAG in dynamic mode
    if shared:  # no tuning: the backend and the cluster, every other setting the provider's default
        for knob in GROUP_UNSET:
            env.pop(knob, None)
        env.update(IQP_CLUSTER="bench", IQP_GROUP="1", **(DYNAMIC_SET if dynamic else {}))
    dag_ids = ["iqp_bench_group"] if shared else [f"bench_{q}" for q in queries]
    server = ctx["server"] if backend == "spark-connect" else None
    exclude = set() if server else ctx["server_pids"]
    with airflow_env(ROOT / "benchmarks" / "dags", extra_env=env, config=airflow_config(backend, reference)) as af:
        for d in dag_ids:
            af.wait_for_dag(d)
            af.unpause(d)
        time.sleep(max(0.0, anchor - time.time()))
        server_cpu0 = connect.server_cpu_seconds(server["pid"]) if server else 0.0
        with RssSampler(exclude) as rss:
            th, landed = start_replay(ctx, landing, arrivals)
            window_end = anchor + window
            runs = {}
            for d in dag_ids:
                runs[d] = af.window_run(d, anchor)
            failed = {}
            for d, run_id in runs.items():
                run = af.wait_for_run(d, run_id, timeout=window + 3600, expect_success=False)
                if run["state"] != "success":
                    failed[d] = failure_detail(af, d, run_id)
                    say(f"{d} {run['state']}: {failed[d][-3000:]}")
            th.join()
        server_cpu = (connect.server_cpu_seconds(server["pid"]) - server_cpu0) if server else 0.0
    wid = datetime.fromtimestamp(anchor, timezone.utc).strftime("%Y%m%dT%H%M%S")
    got = window_outcome({q: open_store(state).window(q, wid) for q in queries}, anchor, window_end, landed)
    if shared:  # the shared batches' tasks recorded their CPU with the group's window
        got["task_cpu"] += window_task_cpu(open_store(state).window("bench_group", wid))["cpu_seconds"]
    correct = check_results(got["results"], ctx["refs"])
    deadlines = {q: window_end + offsets[q] for q in queries}
    return summarise(name, got["task_cpu"] + server_cpu, window_end, got["finished"], deadlines, rss, correct,
                     task_cpu_seconds=round(got["task_cpu"], 2), server_cpu_seconds=round(server_cpu, 2),
                     batches=got["batches"], last_unit_after_window=got["last_unit"],
                     last_unit_seen_after_window=got["last_unit_seen"],
                     **({"failed": failed} if failed else {}))


def failure_detail(af, dag_id: str, run_id: str) -> str:
    """A failed run's task states and the end of each failed task's log."""
    out = af.ti_summary(dag_id, run_id)
    for ti in af.task_instances(dag_id, run_id):
        if ti["state"] == "failed":
            log = af.task_log(dag_id, run_id, ti["task_id"], max(1, ti.get("try_number") or 1), ti["map_index"])
            out += "\n" + log[-3000:]
    return out


# -------------------------------------------------------------------------------------------- main


def prepare(ctx) -> None:
    """Data, references, the server, and each query's calibrated fits on both backends (D)."""
    prepare_data(ctx)
    start_server(ctx)
    hist = ctx["work"] / "calibration"
    n = ctx["units"]
    saved = RESULTS / "tmp" / f"prep-sf{ctx['scale']}-n{n}-{'-'.join(ctx['queries'])}"
    if ctx.get("reuse_prep") and (saved / "prep.json").is_file():
        # Iterating on the runs: the calibration and the reference (D) runs of an earlier
        # invocation on the same data and queries (the meta says so: prep_reused).
        shutil.copytree(saved / "calibration", hist)
        ctx["history"] = hist / "cost_history.jsonl"
        ctx.update(read_json(saved / "prep.json"))
        ctx["prep_reused"] = str(saved)
        say(f"reusing the calibration and D of {saved}")
        return
    calibrate_queries(ctx, ("spark-submit", "spark-connect"), hist)
    ctx["D"], ctx["D_calibrated"], ctx["overhead"], ctx["reference"] = {}, {}, {}, {}
    for backend in ("spark-submit", "spark-connect"):
        ctx["D_calibrated"][backend], ctx["overhead"][backend] = calibrated_one_batch(ctx, backend)
        # D on the deployment: the one-batch reference run of the first query, through Airflow.
        ref = run_iqp(ctx, f"reference_{backend}", backend, 1.0, reference=True)
        q0 = ctx["queries"][0]
        if ref["per_query"][q0]["after_window"] is None or not ref["result_correct"]:
            raise RuntimeError(f"the one-batch reference run on {backend} failed: {json.dumps(ref)[:2000]}")
        measured = one_batch_seconds(ref, q0)
        extra = measured - ctx["D_calibrated"][backend][q0]
        ctx["D"][backend] = {q: v + extra for q, v in ctx["D_calibrated"][backend].items()}
        ctx["reference"][backend] = {**ref, "deployment_extra_seconds": round(extra, 2)}
        say(f"{backend}: one batch after the window's end through Airflow took {measured:.1f} s "
            f"({extra:+.1f} s on the calibrated {ctx['D_calibrated'][backend][q0]:.1f} s)")
    say(f"D: {json.dumps({b: {q: round(v, 1) for q, v in d.items()} for b, d in ctx['D'].items()})}")
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(hist, saved / "calibration")
    (saved / "prep.json").write_text(json.dumps({k: ctx[k] for k in PREP_KEYS}, indent=2) + "\n")


def prepare_data(ctx) -> None:
    """The window's units (generated once per scale and unit count) and each query's DuckDB result."""
    from tests.support.reference import duckdb_reference

    data = ctx["data"]
    if not (data / "units").is_dir():
        say(f"generating SF {ctx['scale']} in {ctx['units']} units")
        generate(ctx["scale"], ctx["units"], data, overwrite=True)
    units = source_units(data / "units")
    ctx["static"] = str(data / "static")
    ctx["refs"] = {q: duckdb_reference(q, units, data / "static")[1] for q in ctx["queries"]}


def start_server(ctx) -> None:
    """The benchmark's Spark Connect server, started and warmed (:func:`warm_server`)."""
    t0 = time.perf_counter()
    ctx.setdefault("server_memory", SERVER_MEMORY)
    ctx["server"] = connect.start_server(ctx["port"], base=ctx["work"] / "connect", driver_memory=ctx["server_memory"])
    ctx["server_startup_seconds"] = round(time.perf_counter() - t0, 1)
    ctx["server_pids"] = {ctx["server"]["pid"]}
    say(f"Spark Connect server up in {ctx['server_startup_seconds']} s")
    warm_server(ctx)  # before the calibration and D, which are a warm server's


def calibrate_queries(ctx, backends, hist: Path, *, few_sizes: bool | None = None,
                      sizes: list[int] | None = None) -> None:
    """Each query's calibrated fits on ``backends``, in ``hist`` (what the DAGs plan with).

    On Connect: ``sizes`` if given; else ``few_sizes`` (default: with several queries)
    calibrates four batch sizes spanning the window, to keep the preparation of many
    queries within its time; otherwise the default sizes (1, 2, 5, ... 50, rest)."""
    n = ctx["units"]
    if few_sizes is None:
        few_sizes = len(ctx["queries"]) > 1
    for q in ctx["queries"]:
        if SparkSubmit.name in backends:
            with SparkSubmit.calibration_runner() as runner:
                calibrate(q, ctx["data"], runner, state_dir=hist, sizes=[1, n - 1], final_counts=[1, 2])
        if SparkConnect.name in backends:
            few = [1, 10, n // 3, n - 11 - n // 3] if few_sizes and not sizes else None
            with SparkConnect.calibration_runner(url=ctx["server"]["url"], server_pid=ctx["server"]["pid"]) as runner:
                calibrate(q, ctx["data"], runner, state_dir=hist, sizes=sizes or few,
                          final_counts=None if few is None else [1, 2, 4])
    ctx["history"] = hist / "cost_history.jsonl"


def calibrated_one_batch(ctx, backend: str) -> tuple[dict, dict]:
    """Per query: the calibrated cost of one batch of the whole window plus its merge, and the fit's
    per-batch overhead."""
    cost_of, overhead = {}, {}
    hist = ctx["history"].parent
    for q in ctx["queries"]:
        fit = open_store(hist).cost_history(q, "fit", backend)[-1]
        cost, agg = cost_model_from_dict(fit["cost"]), final_agg_from_dict(fit["final_agg"])
        cost_of[q] = cost.cost(ctx["units"]) + agg.cost(1)
        overhead[q] = fit["overhead_seconds"]
    return cost_of, overhead


def one_batch_seconds(ref: dict, q: str) -> float:
    """A one-batch reference run's D: from the window's end to the result, or from the moment
    its last unit landed if the copy ran past the window's end (the harness's own clock)."""
    return ref["per_query"][q]["after_window"] - max(0.0, ref["last_unit_after_window"].get(q, 0.0))


def warm_server(ctx) -> None:
    """Warm the server's JVM as earlier windows would have (``calibrate.warm_up``): every
    query over the whole window, twice and for at least :data:`WARMUP_MIN_S`, before the
    calibration. Reported with the start-up,
    as paid once per deployment, and not counted in a run (a fresh server ran q4's first
    224 units 3.4x slower than its third time)."""
    from airflow_iqp.spark.calibrate import warm_up

    t0 = time.perf_counter()
    with SparkConnect.calibration_runner(url=ctx["server"]["url"], server_pid=ctx["server"]["pid"]) as runner:
        out = warm_up(runner, ctx["queries"], ctx["data"], rounds=2)
        cpu, rounds = out["cpu_seconds"], out["rounds"]
        # At least WARMUP_MIN_S of it: the quick mode's two rounds (one query, 100 small units)
        # took 6.9 s, and its last batch and merge then took 0.78 s after the window's end, where
        # the full mode's first query, after 67 s of warm-up, took 0.36 s.
        while time.perf_counter() - t0 < WARMUP_MIN_S:
            more = warm_up(runner, ctx["queries"], ctx["data"], rounds=1)
            cpu, rounds = cpu + more["cpu_seconds"], rounds + more["rounds"]
    ctx["server_warmup"] = {"wall_seconds": round(time.perf_counter() - t0, 1),
                            "cpu_seconds": round(cpu, 1), "rounds": rounds}
    say(f"Spark Connect server warmed in {ctx['server_warmup']['wall_seconds']} s")


def markdown(report: dict) -> str:
    meta, runs = report["meta"], report["runs"]
    base = runs.get("one_batch", {}).get("cpu_seconds")
    lines = [f"# Against Structured Streaming and one big batch ({'quick' if meta['quick'] else 'full'})", "",
             f"{', '.join(meta['queries'])} on SF {meta['scale']} in {meta['units']} units at {meta['rate']} unit/s "
             f"(a {meta['window']:.0f} s window), all queries of a run at once, on {meta['machine']}. "
             f"D (s, one batch after the window's end through Airflow; calibrated Spark cost in brackets): "
             f"spark-submit {_ds(meta, 'spark-submit')}; Spark Connect {_ds(meta, 'spark-connect')}. "
             f"Spark Connect per-batch overhead (calibrated): "
             f"{', '.join(f'{q} {v:.2f} s' for q, v in meta['overhead']['spark-connect'].items())}; "
             f"server start-up {meta['server_startup_seconds']} s"
             + (f" and warm-up {meta['server_warmup']['wall_seconds']} s ({meta['server_warmup']['cpu_seconds']} CPU s: "
                f"every query over the window, twice)" if meta.get("server_warmup") else "")
             + ", paid once per deployment and not counted below.",
             "", "| run | CPU s | x one_batch | wall after window s | peak RSS MB | deadline met (queries) | correct |",
             "|---|---:|---:|---:|---:|---|---|"]
    for name, r in runs.items():
        if "error" in r:
            lines.append(f"| {name} | error: {r['error'][:80]} | | | | | |")
            continue
        x = f"{r['cpu_seconds'] / base:.2f}" if base else "-"
        pq = r.get("per_query") or {}
        met = sum(1 for v in pq.values() if v["after_window"] is not None
                  and v["after_window"] <= v["deadline_after_window"])
        lines.append(f"| {name} | {r['cpu_seconds']:.1f} | {x} | {r['wall_after_window']} | {r['peak_rss_mb']:.0f} "
                     f"| {'yes' if r['deadline_met'] else 'no'} ({met}/{len(pq)}) "
                     f"| {'yes' if r['result_correct'] else 'no'} |")
    lines += ["", "Deadlines: `iqp_*` runs, each query's own, f x D after the window's end (staggered over the "
              "queries as in the paper's section 7.4: f times the sum of D up to the query); the other runs, the 1D "
              "spark-submit deadlines. `iqp_group_*` runs: one `iqp_group` DAG whose batches the queries share, "
              "with one fused tail that runs the last batch and every query's merge; the DAG sets the backend and the "
              "cluster only; `iqp_dynamic_llf_*` runs: that DAG in dynamic mode (`MinBatches()`). Other `iqp_*` runs: a "
              "DAG per query, each fusing its last batch into its final task "
              "(`fuse_tail=True`), with the margins, leads and shares of the constants in `benchmarks/vs_streaming.py`. "
              "Streaming runs of join queries join inside each micro-batch (foreachBatch)."]
    for backend, r in (meta.get("reference") or {}).items():
        lines.append(f"Reference (D) run on {backend}: {r['run']}, one batch, {r['cpu_seconds']:.1f} CPU s, "
                     f"{r['wall_after_window']} s after the window's end.")
    return "\n".join(lines) + "\n"


def _ds(meta: dict, backend: str) -> str:
    cal = (meta.get("D_calibrated") or {}).get(backend, {})
    return ", ".join(f"{q} {v:.1f}" + (f" [{cal[q]:.1f}]" if q in cal else "") for q, v in meta["D"][backend].items())


def plot(report: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {k: v for k, v in report["runs"].items() if "error" not in v}
    base = runs["one_batch"]
    names = list(runs)
    metrics = [("cpu_seconds", "CPU"), ("peak_rss_mb", "peak RSS")]
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(names)), 4))
    w = 0.38
    for i, (key, label) in enumerate(metrics):
        ax.bar([j + (i - 0.5) * w for j in range(len(names))], [runs[n][key] / base[key] for n in names], w,
               label=label)
    for j, n in enumerate(names):
        if not runs[n]["deadline_met"]:
            ax.annotate("missed", (j, 0.05), ha="center", rotation=90, color="red", fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel("relative to one_batch")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="CQ3, SF 0.5, 100 units, 4 runs (under 15 minutes)")
    p.add_argument("--json", action="store_true", help="print one JSON object keyed by run name")
    p.add_argument("--queries", help="override the queries (comma-separated)")
    p.add_argument("--runs", help="override the runs (comma-separated)")
    p.add_argument("--scale", type=float)
    p.add_argument("--units", type=int)
    p.add_argument("--rate", type=float, default=1.0, help="units per second (default 1)")
    p.add_argument("--port", type=int, default=15012, help="port of the benchmark's Spark Connect server")
    p.add_argument("--name", help="result file stem under benchmarks/results/")
    p.add_argument("--server-memory", default=SERVER_MEMORY,
                   help=f"driver memory (JVM heap) of the benchmark's Spark Connect server (default {SERVER_MEMORY}; "
                        "the streaming and one-batch apps run at spark-submit's default, 1g)")
    p.add_argument("--reuse-prep", action="store_true",
                   help="reuse the calibration and D of the last run on the same data and queries (for iterating; "
                        "the meta records it)")
    args = p.parse_args(argv)
    preset = QUICK if args.quick else FULL
    ctx = {"queries": args.queries.split(",") if args.queries else preset["queries"],
           "scale": args.scale or preset["scale"], "units": args.units or preset["units"], "rate": args.rate,
           "port": args.port, "margin": {"spark-submit": 10.0, "spark-connect": 2.0}, "reuse_prep": args.reuse_prep,
           "server_memory": args.server_memory}
    ctx["window"] = ctx["units"] / ctx["rate"]
    runs = args.runs.split(",") if args.runs else preset["runs"]
    ctx["data"] = RESULTS / "tmp" / f"tpch-sf{ctx['scale']}-n{ctx['units']}"
    ctx["work"] = RESULTS / "tmp" / "vs_streaming"
    shutil.rmtree(ctx["work"], ignore_errors=True)
    ctx["work"].mkdir(parents=True)
    started = time.time()
    out: dict = {}
    try:
        prepare(ctx)
        for name in runs:
            say(f"run {name}")
            try:
                if name == "streaming_default":
                    out[name] = run_streaming(ctx, name, "default")
                elif name == "streaming_10pct":
                    out[name] = run_streaming(ctx, name, str(0.1 * ctx["window"]))
                elif name == "one_batch":
                    out[name] = run_one_batch(ctx)
                elif name == "availablenow_scheduled":
                    out[name] = run_scheduled(ctx)
                elif name.startswith("iqp_"):
                    group, dynamic = name.startswith("iqp_group_"), name.startswith("iqp_dynamic_llf_")
                    kind = name.removeprefix("iqp_group_" if group else "iqp_")
                    backend = "spark-connect" if kind.startswith("connect_") or dynamic else "spark-submit"
                    out[name] = run_iqp(ctx, name, backend, float(name.rsplit("_", 1)[1].rstrip("D")), group=group,
                                        dynamic=dynamic)
                else:
                    raise SystemExit(f"unknown run {name!r}")
            except Exception as exc:  # noqa: BLE001 - record and go on with the other runs
                say(f"{name} failed: {exc}")
                text = str(exc) or type(exc).__name__
                out[name] = {"run": name, "error": text.splitlines()[0][:300], "error_detail": text[-2000:]}
            say(f"{name}: {json.dumps({k: v for k, v in out[name].items() if k != 'per_query'})[:400]}")
    finally:
        if ctx.get("server"):
            connect.stop_server(ctx["port"], base=ctx["work"] / "connect")
    meta = {k: ctx.get(k) for k in ("queries", "scale", "units", "rate", "window", "D", "D_calibrated", "overhead",
                                    "reference", "server_startup_seconds", "server_warmup", "prep_reused",
                                    "server_memory")}
    meta.update(quick=args.quick, elapsed_seconds=round(time.time() - started, 1),
                machine=f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores)")
    report = {"meta": meta, "runs": out}
    stem = args.name or ("vs_streaming_quick" if args.quick else "vs_streaming")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(markdown(report))
    if "one_batch" in out and "error" not in out["one_batch"]:
        plot(report, RESULTS / f"{stem}.png")
    if args.json:
        print(json.dumps(out))
    else:
        print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
