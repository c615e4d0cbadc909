"""The cluster's turns (airflow_iqp.coordination): one tail at a time, earliest deadline first,
and a batch held back for a query due earlier, on real files, without Airflow processes."""

from airflow_iqp.store import open_store
from tests.support.batches import make_batch


def test_cluster_turn_runs_one_tail_at_a_time_earliest_deadline_first(tmp_path):
    """Real flocks between threads (each holds its own open file, as separate processes would)."""
    import threading
    import time as _time

    from airflow_iqp.coordination import cluster_turn

    def tail(query, deadline):
        return make_batch(state_dir=str(tmp_path), query=query, window_id="w", index=3, of=3, deadline_ts=deadline,
                          cost=1.0)

    # A file nobody holds, as a killed task leaves it: ignored, and removed.
    stale = tmp_path / "_turns" / "waiting" / f"{1.0:020.6f}-dead-w-0003"
    stale.parent.mkdir(parents=True)
    stale.touch()
    order, inside = [], []
    first_in, release = threading.Event(), threading.Event()

    def run(query, deadline, hold=None):
        with cluster_turn(tail(query, deadline), slots=1, poll=0.01):
            inside.append(query)
            order.append(query)
            assert len(inside) == 1, inside  # never two at once
            if hold:
                first_in.set()
                release.wait(10)
            inside.remove(query)

    a = threading.Thread(target=run, args=("a", 30.0, True))
    a.start()
    assert first_in.wait(10)
    c = threading.Thread(target=run, args=("c", 20.0))  # queues first, deadline later
    c.start()
    _time.sleep(0.1)
    b = threading.Thread(target=run, args=("b", 10.0))
    b.start()
    _time.sleep(0.1)
    release.set()
    for t in (a, b, c):
        t.join(10)
    assert order == ["a", "b", "c"] and not stale.exists()
    assert [p for d in ("waiting", "running") for p in (tmp_path / "_turns" / d).iterdir()] == []
    with cluster_turn(tail("x", 1.0), slots=0):  # no gate: nothing written
        pass


def test_cluster_turn_gives_up_at_until_without_the_turn_and_leaves_no_file(tmp_path):
    """A rehearsal waits for its turn only until it is no longer wanted: the context then
    yields False, runs nothing on the cluster's account, and leaves the gate as it was."""
    import threading
    import time as _time

    from airflow_iqp.coordination import cluster_turn

    def tail(query, deadline):
        return make_batch(state_dir=str(tmp_path), query=query, window_id="w", index=3, of=3, deadline_ts=deadline)

    holding, release = threading.Event(), threading.Event()

    def hold():
        with cluster_turn(tail("a", 10.0), slots=1, poll=0.01) as got:
            assert got is True
            holding.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    assert holding.wait(10)
    t0 = _time.time()
    with cluster_turn(tail("b", 20.0), slots=1, poll=0.01, until=t0 + 0.3) as got:
        assert got is False
    assert 0.3 <= _time.time() - t0 < 2
    release.set()
    t.join(10)
    with cluster_turn(tail("b", 20.0), slots=1, poll=0.01, until=_time.time() + 5) as got:
        assert got is True  # the cluster is free: the turn at once
    assert [p for d in ("waiting", "running") for p in (tmp_path / "_turns" / d).iterdir()] == []
    with cluster_turn(tail("c", 1.0), slots=0, until=0.0) as got:  # no gate: always its turn
        assert got is True


