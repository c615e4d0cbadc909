"""The cross-query gate: queries of one state directory take turns on the cluster, earliest deadline first."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow_iqp.planning.gate import Planned, made_late
from airflow_iqp.state import make_dirs, open_private, read_json
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.readiness import BEHIND_POLL_FACTOR, TAIL_POLL_S, fire_at

#: A planned batch of another query that has not claimed this long after its fire time is
#: not coming (its DAG failed or was paused): it no longer holds later-deadline batches back.
UPCOMING_GRACE_S = 5.0


def upcoming(batch: Batch) -> list[Batch]:
    """The planned batches of the other queries of the same window (their ``plan.json`` in
    the state directory) due before ``batch`` (earliest deadline first, as the gate orders)."""
    key = (batch.deadline_ts, batch.query)
    out = []
    for path in Path(batch.state_dir).glob(f"*/{batch.window_id}/plan.json"):
        if path.parent.parent.name == batch.query:
            continue
        try:
            entries = [Batch.from_dict(e) for e in read_json(path).get("batches", [])]
        except (OSError, ValueError):
            continue  # being written
        out += [e for e in entries if (e.deadline_ts, e.query) < key and not e.backfill]
    return out


def expected(entry: Batch, planned: float) -> float:
    """A plan entry's planned seconds as expected: without its plan's ``cost_scale``, the
    pessimism the plan leaves room with, which a decision taken now need not repeat."""
    return planned / entry.cost_scale


def _as_planned(e: Batch) -> Planned:
    return Planned(query=e.query, index=e.index, ready=e.ready_ts, fire=fire_at(e), cost=expected(e, e.cost),
                   after=expected(e, e.remaining_cost - e.cost), deadline=e.deadline_ts)


def coming(entries: list[Batch], now: float, cost: float) -> list[Planned]:
    """Those of ``entries`` (other queries' plan entries) that a batch of ``cost`` seconds
    started now would make late (:func:`airflow_iqp.planning.gate.made_late`)."""
    by_key = {(e.query, e.index): e for e in entries}

    def claimed(p: Planned) -> bool:
        e = by_key[(p.query, p.index)]
        return e.window_state().claim_path(e.index).exists()

    return made_late([_as_planned(e) for e in entries], now, cost, UPCOMING_GRACE_S, claimed)


@contextmanager
def cluster_turn(batch: Batch, slots: int, poll: float = TAIL_POLL_S, sleep: Any = time.sleep, *,
                 planned: float | None = None, until: float | None = None):
    """Run the enclosed Spark work when the batch's turn comes: at most ``slots`` batches at
    once across the queries of one state directory, the earliest deadline first (EDF).

    For the batches the final tasks of fused tails run (``split_tail``), the last ones all
    ready at their windows' ends: run together they share the cluster and the first
    deadline is missed; the paper's executor runs one batch at a time. ``slots <= 0`` is
    no gate. Each waiting or running batch holds an ``flock`` on its own file under
    ``STATE/_turns/``; a killed task's lock goes with its process, so its file is stale and
    ignored. A batch also leaves the cluster to a batch of a query due earlier that is not
    claimed yet but will be ready before this one's planned cost is over, and whose query
    would then miss its deadline (:func:`coming`): the gate takes no batch back once
    started. Being ready soon is not enough on its own (with many queries some batch due
    earlier is nearly always about to be ready, and a later one would starve), nor is
    being before its latest start (in a tight plan that is its ready time, and the cluster
    would idle). ``planned``: the planned seconds the enclosed work holds the cluster
    (default the batch's cost; a fused tail's last batch holds it through the merge too,
    its ``remaining_cost``). ``until``: a time after which the work is no longer wanted; the
    context then yields False without the turn (else True, once it has it).
    """
    if slots <= 0:
        yield True
        return
    import fcntl

    root = Path(batch.state_dir) / "_turns"
    waiting, running = root / "waiting", root / "running"
    make_dirs(waiting)
    make_dirs(running)
    name = f"{batch.deadline_ts:020.6f}-{batch.query}-{batch.window_id}-{batch.index:04d}"
    earlier = upcoming(batch)

    def hold(path: Path) -> int:
        fd = open_private(path, os.O_CREAT | os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def live(path: Path) -> bool:
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        path.unlink(missing_ok=True)  # nobody holds it: left by a killed task
        return False

    mine = hold(waiting / name)
    run_fd = None
    try:
        while run_fd is None:
            soon = coming(earlier, time.time(), expected(batch, batch.cost if planned is None else planned))
            lock = hold(root / ".lock")
            try:
                ahead = [p for p in sorted(waiting.iterdir()) if p.name < name and live(p)]
                busy = [p for p in running.iterdir() if p.name != name and live(p)]
                if not ahead and not soon and len(busy) < slots:
                    run_fd = hold(running / name)
                    (waiting / name).unlink(missing_ok=True)
            finally:
                os.close(lock)
            if run_fd is None:
                if until is not None and time.time() >= until:
                    break
                sleep(poll * (BEHIND_POLL_FACTOR if ahead else 1))
        yield run_fd is not None
    finally:
        if run_fd is not None:
            (running / name).unlink(missing_ok=True)
            os.close(run_fd)
        else:  # once it had its turn, waiting/<name> is no longer this task's
            (waiting / name).unlink(missing_ok=True)
        os.close(mine)

