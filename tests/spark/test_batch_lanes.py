"""How a group's job runs its members' steps side by side: ``airflow_iqp.spark.batch.in_lanes``,
used by the shared batches and the fused tail (no Spark job: the steps here sleep)."""

import threading
import time

import pytest

from airflow_iqp.spark.batch import LANES, in_lanes


class _Steps:
    """Steps that sleep ``seconds[m]`` and record when each started and ended, and how
    many ran at once at most."""

    def __init__(self, seconds: dict, fail: str | None = None):
        self.seconds, self.fail = seconds, fail
        self.started, self.ended, self.now, self.most = {}, {}, 0, 0
        self.lock = threading.Lock()

    def __call__(self, m: str) -> str:
        with self.lock:
            self.started[m] = time.monotonic()
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.seconds[m])
        with self.lock:
            self.now -= 1
            self.ended[m] = time.monotonic()
        if m == self.fail:
            raise RuntimeError(f"{m} failed")
        return f"done {m}"


def test_every_member_s_step_runs_once_in_order_at_most_lanes_at_once():
    members = [f"m{i}" for i in range(5)]
    steps = _Steps({m: 0.05 for m in members})
    out, left = in_lanes(steps, members)
    assert out == {m: f"done {m}" for m in members} and left == []
    assert steps.most == LANES >= 2
    order = sorted(members, key=steps.started.get)
    assert order == members
    # Side by side: five steps of 0.05 s end well before they would one after another.
    assert max(steps.ended.values()) - min(steps.started.values()) < 0.05 * len(members) - 0.05


def test_stop_hands_over_the_members_not_started_and_they_never_run():
    members = ["a", "b", "c", "d"]
    steps = _Steps({"a": 0.2, "b": 0.05, "c": 0.05, "d": 0.05})
    asked = []

    def stop() -> bool:  # true from the third time it is asked: a and b have started
        asked.append(1)
        return len(asked) > 2

    out, left = in_lanes(steps, members, stop=stop)
    assert set(out) == {"a", "b"} and left == ["c", "d"]
    assert set(steps.started) == {"a", "b"}


def test_one_lane_and_pick_choose_who_starts_and_on_done_sees_each_result():
    members = ["late", "early", "mid"]
    steps = _Steps({"late": 0.05, "early": 0.1, "mid": 0.05})
    due = {"early": 1, "mid": 2, "late": 3}
    done = []
    out, _left = in_lanes(steps, members, pick=lambda waiting: min(waiting, key=due.get), lanes=1,
                          on_done=lambda m, r: done.append((m, r)))
    assert sorted(members, key=steps.started.get) == ["early", "mid", "late"]
    # One at a time: each started once the one before it was done.
    assert steps.started["mid"] >= steps.ended["early"] and steps.started["late"] >= steps.ended["mid"]
    assert sorted(done) == sorted(out.items()) and len(done) == 3


def test_a_failed_step_raises_after_those_running_are_done_and_no_other_starts():
    members = ["a", "b", "c", "d"]
    steps = _Steps({"a": 0.05, "b": 0.3, "c": 0.05, "d": 0.05}, fail="a")
    with pytest.raises(RuntimeError, match="a failed"):
        in_lanes(steps, members)
    assert set(steps.started) == {"a", "b"}
    assert "b" in steps.ended  # b, already running, finished before the error was raised
