"""Calibrate a query's cost model on one backend (section 6.2 of the paper): measure, fit, store.

No Airflow import. :func:`calibrate` cuts a data directory's units into consecutive,
disjoint batches of growing sizes (1, 2, 5, 10, 20, 50, ... while they fit; given sizes
that do not fit side by side start again from the first unit), runs each as a batch on
the backend, then merges the first k partials for a few k. Sizes whose measurements say
that more units cost less are measured again, up to twice (a slow run on a shared machine
would otherwise flatten the fit over them). Over each size's median, it fits

* the batch cost, seconds against units, as a piecewise linear model
  (:func:`airflow_iqp.planning.models.fit_piecewise_linear`); its value at zero units is
  the backend's per-batch overhead;
* the final aggregation, seconds against the number of partials.

The backend runs and measures each batch and merge through its calibration runner
(:meth:`airflow_iqp.backends.base.Backend.calibration_runner`), given by value. Seconds are
end to end, as the orchestrator sees them: on spark-submit the whole spark-submit process
(JVM start-up included), on Spark Connect the call on an open session to a warm server
(one unrecorded warm-up batch and merge run first). The measurements go to the store's
cost history as ``batch`` / ``final`` records with ``source: "calibrate"``
and the runner's backend name, and the fit as a ``fit`` record, which the plan operator
prefers.

:func:`warm_up` runs queries on a fresh Connect server until its JVM is warm, as a server
that has served earlier windows is (nothing recorded).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from airflow_iqp.errors import ConfigError, DataError
from airflow_iqp.planning.models import PiecewiseLinearFinalAgg, decreasing_sizes, fit_piecewise_linear
from airflow_iqp.query.store import Saved, catalogued, save_query
from airflow_iqp.landing import list_units
from airflow_iqp.store import WindowState, open_store
from airflow_iqp.inputs.tpch import streams_at
from airflow_iqp.streams import files_of

GROWTH = (1, 2, 5)


def default_sizes(n_units: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... while the consecutive batches fit in ``n_units``; the rest as one more
    batch when it is larger than the last."""
    sizes, total, scale = [], 0, 1
    while True:
        for g in GROWTH:
            s = g * scale
            if total + s > n_units:
                rest = n_units - total
                if sizes and rest > sizes[-1]:
                    sizes.append(rest)
                return sizes
            sizes.append(s)
            total += s
        scale *= 10


def _first_window_batches(sizes: Sequence[int], n_units: int) -> int:
    """How many of ``sizes``, from the first, fit side by side in ``n_units``: the batches
    whose partials the calibration's merges combine."""
    total = 0
    for i, size in enumerate(sizes):
        total += size
        if total > n_units:
            return i
    return len(sizes)


def default_final_counts(n_batches: int) -> list[int]:
    return sorted({k for k in (1, 2, 4, n_batches) if 1 <= k <= n_batches})


def _tpch_files(units, saved: Saved) -> list[str]:
    """The files of the catalogued query's TPC-H streams in ``units`` (unit directories)."""
    return files_of(units, [s for s in saved.streams if s.name in saved.query.streams])


def _copy_window(src: WindowState, dst: WindowState, batches: Sequence[int]) -> None:
    """``dst`` (a new window) holds the claims and partials of ``src``'s ``batches`` (for a
    merge of those partials)."""
    for b in batches:
        claim = src.claim_of(b)
        dst.claim(b, claim["units"], claim["files"])
        shutil.copytree(src.partial_uri(b), dst.partial_uri(b))


#: Rounds of measuring again the sizes whose measurements say more costs less
#: (:func:`~airflow_iqp.planning.models.decreasing_sizes`): two give those sizes three
#: measurements, whose median drops one slow run.
RECHECK_ROUNDS = 2


def _measure_again(done: list[dict], key: str, items, size_of, measure, say) -> None:
    """Measure each of ``items`` whose size (``size_of(item)``, ``done``'s ``key``) is among the
    decreasing sizes of ``done`` again, for up to :data:`RECHECK_ROUNDS` rounds, until none is."""
    for _ in range(RECHECK_ROUNDS):
        again = decreasing_sizes([(r[key], r["wall_seconds"]) for r in done])
        if not again:
            return
        say(f"measuring again ({key}): {', '.join(f'{x:g}' for x in sorted(again))}")
        for item in items:
            if size_of(item) in again:
                measure(item)