def test_cluster_turn_leaves_the_cluster_to_a_batch_due_earlier_that_is_about_to_be_ready(tmp_path):
    """A later-deadline batch does not start when another query's batch due earlier (its
    plan.json, same window) will be ready before this one's cost is over and due to start
    before then: it waits for its claim. One long overdue (its DAG gone), or one whose
    latest start leaves room, holds nothing back."""
    import threading
    import time as _time

    from airflow_iqp.coordination import UPCOMING_GRACE_S, cluster_turn

    now = _time.time()
    state = tmp_path / "state"

    def entry(query, deadline, ready, **kw):
        return make_batch(**{"state_dir": str(state), "query": query, "window_id": "w", "index": 1, "of": 2,
                             "last": True, "deadline_ts": deadline, "ready_ts": ready, "latest_start_ts": ready,
                             "cost": 2.0, "remaining_cost": 2.5, **kw})

    early = entry("cq1", now + 3, now + 0.5)  # 2 s of q1 first, then its 2 s and merge: 4.5 s, late
    ws = open_store(state).window("cq1", "w")
    ws.write_doc("plan", {"batches": [early.to_dict()]})
    late = entry("q1", now + 60, now)

    def claim_early():
        _time.sleep(0.8)
        ws.claim(1, ["000001"], [])

    t = threading.Thread(target=claim_early)
    t.start()
    t0 = _time.time()
    with cluster_turn(late, slots=1, poll=0.01):
        waited = _time.time() - t0
        assert ws.has_claim(1)  # it started only once the earlier-due batch had claimed
    t.join()
    assert 0.6 < waited < 5
    # Overdue by more than the grace: not coming, holds nothing back.
    stale = entry("cq2", now + 10, now - 60)
    ws2 = open_store(state).window("cq2", "w")
    ws2.write_doc("plan", {"batches": [stale.to_dict()]})
    assert now - 60 + UPCOMING_GRACE_S < _time.time()
    t0 = _time.time()
    with cluster_turn(entry("q4", now + 70, now), slots=1, poll=0.01):
        assert _time.time() - t0 < 0.5
    # Ready before this one is done, but its query meets its deadline after it: nothing held back.
    roomy = [entry("cq3", now + 22, now + 0.5, last=False, remaining_cost=3.5),
             entry("cq3", now + 22, now + 20, index=2, cost=1.0, remaining_cost=1.5)]
    ws3 = open_store(state).window("cq3", "w")
    ws3.write_doc("plan", {"batches": [e.to_dict() for e in roomy]})
    t0 = _time.time()
    with cluster_turn(entry("q6", now + 80, _time.time()), slots=1, poll=0.01):
        assert _time.time() - t0 < 0.5 and not ws3.has_claim(1)
    # A fused tail holds the cluster through its merge (planned=): its batch alone (0.5 s)
    # leaves cq4 time, batch and merge (3 s) do not.
    t1 = _time.time()
    due = [entry("cq4", t1 + 3.0, t1 + 0.2, cost=1.0, remaining_cost=1.5)]
    ws4 = open_store(state).window("cq4", "w")
    ws4.write_doc("plan", {"batches": [e.to_dict() for e in due]})
    tail = entry("q10", now + 90, t1, cost=0.5, remaining_cost=3.0)
    with cluster_turn(tail, slots=1, poll=0.01):
        assert _time.time() - t1 < 0.5 and not ws4.has_claim(1)
    threading.Timer(0.6, lambda: ws4.claim(1, ["000002"], [])).start()
    with cluster_turn(tail, slots=1, poll=0.01, planned=tail.remaining_cost):
        assert ws4.has_claim(1) and _time.time() - t1 >= 0.6


def test_a_batch_is_held_back_only_if_the_query_due_earlier_would_then_finish_late(tmp_path):
    """coming runs the earlier-due query's rest as planned after this batch: each batch no
    sooner than its input, then the merge; late against its deadline holds this one back."""
    from airflow_iqp.coordination import coming

    def entry(index, ready, cost, remaining, deadline=125.0, **kw):
        return make_batch(**{"state_dir": str(tmp_path), "query": "cq1", "window_id": "w", "index": index, "of": 2,
                             "last": index == 2, "deadline_ts": deadline, "ready_ts": ready,
                             "latest_start_ts": ready, "cost": cost, "remaining_cost": remaining, **kw})

    plan = [entry(1, 98.0, 1.0, 2.5), entry(2, 120.0, 1.0, 1.5)]  # done at 121, merged 121.5
    assert coming(plan, 95.0, 4.0) == []  # runs 95-99; cq1: 99-100, 120-121, 121.5 <= 125
    assert coming(plan, 95.0, 2.0) == []  # cq1's first batch is ready after this one is done
    # Late because its input is: this batch changes nothing, and is not held back.
    late = [entry(1, 98.0, 1.0, 2.5, deadline=121.2), entry(2, 120.0, 1.0, 1.5, deadline=121.2)]
    assert coming(late, 95.0, 4.0) == []  # 121.5 either way
    assert [e.index for e in coming(late, 95.0, 25.5)] == [1, 2]  # cq1 from 120.5: 123 > 121.5
    # Its first batch overdue by more than the grace: only the last one counts.
    assert coming(plan, 117.0, 4.0) == []  # 117-121; cq1's last 121-122, merged 122.5 <= 125
    assert [e.index for e in coming(plan, 117.0, 8.0)] == [2]  # 125-126, merged 126.5 > 125
    # Planned with cost_scale 2: the gate reckons with half the planned seconds.
    halved = [e.with_(cost=2 * e.cost, remaining_cost=2 * e.remaining_cost, cost_scale=2.0) for e in plan]
    assert coming(halved, 117.0, 4.0) == [] and [e.index for e in coming(halved, 117.0, 8.0)] == [2]
    open_store(tmp_path).window("cq1", "w").claim(2, ["000001"], [])
    assert coming(plan, 117.0, 8.0) == []  # claimed: it has its place at the gate


