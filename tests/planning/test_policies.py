"""Which waiting job starts next (airflow_iqp.planning.policies)."""

import itertools
import random

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.policies import most_in_time

DUE = {"a": (10.0, 4.0), "b": (12.0, 3.0), "c": (30.0, 5.0)}


def test_while_every_deadline_can_be_met_the_earliest_deadline_starts_first():
    assert most_in_time(["c", "b", "a"], 0.0, DUE) == "a"
    assert most_in_time(["c", "b"], 6.0, DUE) == "b"


def test_a_job_that_can_no_longer_meet_its_deadline_yields_to_one_that_can():
    # At 7 s, a (4 s, due at 10) would end at 11: b (3 s, due at 12) still ends in time.
    assert most_in_time(["a", "b", "c"], 7.0, DUE) == "b"
    # From 3 s: at the planned pace a and b end in time; at twice it only one of them can,
    # and b is the shorter; at four times, only c.
    assert most_in_time(["a", "b", "c"], 3.0, DUE, pace=1.0) == "a"
    assert most_in_time(["a", "b", "c"], 3.0, DUE, pace=2.0) == "b"
    assert most_in_time(["a", "b", "c"], 3.0, DUE, pace=4.0) == "c"


def test_a_long_job_that_could_just_make_its_deadline_yields_to_several_shorter_ones():
    # "long" alone ends in time (5 of 5.5 s), but then s1 does not (6 of 5.8 s); without
    # it both short jobs do, so it runs last.
    due = {"long": (5.5, 5.0), "s1": (5.8, 1.0), "s2": (7.0, 1.0)}
    assert most_in_time(["long", "s1", "s2"], 0.0, due) == "s1"
    # Then long, expected 0.5 s late, still runs before s2, which can wait for it.
    assert most_in_time(["long", "s2"], 1.0, due) == "long"
    assert most_in_time(["long", "s2"], 1.0, {**due, "s2": (6.5, 1.0)}) == "s2"  # unless s2 would end late


def test_when_none_can_meet_its_deadline_the_earliest_deadline_runs():
    assert most_in_time(["c", "b", "a"], 40.0, DUE) == "a"


def test_a_job_without_a_deadline_is_in_time_and_after_those_with_one():
    assert most_in_time(["x", "a"], 0.0, DUE) == "a"
    assert most_in_time(["x", "a"], 7.0, DUE) == "a"  # 1 s late, within reach: x has no deadline to miss
    assert most_in_time(["x", "a"], 9.0, DUE) == "x"  # 3 s late, more than half its 4 s
    assert most_in_time(["y", "x"], 0.0, {}) == "y"  # no deadlines at all: the order given


def test_nothing_waiting_is_an_error():
    with pytest.raises(ConfigError, match="nothing is waiting"):
        most_in_time([], 0.0, DUE)


def _in_time(order, now, due, pace):
    """How many of ``order``, run one after another from ``now``, end by their deadlines."""
    end, met = now, 0
    for m in order:
        end += pace * due[m][1]
        met += end <= due[m][0]
    return met


def _followed(waiting, now, due, pace):
    """The order the rule gives when it is asked again as each job ends, at the same pace."""
    waiting, order, end = list(waiting), [], now
    while waiting:
        m = most_in_time(waiting, end, due, pace)
        waiting.remove(m)
        order.append(m)
        end += pace * due[m][1]
    return order


@pytest.mark.parametrize("seed", range(200))
def test_asked_as_each_job_ends_it_meets_as_many_deadlines_as_the_best_order(seed):
    rng = random.Random(seed)
    names = [f"q{i}" for i in range(rng.randint(1, 7))]
    due = {m: (round(rng.uniform(0.0, 12.0), 2), round(rng.uniform(0.1, 4.0), 2)) for m in names}
    now, pace = rng.uniform(0.0, 2.0), rng.choice([1.0, 1.3, 2.0])
    best = max(_in_time(p, now, due, pace) for p in itertools.permutations(names))
    assert _in_time(_followed(names, now, due, pace), now, due, pace) == best


def test_a_job_expected_to_end_just_late_still_runs_in_its_place_where_no_job_in_time_is_made_late():
    # x is expected to end 0.1 s late; y has room to wait for it: x runs first, and may yet
    # make it. With y due sooner, x waits until y is done; so it does when it is far out of reach.
    assert most_in_time(["y", "x"], 1.0, {"x": (1.9, 1.0), "y": (10.0, 1.0)}) == "x"
    assert most_in_time(["y", "x"], 1.0, {"x": (1.9, 1.0), "y": (2.5, 1.0)}) == "y"
    assert most_in_time(["y", "x"], 1.0, {"x": (1.4, 1.0), "y": (10.0, 1.0)}) == "y"
