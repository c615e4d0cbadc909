"""The order a group's fused tail starts its members in: each member's seconds and the
pace of those done (airflow_iqp.spark.group_tail; no Spark job)."""

import os
import time

import pytest

from airflow_iqp.spark.group_tail import _Pace, _with_steps
from airflow_iqp.store import open_store


def _partial(ws, batch: int, seconds: float) -> None:
    """A written partial of ``batch`` whose step took ``seconds``."""
    def write(uri: str) -> None:
        path = uri.removeprefix("file://")
        os.makedirs(path)
        open(os.path.join(path, "part-0.parquet"), "wb").close()
    ws.write_partial(batch, write)
    ws.write_metrics(batch, {"batch": batch, "wall_seconds": seconds})


def test_a_member_s_seconds_are_its_latest_shared_step_or_the_plan_s_if_less_and_none_without_a_step(tmp_path):
    store = open_store(tmp_path / "state")
    windows = {m: store.window(m, "20260101T000000") for m in ("light", "new", "heavy")}
    _partial(windows["light"], 1, 0.9)
    _partial(windows["light"], 2, 0.2)  # the latest shared batch's step
    _partial(windows["heavy"], 1, 5.0)
    due = {"light": (10.0, 0.8), "new": (20.0, 0.5), "heavy": (30.0, 1.0)}
    # "new" has no step measured in this window (a plan of one batch, in the tail): the
    # plan's seconds alone do not make it yield.
    assert _with_steps(due, windows) == {"light": (10.0, 0.2), "new": (20.0, 0.0), "heavy": (30.0, 1.0)}


def test_the_pace_is_the_seconds_taken_over_those_planned_never_faster_than_the_plan_s_scale():
    pace = _Pace({"a": (10.0, 1.0), "b": (20.0, 2.0), "c": (30.0, 0.0)}, scale=1.2)
    assert pace.now() == 1.2  # none done: the plan's
    pace.done("a", 0.5)
    assert pace.now() == 1.2  # faster than planned: still the plan's
    pace.done("b", 6.0)
    pace.done("c", 1.0)  # nothing planned: not counted
    # A ratio of sums: each member counts by its planned seconds ("b"'s 2.0 twice "a"'s 1.0).
    assert pace.now() == pytest.approx((0.5 + 6.0) / (1.0 + 2.0))


def test_a_member_the_pace_makes_late_yields_to_one_still_in_time():
    now = time.time()
    due = {"a": (now + 1.5, 1.0), "b": (now + 100.0, 2.0)}
    pace = _Pace(due, scale=1.2)
    assert pace.next(["a", "b"]) == "a"  # 1.2 s of 1.5 s left
    pace.done("b", 8.0)  # four times as long as planned
    assert pace.next(["a", "b"]) == "b"  # a: 4 s of 1.5 s left
