"""A group of queries over the same streams, planned once (airflow_iqp.window.group)."""

import json

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import (
    LinearCost, LinearFinalAgg, PiecewiseLinearCost, PiecewiseLinearFinalAgg, shared_batch_cost, summed_final_agg,
)
from airflow_iqp.store import ClaimError, open_store
from airflow_iqp.window.batch import Batch
from airflow_iqp.window.config import QueryConfig, window_id
from airflow_iqp.window.group import entries_of, plan_group
from tests.support.batches import TPCH_STREAMS

START = 1_800_000_000.0
HINT = {"cost_hint": {"kind": "linear", "per_unit": 0.05, "per_batch": 10},
        "final_agg_hint": {"kind": "linear", "base": 5, "per_batch": 0.5}}


def group(tmp_path, members, **over):
    base = dict(query="orders_group", landing=str(tmp_path / "landing"), state_dir=str(tmp_path / "state"), units=240,
                streams=TPCH_STREAMS, rate=1.0, margin=5.0, members=members, **HINT)
    base.update(over)
    return QueryConfig(**base)


def test_a_group_s_batch_pays_one_start_up_and_every_query_s_work_per_unit():
    a, b = LinearCost(per_unit=0.1, per_batch=10), LinearCost(per_unit=0.2, per_batch=6)
    both = shared_batch_cost([a, b])
    assert both.per_unit == pytest.approx(0.3) and both.per_batch == pytest.approx(10 + 0.1 * 6)
    assert both.cost(100) < a.cost(100) + b.cost(100)
    p = PiecewiseLinearCost(((1, 4.0), (50, 9.0), (200, 20.0)))
    mixed = shared_batch_cost([a, p])
    for n in (1, 50, 120, 200):
        assert mixed.cost(n) == pytest.approx(a.cost(n) + p.cost(n) - 0.9 * min(10, p.overhead), abs=1e-6)
    merges = summed_final_agg([LinearFinalAgg(base=2, per_batch=1, merge_single=True),
                               PiecewiseLinearFinalAgg(((1, 3.0), (4, 6.0)))])
    assert merges.merge_single and merges.cost(1) == pytest.approx(3.0) and merges.cost(4) == pytest.approx(12.0)
    with pytest.raises(ConfigError):
        shared_batch_cost([])


def test_on_spark_connect_a_shared_batch_pays_every_query_s_start_up_and_says_so_when_apart_is_cheaper(tmp_path):
    # spark-submit: a batch's fixed cost is mostly its JVM's start, paid once by the group;
    # Spark Connect: each query's own Spark jobs, paid again by every query in the batch.
    members = {"q_a": 60.0, "q_b": 60.0, "q_c": 90.0}
    plans = {b: plan_group(group(tmp_path / b, members, backend=b, cost_scale=1.0, dispatch=0.0), START, START + 240,
                           now=START) for b in ("spark-submit", "spark-connect")}
    for backend, share in (("spark-submit", 0.1), ("spark-connect", 1.0)):
        for b in plans[backend].plan.batches:
            assert b.cost == pytest.approx(10 + 2 * share * 10 + 3 * 0.05 * b.units)
    assert plans["spark-submit"].advice == ""
    connect = plans["spark-connect"]
    assert "fewer, larger batches on their own" in connect.models and connect.advice.startswith("give q_c")


def test_queries_due_together_share_batches_and_each_final_sees_them_all(tmp_path):
    cfg = group(tmp_path, {"q_a": 60.0, "q_b": 60.0, "q_c": 90.0})
    wp = plan_group(cfg, START, START + 240, now=START, store=True)
    assert "shared by q_a, q_b, q_c" in wp.models
    assert all(b.members == ("q_a", "q_b", "q_c") and b.query == "orders_group" for b in wp.batches)
    assert wp.deadline == START + 240 + 60  # the earliest deadline among the queries
    assert wp.batches[0].label.endswith("· 3 queries")
    for q in cfg.members:
        assert entries_of(wp.batches, q) == wp.batches
    # Stored as the group's plan: its claims are the group's.
    assert open_store(cfg.state_dir).window("orders_group", window_id(START)).doc("plan")["batches"]


def test_deadlines_far_apart_say_before_any_data_moves_that_queries_apart_would_do_better(tmp_path):
    # q_a is due 40 s after the window: shared, every batch must meet that, with all three
    # queries' work in it and their merges one after another; apart, only q_a's must.
    cfg = group(tmp_path, {"q_a": 40.0, "q_b": 3000.0, "q_c": 3000.0})
    wp = plan_group(cfg, START, START + 240, now=START, store=True)
    assert "apart, each query would meet its own" in wp.models or "fewer, larger batches on their own" in wp.models
    assert wp.advice == "give q_b, q_c DAGs of their own (iqp_dag), or the group a later deadline"
    assert wp.advice in wp.models
    # The batches stay shared (every final task waits for them): each query's are all of them.
    assert wp.batches and all(b.members == ("q_a", "q_b", "q_c") for b in wp.batches)
    assert all(entries_of(wp.batches, q) == wp.batches for q in cfg.members)
    together = plan_group(group(tmp_path, {"q_a": 60.0, "q_b": 60.0, "q_c": 90.0}), START, START + 240, now=START)
    assert together.advice == ""


