"""The paper's worked example (section 3.1, figure 2), through the API and the CLI, with every method."""

import json
import subprocess
import sys

import pytest

from airflow_iqp.planning.spec import METHODS, PlanSpec

CASES = {  # deadline: (sizes, readies, latest starts)
    16: ([10], [10], [11]),
    15: ([10], [10], [10]),
    12: ([6, 4], [6, 10], [7, 10]),
    11: ([4, 4, 2], [4, 8, 10], [6, 8, 10]),
}


def spec(deadline, method="greedy"):
    return {"window_start": 1, "window_end": 10, "deadline": deadline,
            "arrival": {"kind": "fixed_rate", "rate": 1.0, "total": 10},
            "cost": {"kind": "linear", "per_unit": 0.5, "per_batch": 0.0},
            "final_agg": {"kind": "linear", "base": 0.0, "per_batch": 0.0},
            "method": method}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("deadline", sorted(CASES))
def test_paper_example(deadline, method):
    plan = PlanSpec.from_dict(spec(deadline, method)).plan()
    sizes, readies, latest = CASES[deadline]
    assert plan.feasible
    assert plan.sizes == sizes
    assert [b.ready for b in plan.batches] == readies
    assert [b.latest_start for b in plan.batches] == latest
    assert plan.method == method


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("deadline", sorted(CASES))
def test_paper_example_cli_json(tmp_path, deadline, method):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec(deadline, method)))
    out = subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "plan", "--spec", str(path), "--json"],
                         capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    assert set(d) == {"feasible", "reason", "batches", "final_agg_cost", "total_cost", "slack"}
    sizes, readies, latest = CASES[deadline]
    assert d["feasible"] is True
    assert [b["units"] for b in d["batches"]] == sizes
    assert [b["ready"] for b in d["batches"]] == readies
    assert [b["latest_start"] for b in d["batches"]] == latest
    assert [b["index"] for b in d["batches"]] == list(range(1, len(sizes) + 1))
    assert d["total_cost"] == pytest.approx(5.0)


@pytest.mark.parametrize("deadline", [*sorted(CASES), 10.2])
def test_every_method_gives_the_same_plan(deadline):
    """Greedy, solver and exact agree on the four cases, batch for batch (and on the plan
    that finishes earliest when no plan meets the deadline)."""
    plans = {m: PlanSpec.from_dict(spec(deadline, m)).plan().to_dict() for m in METHODS}
    for d in plans.values():  # each method says it in its own words
        d.pop("method"), d.pop("extra", None), d.pop("reason")
    assert plans["greedy"] == plans["solver"] == plans["exact"]
    assert plans["exact"]["feasible"] == (deadline in CASES)


def test_cli_table_and_gantt(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec(11)))
    png = tmp_path / "out" / "plan.png"
    out = subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "plan", "--spec", str(path),
                          "--gantt", str(png)], capture_output=True, text=True, check=True).stdout
    assert "3/3" in out and "meets the deadline" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_infeasible_deadline_returns_earliest_finishing_plan():
    plan = PlanSpec.from_dict(spec(10.2)).plan()
    assert not plan.feasible
    assert "earliest finish is 10.5" in plan.reason
    # The earliest possible finish: the last unit arrives at 10 and costs 0.5 on its own.
    assert plan.earliest_finish == pytest.approx(10.5)
    assert plan.sizes[-1] == 1
