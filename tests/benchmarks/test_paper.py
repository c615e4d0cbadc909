"""The paper's multi-query scenario built from this project's own calibrations (benchmarks/paper.py)."""

import json

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.planning.models import cost_model_from_dict
from airflow_iqp.planning.simulate import simulate
from benchmarks.paper import models_from_calibration, paper_scenario


def fit(query, backend, cost, at):
    return {"kind": "fit", "query": query, "backend": backend, "cost": cost, "recorded_at": at,
            "final_agg": {"kind": "linear", "base": 0.2, "per_batch": 0.01, "merge_single": True}}


def test_each_query_s_newest_fit_on_the_backend_is_stretched_to_the_protocol_s_window(tmp_path):
    history = tmp_path / "cost_history.jsonl"
    old = {"kind": "linear", "per_unit": 9.0, "per_batch": 9.0}
    linear = {"kind": "linear", "per_unit": 0.015, "per_batch": 0.3}
    piecewise = {"kind": "piecewise_linear", "points": [[1.0, 0.12], [10.0, 0.15], [100.0, 0.9]]}
    records = [fit("cq1", "spark-connect", old, 1), fit("cq1", "spark-connect", linear, 2),
               fit("q6", "spark-connect", piecewise, 3), fit("q6", "spark-submit", old, 4),
               {"kind": "batch", "query": "q6", "backend": "spark-connect", "units": 3}]
    history.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    models = models_from_calibration(history, "spark-connect", calibrated_units=300)
    assert models["units"] == 4500 and [q["id"] for q in models["queries"]] == ["cq1", "q6"]
    by_id = {q["id"]: q for q in models["queries"]}
    for q, original in (("cq1", linear), ("q6", piecewise)):
        stretched, calibrated = cost_model_from_dict(by_id[q]["cost"]), cost_model_from_dict(original)
        # n protocol units read what n * 300 / 4500 calibrated units held.
        for n in (15, 150, 1500, 4500):
            assert stretched.cost(n) == pytest.approx(calibrated.cost(n * 300 / 4500))
        assert by_id[q]["final_agg"]["base"] == 0.2
    assert [q["id"] for q in models_from_calibration(history, "spark-connect", 300, queries=["q6"])["queries"]] \
        == ["q6"]
    result = simulate(paper_scenario(models, delta=0.2, rsf=0.5), "llf")
    assert result.summary()["queries"] == 2
    with pytest.raises(ConfigError, match="q9"):
        models_from_calibration(history, "spark-connect", 300, queries=["cq1", "q9"])
    history.write_text(json.dumps(fit("cq1", "spark-connect", {"kind": "callable"}, 1)) + "\n")
    with pytest.raises(ConfigError, match="stretch"):
        models_from_calibration(history, "spark-connect", 300)
