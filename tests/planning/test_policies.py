"""Which waiting job starts next (airflow_iqp.planning.policies)."""

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.policies import edf_in_time

DUE = {"a": (10.0, 4.0), "b": (12.0, 3.0), "c": (30.0, 5.0)}


def test_while_every_deadline_can_be_met_the_earliest_deadline_starts_first():
    assert edf_in_time(["c", "b", "a"], 0.0, DUE) == "a"
    assert edf_in_time(["c", "b"], 6.0, DUE) == "b"


def test_a_job_that_can_no_longer_meet_its_deadline_yields_to_one_that_can():
    # At 7 s, a (4 s, due at 10) would end at 11: b (3 s, due at 12) still ends in time.
    assert edf_in_time(["a", "b", "c"], 7.0, DUE) == "b"
    # From 3 s: at the planned pace a ends in time; at twice it only b does; at four times, c.
    assert edf_in_time(["a", "b", "c"], 3.0, DUE, pace=1.0) == "a"
    assert edf_in_time(["a", "b", "c"], 3.0, DUE, pace=2.0) == "b"
    assert edf_in_time(["a", "b", "c"], 3.0, DUE, pace=4.0) == "c"


def test_when_none_can_meet_its_deadline_the_earliest_deadline_runs():
    assert edf_in_time(["c", "b", "a"], 40.0, DUE) == "a"


def test_a_job_without_a_deadline_is_in_time_and_after_those_with_one():
    assert edf_in_time(["x", "a"], 0.0, DUE) == "a"
    assert edf_in_time(["x", "a"], 7.0, DUE) == "x"
    assert edf_in_time(["y", "x"], 0.0, {}) == "y"  # no deadlines at all: the order given


def test_nothing_waiting_is_an_error():
    with pytest.raises(ConfigError, match="nothing is waiting"):
        edf_in_time([], 0.0, DUE)