def test_a_member_adopts_the_group_s_claim_once_and_refuses_another(tmp_path):
    store = open_store(tmp_path / "state")
    g = store.window("orders_group", window_id(START))
    claim = g.claim(1, ["u1", "u2"], ["/l/u1/orders.parquet", "/l/u2/orders.parquet"])
    member = store.window("q_a", window_id(START))
    assert member.adopt_claim(1, claim) == claim
    assert member.adopt_claim(1, claim) == claim  # a retry finds it
    assert member.claimed_units() == {"u1", "u2"}
    other = g.claim(2, ["u3"], ["/l/u3/orders.parquet"])
    with pytest.raises(ClaimError, match="q_a"):
        member.adopt_claim(1, other)
    with pytest.raises(ConfigError, match="members"):
        group(tmp_path, {"../x": 10.0})


def test_a_fused_tail_merging_earliest_deadline_first_holds_the_plan_to_the_tightest_staggered_deadline(tmp_path):
    from airflow_iqp.window.group import tail_deadline

    # Each member's merge runs even after one batch (merge_single), as plan_group has it.
    hint = LinearCost(per_unit=0.05, per_batch=10), LinearFinalAgg(base=5, per_batch=0.5, merge_single=True)
    by_member = {"q_a": hint, "q_b": hint, "q_c": hint}
    offsets = {"q_a": 20.0, "q_b": 60.0, "q_c": 100.0}
    # Each later member adds its step without the start-up (0.05 * 40 + 1) and its merge
    # of 2 partials (6): q_a may finish 18 s later than its own deadline, q_b 9 s, q_c 0.
    assert tail_deadline(by_member, offsets, 40, 2, 0.1) == pytest.approx(min(20 + 18, 60 + 9, 100))
    assert tail_deadline(by_member, {**offsets, "q_b": 25.0}, 40, 2, 0.1) == pytest.approx(25 + 9)
    # Where each member pays its whole start-up (Spark Connect), each adds 9 s more.
    assert tail_deadline(by_member, offsets, 40, 2, 1.0) == pytest.approx(min(20 + 2 * 18, 60 + 18, 100))

    earliest = plan_group(group(tmp_path, offsets), START, START + 240, now=START)
    fused = plan_group(group(tmp_path, offsets, fuse_tail=True), START, START + 240, now=START)
    assert earliest.deadline == START + 240 + 20
    # Held to the staggered deadline its own last batch allows, later than the earliest one,
    # and so no more batches than the plan held to the earliest deadline.
    last, k = fused.plan.batches[-1].units, len(fused.plan.batches)
    assert START + 240 + 20 < fused.deadline <= START + 240 + tail_deadline(by_member, offsets, last, k, 0.1) + 1e-6
    assert fused.plan.feasible and k <= len(earliest.plan.batches)
    assert "each member by its own" in fused.models
    assert all(b.members == ("q_a", "q_b", "q_c") for b in fused.batches)  # earliest deadline first
    # The tail carries each member's deadline and its planned step and merge (0.05 * last
    # + 1 + 5 + 0.5 * k), for the order it starts them in; no other batch does.
    tail = fused.batches[-1]
    assert tail.member_due() == {m: (pytest.approx(START + 240 + off), pytest.approx(0.05 * last + 1 + 5 + 0.5 * k))
                                 for m, off in offsets.items()}
    assert not any(b.member_seconds for b in fused.batches[:-1]) and not earliest.batches[-1].member_seconds
    # They travel as JSON (XCom, a job's argument) and come back checked.
    assert Batch.from_dict(json.loads(json.dumps(tail.to_dict()))) == tail
    assert "member_seconds" not in earliest.batches[-1].to_dict()
    with pytest.raises(ConfigError, match="member_seconds must be one number of seconds per member"):
        tail.with_(member_seconds=(1.0, 2.0))
    # Rehearsed before the window's end: the members whose planned finish, earliest
    # deadline first, leaves them less than their own seconds; the tail starts earlier by
    # twice their seconds, but never before a second after the first batch is ready. A
    # query's own tail, or a plan of one batch, starts at the backend's lead alone.
    from airflow_iqp.window.readiness import split_tail, tail_lead, to_rehearse

    base = earliest.batches  # several batches; the fused plan above is one
    r, first = base[-1].ready_ts, base[0].ready_ts
    assert len(base) >= 2 and r - first > 17.0
    tight = base[-1].with_(member_deadlines=(r + 3, r + 5, r + 20), member_seconds=(2.0, 2.0, 2.0))
    plan = [*base[:-1], tight]
    assert to_rehearse(tight) == ("q_a", "q_b") and tail_lead(plan, 8.0) == pytest.approx(16.0)
    assert split_tail(plan, tail_lead(plan, 8.0))[1].start_ts == pytest.approx(r - 16.0)
    slow = [*base[:-1], tight.with_(member_seconds=(1000.0, 1000.0, 1000.0))]
    assert tail_lead(slow, 8.0) == pytest.approx(r - first - 1.0)
    assert split_tail(slow, tail_lead(slow, 8.0))[0] == base[:1]
    roomy = tight.with_(member_deadlines=(r + 30, r + 50, r + 70))
    assert to_rehearse(roomy) == () and tail_lead([*base[:-1], roomy], 8.0) == 8.0
    assert to_rehearse(tight.with_(member_deadlines=(), member_seconds=())) == ("q_a", "q_b", "q_c")
    assert tail_lead(base, 8.0) == 8.0 and tail_lead([tight], 8.0) == 8.0
    # Given in another order, the members still run earliest deadline first.
    again = plan_group(group(tmp_path, {"q_c": 100.0, "q_a": 20.0, "q_b": 60.0}, fuse_tail=True), START,
                       START + 240, now=START)
    assert again.batches[0].members == ("q_a", "q_b", "q_c")
