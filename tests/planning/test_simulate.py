"""The multi-query simulator: the paper's protocol (section 7.4) and the invariants of any run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.paper import load_models, paper_scenario
from airflow_iqp.planning.simulate import Scenario, estimate_total, simulate
from airflow_iqp.planning.models import FixedRate

MODELS = load_models(Path(__file__).parents[2] / "benchmarks" / "scenarios" / "paper_queries.json")


@pytest.mark.parametrize("delta", [1.0, 0.8, 0.6, 0.4, 0.2])
@pytest.mark.parametrize("policy", ["edf", "llf"])
def test_edf_and_llf_meet_every_deadline_down_to_0_2d(policy, delta):
    result = simulate(paper_scenario(MODELS, delta=delta, rsf=0.5), policy)
    assert result.deadlines_met == 12, [(q.id, q.completion, q.deadline) for q in result.queries if not q.met]
    assert result.normalized_cost <= 1.6


@pytest.mark.parametrize("delta", [0.4, 0.2, 0.1])
def test_round_robin_misses_deadlines_at_0_4d_and_below(delta):
    result = simulate(paper_scenario(MODELS, delta=delta, rsf=0.5), "rr")
    assert result.deadlines_met < 12


@pytest.mark.parametrize("policy", ["edf", "llf"])
def test_without_minbatch_costs_at_least_three_times_more(policy):
    sc = paper_scenario(MODELS, delta=1.0, rsf=0.5)
    with_mb = simulate(sc, policy)
    without = simulate(sc, policy, minbatch=False)
    assert without.normalized_cost >= 3 * with_mb.normalized_cost
    assert without.batches > 10 * with_mb.batches


def check_invariants(scenario, result):
    by_id = {q.id: q for q in scenario.queries}
    slots_busy = []
    for r in result.queries:
        q = by_id[r.id]
        assert sum(b.units for b in r.batches) == q.actual.total, "every unit processed exactly once"
        done = 0
        for i, b in enumerate(r.batches):
            assert b.start >= q.submit_at
            done += b.units
            assert q.actual.count_at(b.start) >= done, "a batch took units that had not arrived"
            if i:
                assert r.batches[i - 1].end <= b.start + 1e-9, "a query ran two batches at once"
            slots_busy.append((b.start, b.end))
        assert r.batches[-1].final and r.completion == r.batches[-1].end
    events = sorted([(s, 1) for s, _ in slots_busy] + [(e, -1) for _, e in slots_busy], key=lambda x: (x[0], x[1]))
    running = peak = 0
    for _, d in events:
        running += d
        peak = max(peak, running)
    assert peak <= scenario.slots, "more batches ran at once than there are slots"


@pytest.mark.parametrize("policy", ["llf", "edf", "sjf", "rr"])
@pytest.mark.parametrize("profile", ["fixed", "faster", "bursty", "slower", "stalled"])
def test_invariants_hold_for_every_policy_and_profile(policy, profile):
    sc = paper_scenario(MODELS, delta=0.4, rsf=1.0, profile=profile)
    check_invariants(sc, simulate(sc, policy))


def test_two_slots_run_two_batches_at_once_and_never_more():
    sc = paper_scenario(MODELS, delta=0.1, rsf=0.5, slots=2)
    result = simulate(sc, "edf")
    check_invariants(sc, result)
    one = simulate(paper_scenario(MODELS, delta=0.1, rsf=0.5, slots=1), "edf")
    assert result.deadlines_met >= one.deadlines_met
    spans = sorted((b.start, b.end) for q in result.queries for b in q.batches)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), "two slots never overlapped"


def query(qid, **over):
    q = {"id": qid, "submit_at": 0, "window_start": 0, "window_end": 100, "deadline": 160,
         "arrival": {"kind": "fixed_rate", "rate": 1.0, "total": 100},
         "cost": {"kind": "linear", "per_unit": 0.2, "per_batch": 2.0},
         "final_agg": {"kind": "linear", "base": 1.0, "per_batch": 0.1}}
    q.update(over)
    return q


def test_queries_added_later_start_after_submission():
    late = query("late", submit_at=50, window_start=50, window_end=150, deadline=220,
                 arrival={"kind": "fixed_rate", "rate": 1.0, "total": 100})
    sc = Scenario.from_dict({"queries": [query("early"), late], "slots": 1, "rsf": 0.5, "c_max": 30})
    result = simulate(sc, "llf")
    check_invariants(sc, result)
    assert all(r.met for r in result.queries)
    assert min(b.start for b in result.queries[1].batches) >= 50


def test_c_max_capping_is_reported_per_query():
    sc = Scenario.from_dict({"queries": [query("capped")], "slots": 1, "rsf": 0.1, "c_max": 5})
    r = simulate(sc, "edf").queries[0]
    assert not r.bound_kept and "c_max" in r.min_batch.reason
    assert all(b.end - b.start <= 5 + 1e-9 for b in r.batches if not b.final)


def test_unknown_total_is_estimated_from_the_observed_rate():
    a = FixedRate(rate=2.0, total=200, start=0.0)
    assert estimate_total(a, 0.0, 100.0, 25.0) == pytest.approx(200, rel=0.03)
    assert estimate_total(a, 0.0, 100.0, 100.0) == 200
    sc = Scenario.from_dict({"queries": [query("q", total_known=False)], "rsf": 0.5, "c_max": 30})
    r = simulate(sc, "llf")
    check_invariants(sc, r)
    assert r.queries[0].met


def test_cli_simulate_json_and_plot(tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"queries": [query("a"), query("b", deadline=150)], "slots": 1,
                                "rsf": 0.5, "c_max": 30}))
    png = tmp_path / "sim.png"
    out = subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "simulate", "--scenario", str(path),
                          "--policy", "edf", "--json", "--plot", str(png)], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    assert d["policy"] == "edf" and d["queries"] == 2 and d["deadlines_met"] == 2
    assert [q["id"] for q in d["per_query"]] == ["a", "b"]
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_simulate_bad_scenario_exits_2(tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({"queries": [query("a", deadline=50)]}))
    r = subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "simulate", "--scenario", str(path),
                        "--policy", "edf"], capture_output=True, text=True)
    assert r.returncode == 2 and "queries[0].deadline" in r.stderr and len(r.stderr.strip().splitlines()) == 1