def calibrate(query_id: str, data: str | os.PathLike, runner, *, state_dir: str | os.PathLike,
              sizes: Sequence[int] | None = None, final_counts: Sequence[int] | None = None, repeat: int = 1,
              work_dir: str | os.PathLike | None = None, log: Callable[[str], None] | None = None) -> dict:
    """Measure and fit ``query_id``'s batch and final-aggregation costs on ``runner``'s
    backend; store the fit under the backend's name.

    ``runner``: the backend's calibration runner (a
    :class:`~airflow_iqp.backends.base.CalibrationRunner`, given by the provider's side;
    whoever opened it closes it). Returns
    ``{"query", "backend", "batches": [{"units", "wall_seconds", "cpu_seconds"}], "finals":
    [{"batches", ...}], "cost", "final_agg", "overhead_seconds", "record"}``.
    """
    from airflow_iqp.spark.window import resolve_data

    if int(repeat) != repeat or repeat < 1:
        raise ConfigError(f"must be a whole number >= 1, got {repeat!r}", field="repeat")
    backend = runner.name
    saved = catalogued(query_id)  # what its batch and merge jobs load, saved below
    query = saved.query
    landing, static = resolve_data(data)
    if query.static and static is None:
        raise ConfigError(f"query {query.id} needs static tables {', '.join(query.static)}", field="data")
    units = list_units(landing, streams_at(landing))
    sizes = list(sizes) if sizes else default_sizes(len(units))
    if len(set(sizes)) < 2 or any(int(s) != s or s < 1 for s in sizes):
        raise ConfigError(f"need two or more distinct batch sizes >= 1, got {sizes}", field="sizes")
    if max(sizes) > len(units):
        raise ConfigError(f"a batch of {max(sizes)} units needs {max(sizes)} units; {landing} has {len(units)}",
                          field="sizes")
    first = _first_window_batches(sizes, len(units))
    final_counts = list(final_counts) if final_counts else default_final_counts(first)
    if len(set(final_counts)) < 2 or any(not 1 <= k <= first for k in final_counts):
        raise ConfigError(f"need two or more distinct partial counts within 1..{first} (the batches that fit the "
                          f"units side by side), got {final_counts}", field="finals")
    say = log or (lambda m: None)
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix=f"iqp-calibrate-{query.id}-"))
    store = open_store(work)
    save_query(store, saved)
    ws = store.window(query.id, "calibrate")
    batches, finals = [], []
    # Consecutive, disjoint batches while they fit in the units; a batch larger than the
    # units left starts again from the first unit, in a window of its own, so that a
    # plan's batch of nearly the whole window is measured rather than extrapolated.
    placed, start, at = [], 0, None
    for b, size in enumerate(sizes):
        if at is None or start + size > len(units):
            at = ws if at is None else store.window(query.id, f"calibrate-{b}")
            start = 0
        chunk = units[start:start + size]
        start += size
        at.claim(b, [u.name for u in chunk], _tpch_files(chunk, saved))
        placed.append(at)
    if runner.warm_up_first:
        runner.batch(query.id, ws, 0, static)  # warm-up: JIT, caches; not recorded

    def measure_batch(b: int) -> None:
        wall, cpu = runner.batch(query.id, placed[b], b, static)
        job = placed[b].metrics(b)
        batches.append({"units": sizes[b], "wall_seconds": wall, "cpu_seconds": cpu,
                        "step_wall_seconds": job["wall_seconds"], "task_seconds": job.get("task_seconds")})
        say(f"batch of {sizes[b]:>4} units: {wall:6.2f} s" + (f", {cpu:6.2f} CPU s" if cpu is not None else ""))

    def measure_final(k: int) -> None:
        wk = store.window(query.id, f"calibrate-final-{k}-{sum(f['batches'] == k for f in finals)}")
        _copy_window(ws, wk, range(k))
        wall, cpu = runner.final(query.id, wk)
        finals.append({"batches": k, "units": sum(sizes[:k]), "wall_seconds": wall, "cpu_seconds": cpu})
        say(f"final of {k:>2} partials: {wall:6.2f} s" + (f", {cpu:6.2f} CPU s" if cpu is not None else ""))

    for _ in range(repeat):
        for b in range(len(sizes)):
            measure_batch(b)
    _measure_again(batches, "units", range(len(sizes)), lambda b: sizes[b], measure_batch, say)
    if runner.warm_up_first:  # warm-up of the merge, not recorded
        _copy_window(ws, store.window(query.id, "calibrate-warmup"), [0])
        runner.final(query.id, store.window(query.id, "calibrate-warmup"))
    for _ in range(repeat):
        for k in final_counts:
            measure_final(k)
    _measure_again(finals, "batches", final_counts, lambda k: k, measure_final, say)
    cost = fit_piecewise_linear([(r["units"], r["wall_seconds"]) for r in batches], max_pieces=4)
    agg = PiecewiseLinearFinalAgg(fit_piecewise_linear([(r["batches"], r["wall_seconds"]) for r in finals],
                                                       max_pieces=3).points, merge_single=True)
    now = time.time()
    history = open_store(state_dir)
    for r in batches:
        history.record_cost(query=query.id, kind="batch", units=r["units"], batches=1, wall_seconds=r["wall_seconds"],
                            cpu_seconds=r["cpu_seconds"], task_seconds=r["task_seconds"], backend=backend,
                            source="calibrate", recorded_at=now)
    for r in finals:
        history.record_cost(query=query.id, kind="final", units=r["units"], batches=r["batches"],
                            wall_seconds=r["wall_seconds"], cpu_seconds=r["cpu_seconds"], backend=backend,
                            source="calibrate", recorded_at=now)
    record = history.record_fit(query=query.id, backend=backend, cost=cost.to_dict(), final_agg=agg.to_dict(),
                                overhead_seconds=cost.overhead, data=str(data), recorded_at=now)
    if not work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return {"query": query.id, "backend": backend, "batches": batches, "finals": finals, "cost": cost.to_dict(),
            "final_agg": agg.to_dict(), "overhead_seconds": cost.overhead, "record": record}


