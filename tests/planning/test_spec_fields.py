"""What a spec holds besides its window and models: the margin, the dispatch, fixed sizes and
other queries' busy time, the fields a DAG's plan task plans with too."""

from __future__ import annotations

import pytest

from airflow_iqp.planning.planner import executed
from airflow_iqp.planning.spec import PlanSpec

SPEC = {"window_start": 0, "window_end": 100, "deadline": 130,
        "arrival": {"kind": "fixed_rate", "rate": 1.0, "total": 100},
        "cost": {"kind": "linear", "per_unit": 0.2, "per_batch": 5.0},
        "final_agg": {"kind": "linear", "base": 4.0, "per_batch": 0.5}}


def planned(**changes):
    return PlanSpec.from_dict({**SPEC, **changes}).plan()


def test_the_margin_is_kept_between_each_batch_s_input_and_its_latest_start():
    bare, kept = planned(), planned(margin=8)
    assert bare.feasible and kept.feasible and kept.deadline == bare.deadline == 130
    assert min(b.latest_start - b.ready for b in bare.batches) < 8
    assert all(b.latest_start - b.ready >= 8 - 1e-9 for b in kept.batches)
    assert len(kept.batches) > len(bare.batches)
    # A margin no plan keeps whole (the cut is never before the window's end): the plan
    # that finishes earliest, which still meets the deadline.
    wide = planned(margin=60)
    assert wide.feasible and len(wide.batches) >= len(kept.batches)


def test_dispatch_is_paid_by_every_batch_and_by_the_merge():
    bare, dispatched = planned(sizes=[50, 50]), planned(sizes=[50, 50], dispatch=3)
    assert [b.cost for b in dispatched.batches] == [b.cost + 3 for b in bare.batches]
    assert dispatched.final_agg_cost == bare.final_agg_cost + 3


def test_merge_single_makes_one_batch_pay_the_final_step():
    alone = {"kind": "linear", "base": 4.0, "per_batch": 0.5}
    assert planned(sizes=[100], final_agg=alone).final_agg_cost == 0
    assert planned(sizes=[100], final_agg={**alone, "merge_single": True}).final_agg_cost == 4.5


def test_fixed_sizes_are_planned_as_given_and_name_what_chose_them():
    plan = planned(sizes=[30, 70], method="minbatch")
    assert plan.sizes == [30, 70] and plan.method == "minbatch"
    assert plan.batches[0].ready == pytest.approx(29) and plan.batches[1].ready == 100


def test_other_queries_busy_time_is_left_free():
    busy = {"intervals": [[100.0, 110.0]], "whole": True}
    spec = PlanSpec.from_dict({**SPEC, "busy": busy})
    free, shared = planned(), spec.plan()
    assert free.sizes == [100] and shared.feasible and len(shared.batches) > 1
    assert all(e <= 100 or s >= 110 for s, e in executed(shared, spec.busy))


def test_a_spec_round_trips_through_json_to_the_same_plan():
    for changes in ({}, {"margin": 8, "dispatch": 2}, {"sizes": [40, 60], "method": "one_batch"},
                    {"busy": {"intervals": [[100.0, 110.0]], "whole": True}}):
        spec = PlanSpec.from_dict({**SPEC, **changes})
        assert PlanSpec.from_dict(spec.to_dict()) == spec
        assert PlanSpec.from_dict(spec.to_dict()).plan().to_dict() == spec.plan().to_dict()