def test_a_dynamic_mode_batch_queues_by_its_laxity_from_the_window_s_state(tmp_path):
    """Under ``turn_policy="llf"`` the gate's key is the deadline less the work the query has
    left, counted from its claims when the batch asks, not from the plan: a batch that
    claimed more units than planned leaves fewer batches, and less work, after it."""
    import pytest

    from airflow_iqp.coordination import cluster_turn, turn_key, work_left
    from airflow_iqp.errors import ConfigError
    from airflow_iqp.window.batch import Batch

    store = open_store(tmp_path)

    def batch(query, deadline, total, policy="llf"):
        ws = store.window(query, "w")
        ws.write_doc("plan", {"cost_model": {"kind": "linear", "per_unit": 1.0, "per_batch": 1.0},
                              "final_agg_model": {"kind": "linear", "base": 2.0, "per_batch": 0.0, "merge_single": True}})
        return make_batch(state_dir=str(tmp_path), query=query, window_id="w", index=1, of=4, units=10,
                          expected_total=total, deadline_ts=deadline, cost=11.0, remaining_cost=500.0,
                          last=False, turn_policy=policy)

    a, b = batch("a", 100.0, 40), batch("b", 80.0, 10)
    store.window("a", "w").claim(1, [f"a{i}" for i in range(10)], [f"/l/a{i}" for i in range(10)])
    store.window("b", "w").claim(1, [f"b{i}" for i in range(10)], [f"/l/b{i}" for i in range(10)])
    # a: its 10 units (11 s), 30 left in 3 batches of 10 (33 s), 4 partials merged (2 s).
    assert work_left(a) == pytest.approx(46.0) and turn_key(a) == pytest.approx(54.0)
    # b: its 10 units, none left, 1 partial merged. Due earlier, but with more laxity.
    assert turn_key(b) == pytest.approx(80.0 - 13.0)
    # EDF queues b first (80 against 100); least laxity first, a (54 against 67).
    assert turn_key(b.with_(turn_policy="edf")) < turn_key(a.with_(turn_policy="edf"))
    assert turn_key(a) < turn_key(b)
    # a claimed 25 units instead: 26 s, then 15 left (11 s + 6 s), 3 partials: 45 s.
    c = batch("c", 100.0, 40)
    store.window("c", "w").claim(1, [f"c{i}" for i in range(25)], [f"/l/c{i}" for i in range(25)])
    assert work_left(c) == pytest.approx(45.0)
    # Without the window's plan, or before its claim, the plan entry's own remaining cost.
    assert work_left(batch("d", 100.0, 40).with_(query="e")) == 500.0
    with cluster_turn(a, slots=1):
        running = [p.name for p in (tmp_path / "_turns" / "running").iterdir()]
    assert running == [f"{54.0:020.6f}-a-w-0001"]
    # The JSON keeps the default out, and refuses what is not a policy.
    assert "turn_policy" not in a.with_(turn_policy="edf").to_dict()
    assert Batch.from_dict(a.to_dict()).turn_policy == "llf"
    with pytest.raises(ConfigError, match="turn_policy"):
        a.with_(turn_policy="sjf")
