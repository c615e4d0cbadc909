"""A bad spec exits 2 with one line naming the field."""

import json
import subprocess
import sys

import pytest

GOOD = {"window_start": 1, "window_end": 10, "deadline": 12,
        "arrival": {"kind": "fixed_rate", "rate": 1.0, "total": 10},
        "cost": {"kind": "linear", "per_unit": 0.5, "per_batch": 0.0}}


def variant(**changes):
    d = json.loads(json.dumps(GOOD))
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = d
        for p in parents:
            node = node[p]
        if value is KeyError:
            del node[leaf]
        else:
            node[leaf] = value
    return d


CASES = [
    (variant(deadline=9), "deadline"),
    (variant(arrival__rate=0), "arrival.rate"),
    (variant(arrival__rate=-1), "arrival.rate"),
    (variant(arrival={"kind": "profile", "points": [[0, 0], [5, 6], [4, 8]]}), "arrival.points[2]"),
    (variant(arrival={"kind": "profile", "points": [[1, 0], [5, 6], [8, 4]]}), "arrival.points[2]"),
    (variant(cost={"kind": "piecewise_linear", "points": [[1, 5], [10, 3]]}), "cost.points[1]"),
    (variant(cost={"kind": "quadratic"}), "cost.kind"),
    (variant(arrival__kind="poisson"), "arrival.kind"),
    (variant(final_agg={"kind": "linear", "base": -1}), "final_agg.base"),
    (variant(cost__per_unit=KeyError), "cost.per_unit"),
    (variant(arrival__total=KeyError), "arrival.total"),
    (variant(window_end=KeyError), "window_end"),
    (variant(arrival={"kind": "profile", "points": [[1, 0], [12, 10]]}), "window_end"),  # last unit after window end
    (variant(method="magic"), "method"),
    (variant(method="minbatch"), "method"),  # names what chose fixed sizes: needs sizes
    (variant(margin=-1), "margin"),
    (variant(dispatch="5"), "dispatch"),
    (variant(sizes=[4, 0]), "sizes"),
    (variant(busy={"intervals": [[3, 2]]}), "busy"),
    (variant(busy={"spans": [[1, 2]]}), "busy"),
]


@pytest.mark.parametrize("spec,field", CASES, ids=[c[1] + f"-{i}" for i, c in enumerate(CASES)])
def test_bad_spec_exits_2_naming_the_field(tmp_path, spec, field):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    r = subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "plan", "--spec", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f": {field}: " in lines[0]


def test_not_json_and_missing_file(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text("{nope")
    for arg in (str(path), str(tmp_path / "missing.json")):
        r = subprocess.run([sys.executable, "-m", "airflow_iqp.cli.main", "plan", "--spec", arg],
                           capture_output=True, text=True)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
