"""Arrival profiles (pure): each ordered and complete, shaped as the paper's figure 9, and their errors."""

from __future__ import annotations

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.inputs.profiles import PROFILES, arrival_offsets

N, RATE = 100, 2.0
T = N / RATE


def _nondecreasing(xs):
    return all(a <= b for a, b in zip(xs, xs[1:]))


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_is_ordered_and_complete(name):
    offs = arrival_offsets(name, RATE, N)
    assert len(offs) == N and _nondecreasing(offs) and offs[0] > 0
    assert arrival_offsets(name.upper(), RATE, 0) == []


def test_profile_shapes_match_figure_9():
    fixed = arrival_offsets("fixed", RATE, N)
    assert fixed == pytest.approx([(i + 1) / RATE for i in range(N)])
    faster = arrival_offsets("faster", RATE, N)
    assert all(f < x for f, x in zip(faster, fixed)) and faster[-1] == pytest.approx(0.75 * T)
    bursty = arrival_offsets("bursty", RATE, N)
    assert len(set(bursty)) == 10 and all(b <= x for b, x in zip(bursty, fixed))
    slower = arrival_offsets("slower", RATE, N)
    assert all(s >= x for s, x in zip(slower, fixed)) and slower[-1] == pytest.approx(T)
    assert slower[N // 2] > fixed[N // 2] + 1  # behind in the middle
    late = arrival_offsets("late", RATE, N)
    assert late[-1] > T and late[:80] == pytest.approx(slower[:80])
    assert sum(t > T for t in late) >= 2  # the last units land after the window end
    stalled = arrival_offsets("stalled", RATE, N)
    gaps = [b - a for a, b in zip(stalled, stalled[1:])]
    assert max(gaps) == pytest.approx(0.25 * T)  # the stall
    assert stalled[N // 2 - 1] == pytest.approx(0.5 * T)
    assert stalled[N // 2] == pytest.approx(0.75 * T)  # nothing lands between half and three quarters
    assert not any(0.5 * T < t < 0.75 * T for t in stalled) and stalled[-1] == pytest.approx(T)
    assert arrival_offsets("fixed", 1.0, 4, window=8.0) == [2.0, 4.0, 6.0, 8.0]


@pytest.mark.parametrize("args,field", [
    (("nope", 1.0, 3), "profile"), (("fixed", 0, 3), "rate"), (("fixed", 1.0, -1), "units"),
    (("fixed", 1.0, 3, 0.0), "window"),
])
def test_profile_errors_name_the_field(args, field):
    with pytest.raises(ConfigError) as err:
        arrival_offsets(*args)
    assert err.value.field == field
