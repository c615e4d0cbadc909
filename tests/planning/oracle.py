"""Independent checks of a plan, written from the problem statement, not from the planner."""

from __future__ import annotations

from itertools import combinations

TOL = 1e-7


def asap_finish(sizes, arrival, cost, final_agg, window_end):
    """Finish time when every batch starts as soon as its input is there and the executor is free."""
    t, cum = float("-inf"), 0
    for i, n in enumerate(sizes):
        cum += n
        ready = window_end if i == len(sizes) - 1 else arrival.time_of(cum)
        t = max(t, ready) + cost.cost(n)
    return (t if sizes else window_end) + final_agg.cost(len(sizes))


def check_plan(plan, arrival, cost, final_agg, window_end, deadline):
    """Assert the plan processes every unit once, respects input availability, runs batches in turn."""
    sizes = [b.units for b in plan.batches]
    assert all(n >= 1 for n in sizes), sizes
    assert sum(sizes) == arrival.total
    cum = 0
    for i, b in enumerate(plan.batches):
        cum += b.units
        assert b.index == i + 1
        assert b.cumulative == cum
        expected_ready = window_end if i == len(sizes) - 1 else arrival.time_of(cum)
        assert abs(b.ready - expected_ready) <= TOL
        assert arrival.count_at(b.ready + TOL) >= cum, "a batch is ready before its units have arrived"
        assert abs(b.cost - cost.cost(b.units)) <= TOL
        if i:
            prev = plan.batches[i - 1]
            assert prev.latest_start + prev.cost <= b.latest_start + TOL, "batches overlap"
    finish = asap_finish(sizes, arrival, cost, final_agg, window_end)
    assert abs(plan.slack - (deadline - finish)) <= 1e-6
    if plan.feasible:
        assert finish <= deadline + TOL
        for b in plan.batches:
            assert b.latest_start >= b.ready - TOL, "a batch must start before its input is ready"
        last = plan.batches[-1] if plan.batches else None
        if last:
            assert last.latest_start + last.cost + plan.final_agg_cost <= deadline + TOL
    else:
        assert finish > deadline - TOL
        assert plan.reason


def compositions(total):
    """Every way to cut ``total`` units, in arrival order, into consecutive batches."""
    for k in range(1, total + 1):
        for cuts in combinations(range(1, total), k - 1):
            bounds = (0, *cuts, total)
            yield [bounds[i + 1] - bounds[i] for i in range(k)]


def exhaustive(arrival, cost, final_agg, window_end, deadline):
    """(fewest batches meeting the deadline or None, earliest finish over all plans)."""
    best = best_plans(arrival, cost, final_agg, window_end, deadline)
    return (best[0] if best[2] <= deadline + TOL else None), best[2]


def best_plans(arrival, cost, final_agg, window_end, deadline):
    """(count, total cost, finish) of the best plan by exhaustive search: the fewest batches
    that meet the deadline, then the least total cost; if none meets it, the earliest
    finish, then the fewest batches, then the least total cost. Costs and finishes within
    ``TOL`` count as equal."""
    feasible, late = [], []
    for sizes in compositions(arrival.total):
        f = asap_finish(sizes, arrival, cost, final_agg, window_end)
        total = sum(cost.cost(n) for n in sizes) + final_agg.cost(len(sizes))
        (feasible if f <= deadline + TOL else late).append((len(sizes), total, f))
    if feasible:
        k = min(p[0] for p in feasible)
        return min((p for p in feasible if p[0] == k), key=lambda p: p[1])
    earliest = min(p[2] for p in late)
    first = [p for p in late if p[2] <= earliest + TOL]
    k = min(p[0] for p in first)
    return min((p for p in first if p[0] == k), key=lambda p: p[1])