def warm_up(runner, query_ids: Sequence[str], data: str | os.PathLike, *, rounds: int = 2,
            log: Callable[[str], None] | None = None) -> dict:
    """Run each query over all of ``data``'s units (one batch, then the merge), ``rounds`` times,
    on ``runner`` (a Spark Connect server's calibration runner, open; whoever opened it
    closes it): the work a server that served earlier windows has done.

    A fresh server's JVM is cold, and the first window's batches pay for it: on a 2-core
    machine a q4 batch of 224 SF 1 units costs about three times as much on a fresh server
    as on one that has run it twice (about 13 s against 4 s). Calibrated costs are a warm
    server's, so a plan holds only on a warm server. Nothing is recorded in a cost history.
    Returns ``{"rounds", "wall_seconds", "cpu_seconds"}`` (CPU of the server JVM and this
    process; None where the runner does not know it).
    """
    from airflow_iqp.spark.window import resolve_data

    if int(rounds) != rounds or rounds < 1:
        raise ConfigError(f"must be a whole number >= 1, got {rounds!r}", field="rounds")
    landing, static = resolve_data(data)
    units = list_units(landing, streams_at(landing))
    if not units:
        raise DataError(f"{landing}: no units to warm the server with")
    queries = [catalogued(q) for q in query_ids]
    say = log or (lambda m: None)
    work = Path(tempfile.mkdtemp(prefix="iqp-warm-up-"))
    wall, cpus = 0.0, []
    try:
        for saved in queries:  # what the batch and merge jobs load
            save_query(work, saved)
        for r in range(int(rounds)):
            for saved in queries:
                query = saved.query
                ws = open_store(work).window(query.id, f"warm-up-{r}")
                ws.claim(0, [u.name for u in units], _tpch_files(units, saved))
                w1, c1 = runner.batch(query.id, ws, 0, static)
                w2, c2 = runner.final(query.id, ws)
                wall += w1 + w2
                cpus += [c1, c2]
                say(f"warm-up {r + 1}/{rounds} {query.id}: {w1 + w2:.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"rounds": int(rounds), "wall_seconds": wall, "cpu_seconds": None if None in cpus else sum(cpus)}


def plot_calibration(report: dict, path: str | os.PathLike) -> Path:
    """Measured against fitted cost: batches (seconds by units) and merges (seconds by partials)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from airflow_iqp.planning.models import cost_model_from_dict, final_agg_from_dict

    cost = cost_model_from_dict(report["cost"])
    agg = final_agg_from_dict(report["final_agg"])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    xs = [r["units"] for r in report["batches"]]
    a1.scatter(xs, [r["wall_seconds"] for r in report["batches"]], label="measured", color="tab:blue")
    grid = list(range(0, max(xs) + 1))
    a1.plot(grid, [cost._at(float(x)) for x in grid], label="fitted", color="tab:orange")
    a1.set(xlabel="units in the batch", ylabel="seconds", title=f"{report['query']} batch cost ({report['backend']})")
    a1.annotate(f"overhead {report['overhead_seconds']:.2f} s", (0, report["overhead_seconds"]),
                textcoords="offset points", xytext=(5, 10))
    ks = [r["batches"] for r in report["finals"]]
    a2.scatter(ks, [r["wall_seconds"] for r in report["finals"]], label="measured", color="tab:blue")
    kg = list(range(1, max(ks) + 1))
    a2.plot(kg, [agg.cost(k) for k in kg], label="fitted", color="tab:orange")
    a2.set(xlabel="partials merged", ylabel="seconds", title="final aggregation")
    for a in (a1, a2):
        a.set_ylim(bottom=0)
        a.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
