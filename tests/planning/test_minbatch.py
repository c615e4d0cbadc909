"""MinBatch sizing (section 4.1), slack and laxity."""

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.minbatch import after_end_cost, batched_cost, laxity, min_batch_size, slack
from airflow_iqp.planning.models import LinearCost, LinearFinalAgg, PiecewiseLinearCost


def test_min_batch_is_the_smallest_size_within_the_slack():
    cost = LinearCost(per_unit=0.1, per_batch=2.0)    # 100 units: 12 s in one batch
    agg = LinearFinalAgg(base=1.0, per_batch=0.1)
    mb = min_batch_size(cost, agg, total=100, rsf=0.5)
    assert mb.bound_kept and mb.single_cost == pytest.approx(12.0)
    assert mb.total_cost <= 1.5 * 12.0 + 1e-9
    # One unit smaller breaks the bound: it really is the smallest.
    assert batched_cost(cost, agg, 100, mb.size - 1) > 18.0
    assert mb.batches == -(-100 // mb.size)


def test_larger_rsf_gives_smaller_batches():
    cost = PiecewiseLinearCost(((1.0, 3.0), (100.0, 10.0), (1000.0, 40.0)))
    agg = LinearFinalAgg(base=0.5, per_batch=0.05)
    half = min_batch_size(cost, agg, 1000, 0.5)
    full = min_batch_size(cost, agg, 1000, 1.0)
    assert full.size < half.size and full.batches > half.batches


def test_c_max_caps_the_size_and_says_the_bound_is_lost():
    cost = LinearCost(per_unit=1.0, per_batch=25.0)    # 100 units: 125 s in one batch, bound 187.5 s
    mb = min_batch_size(cost, LinearFinalAgg(), 100, rsf=0.5, c_max=30)
    assert not mb.bound_kept
    assert mb.size == 5 and cost.cost(mb.size) <= 30   # 20 batches of 30 s: 600 s
    assert "c_max" in mb.reason and mb.total_cost == pytest.approx(600)
    kept = min_batch_size(cost, LinearFinalAgg(), 100, rsf=0.5, c_max=60)
    assert kept.bound_kept and cost.cost(kept.size) <= 60


def test_bad_minbatch_arguments():
    with pytest.raises(ConfigError, match="rsf"):
        min_batch_size(LinearCost(1.0), LinearFinalAgg(), 10, rsf=-0.1)
    with pytest.raises(ConfigError, match="c_max"):
        min_batch_size(LinearCost(1.0, 5.0), LinearFinalAgg(), 10, rsf=0.5, c_max=3)


def test_slack_and_laxity():
    assert slack(deadline=16, window_end=10, single_cost=5) == 1          # the paper's case 1
    assert slack(deadline=12, window_end=10, single_cost=5) == -3         # case 3: must batch
    assert laxity(deadline=100, now=40, remaining_cost=25) == 35


def test_one_batch_that_also_merges_counts_its_merge_in_the_bound():
    """The provider merges even a single batch (``merge_single``): one batch of all units
    costs its batch and its merge. With a merge heavier than rsf x the batch, the bound is
    still kept by one batch of all units, and no smaller size can keep it."""
    cost = LinearCost(per_unit=0.1, per_batch=20.0)                      # 120 units: 32 s
    agg = LinearFinalAgg(base=20.0, per_batch=0.5, merge_single=True)    # one batch's merge: 20.5 s
    mb = min_batch_size(cost, agg, total=120, rsf=0.5)
    assert mb.single_cost == pytest.approx(52.5)
    assert mb.bound_kept and mb.reason == ""
    assert mb.total_cost <= 1.5 * 52.5 + 1e-9
    assert batched_cost(cost, agg, 120, mb.size - 1) > 1.5 * 52.5
    # Without merge_single one batch has no merge, as in the paper.
    assert min_batch_size(cost, LinearFinalAgg(base=20.0, per_batch=0.5), 120, 0.5).single_cost == pytest.approx(32.0)


def test_the_deadline_bounds_the_last_minbatch_and_its_merge():
    """The last MinBatch's units are complete at the window's end: that batch and the merge
    must fit the time the deadline leaves after it (``after_end``)."""
    cost = LinearCost(per_unit=0.1, per_batch=1.0)     # 100 units: 11 s in one batch
    agg = LinearFinalAgg(base=0.5, per_batch=0.1)
    after = {x: after_end_cost(cost, agg, 100, x) for x in range(1, 101)}
    free = min_batch_size(cost, agg, 100, rsf=0.5)
    assert free.bound_kept and free.size == 20 and after[20] == pytest.approx(4.0)
    # 3.85 s: only batches of 6 to 17 units fit, none within the bound. Of those, the one
    # that leaves the most of the deadline to the queries due after this one.
    assert [x for x in after if after[x] <= 3.85] == list(range(6, 18))
    bound = min_batch_size(cost, agg, 100, rsf=0.5, after_end=3.85)
    assert bound.size == min(after, key=after.get) == 10 and not bound.bound_kept
    assert "only batches of 6 to 17 units fit" in bound.reason and "more than (1 + rsf)" in bound.reason
    # A deadline that the smallest MinBatch within the bound fits changes nothing.
    assert min_batch_size(cost, agg, 100, rsf=0.5, after_end=60.0) == free
    # One that no size fits: the size that finishes earliest after the window's end, and why.
    late = min_batch_size(cost, agg, 100, rsf=0.5, after_end=0.5)
    assert late.size == 10 and not late.bound_kept and "take 3.5 s at the least" in late.reason


def test_max_batches_sets_the_smallest_size():
    cost = LinearCost(per_unit=0.1, per_batch=0.01)    # batching is nearly free: the smallest size wins
    agg = LinearFinalAgg(base=0.1, per_batch=0.01)
    assert min_batch_size(cost, agg, 100, rsf=0.5).size < 7
    capped = min_batch_size(cost, agg, 100, rsf=0.5, max_batches=16)
    assert capped.size == 7 and capped.batches <= 16 and capped.bound_kept
