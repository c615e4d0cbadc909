"""The cost models a window is planned with: the backend's built-in default first, then the
cost history of what batches and merges took from claim to written output."""

from __future__ import annotations

from dataclasses import replace

import pytest

from airflow_iqp import backends
from airflow_iqp.backends import SparkConnect, SparkSubmit
from airflow_iqp.options import Algorithm1, Arrival
from airflow_iqp.planning.models import cost_model_from_dict, final_agg_from_dict
from airflow_iqp.store import WindowState, open_store
from airflow_iqp.store.files import atomic_write_json
from airflow_iqp.window.accounting import batch_span, merge_span, record_attempt
from airflow_iqp.window.config import QueryConfig, window_id
from airflow_iqp.window.costs import cost_models, expected_units, observed_offsets
from airflow_iqp.window.plan import plan_window
from tests.support.tasks import TI, rewrite_claim
from tests.support.batches import TPCH_STREAMS

START = 1_800_000_000.0


def cfg(tmp_path, backend=SparkSubmit(), cut=Algorithm1(), units=120) -> QueryConfig:
    """The demo's settings (120 units, one a second), as the plan task builds them."""
    options = {**Arrival(units=units).query_config(), **cut.query_config(), **backend.query_config()}
    return QueryConfig(query="cq2", landing=str(tmp_path / "landing"), state_dir=str(tmp_path / "state"),
                       streams=TPCH_STREAMS, **options)


def plan(c: QueryConfig, start: float = START):
    return plan_window(c, start, start + 120, start + 200, now=start)


def test_without_hint_or_history_each_backend_plans_with_its_own_default_and_says_so(tmp_path):
    for backend in (SparkSubmit(), SparkConnect()):
        c = cfg(tmp_path, backend)
        cost, agg, source = cost_models(c)
        default = backends.get(backend.name)
        assert cost == cost_model_from_dict(default.default_cost)
        assert agg.cost(3) == final_agg_from_dict(default.default_final_agg).cost(3)
        assert agg.cost(1) > 0  # the final task runs after a single batch too
        assert source == (f"cost from the built-in {backend.name} default; "
                          f"final aggregation from the built-in {backend.name} default")
        assert source in plan(c).models
    # A JVM per spark-submit: its start-up is far above a warm Connect server's.
    assert (cost_models(cfg(tmp_path, SparkSubmit()))[0].cost(1)
            > 3 * cost_models(cfg(tmp_path, SparkConnect()))[0].cost(1))


def test_a_hint_overrides_the_default_and_says_so(tmp_path):
    hint = {"kind": "linear", "per_unit": 0.6, "per_batch": 25}
    cost, agg, source = cost_models(cfg(tmp_path, cut=Algorithm1(cost_hint=hint)))
    assert cost.cost(10) == 31 + SparkSubmit.first_dispatch and source.startswith("cost from the configured hint; ")
    assert "final aggregation from the built-in spark-submit default" in source


def test_before_history_airflow_s_part_is_added_to_a_hint_and_a_fit_not_to_the_default(tmp_path):
    """A first window has no measured batches to learn ``dispatch`` from: each backend's
    ``first_dispatch`` stands for Airflow's part of a batch (and of a fused tail's start) on
    the models that leave it out; the built-in default includes it; a given one replaces it."""
    from airflow_iqp.window.costs import margins, tail_startup

    hint = {"kind": "linear", "per_unit": 0.1, "per_batch": 1.0}
    for backend in (SparkSubmit(), SparkConnect()):
        first = type(backend).first_dispatch
        assert first > 0
        hinted = cfg(tmp_path / backend.name, backend, Algorithm1(cost_hint=hint))
        cost, agg, source = cost_models(hinted)
        assert cost.cost(10) == pytest.approx(2.0 + first) and f"{first:g} s of task dispatch per batch" in source
        assert margins(hinted).samples == 0 and margins(hinted).dispatch == first
        default = cfg(tmp_path / backend.name, backend)
        assert cost_models(default)[0] == cost_model_from_dict(type(backend).default_cost)
        assert cost_models(cfg(tmp_path / backend.name, replace(backend, dispatch=0.5),
                               Algorithm1(cost_hint=hint)))[0].cost(10) == pytest.approx(2.5)
        fit_dir = tmp_path / backend.name / "fit"
        fitted = replace(hinted, cost_hint=None, state_dir=str(fit_dir))
        open_store(fit_dir).record_fit(query="cq2", backend=backend.name, cost=hint,
                                       final_agg={"kind": "linear", "base": 1.0})
        assert cost_models(fitted)[0].cost(10) == pytest.approx(2.0 + first)
    # On Spark Connect a fused tail's task is started before the window's end by that much.
    connect = cfg(tmp_path / "tail", SparkConnect(fuse_tail=True), Algorithm1(cost_hint=hint))
    assert tail_startup(connect, cost_models(connect)[0]) == SparkConnect.first_dispatch


def test_the_demo_meets_its_deadline_with_the_spark_submit_default(tmp_path):
    wp = plan(cfg(tmp_path))
    assert wp.plan.feasible and wp.plan.slack >= 10  # the margin kept
    assert "cost from the built-in spark-submit default" in wp.models


def test_dispatch_is_added_to_a_hint_but_not_to_the_default_nor_the_history_which_include_it(tmp_path):
    hinted = cfg(tmp_path, SparkSubmit(dispatch=5), Algorithm1(cost_hint={"kind": "linear", "per_unit": 1}))
    cost, agg, source = cost_models(hinted)
    assert cost.cost(10) == 15 and "5 s of task dispatch" in source
    default = cfg(tmp_path, SparkSubmit(dispatch=5))
    assert cost_models(default)[0].cost(10) == cost_models(cfg(tmp_path))[0].cost(10)
    assert "dispatch" not in cost_models(default)[2]
    for units, seconds in ((10, 12.0), (100, 18.0)):
        open_store(default.state_dir).record_cost(query="cq2", kind="batch", units=units, batches=1, wall_seconds=1.0,
                                                  end_to_end_seconds=seconds)
    assert cost_models(default)[0].cost(10) == pytest.approx(12.0)


def window(c: QueryConfig, start: float) -> WindowState:
    return open_store(c.state_dir).window(c.query, window_id(start))


def run_batch(ws: WindowState, index: int, units: list[str], claimed_at: float, seconds: float | None,
              tries: int = 1) -> float | None:
    """A batch as the provider runs one: claimed by its sensor, started by its task (an
    attempt per try), its partial written ``seconds`` after the claim (None: never)."""
    ws.claim(index, units, [f"/landing/{u}.csv" for u in units])
    rewrite_claim(ws, index, claimed_at=claimed_at)
    for t in range(1, tries + 1):
        record_attempt(ws, f"batch-{index:04d}", TI("batch.submit", index - 1, t))
    if seconds is None:
        return None
    atomic_write_json(ws.metrics_uri(index), {"units": len(units), "written_at": claimed_at + seconds})
    return batch_span(ws, index, ws.claim_of(index)["claimed_at"], claimed_at + seconds)


def test_a_batch_costs_what_it_took_from_its_claim_to_its_written_partial(tmp_path):
    ws = window(cfg(tmp_path), START)
    assert run_batch(ws, 1, ["a", "b"], 1000.0, 27.5) == 27.5
    # A retried batch's span holds the failed attempt and the wait: not one batch's cost.
    assert run_batch(ws, 2, ["c"], 1100.0, 90.0, tries=2) is None
    # No task of its own (a fused tail's batch, in a session open before its claim).
    assert run_batch(ws, 3, ["d"], 1200.0, 3.0, tries=0) is None
    # A claim made outside Airflow (no task attempt), or one without a time.
    ws.claim(4, ["e"], ["/landing/e.csv"])
    assert batch_span(ws, 4, 1.0, 5.0) is None
    assert batch_span(ws, 1, None, 5.0) is None


def test_a_merge_costs_what_it_took_from_the_last_batch_s_end_to_the_written_result(tmp_path):
    ws = window(cfg(tmp_path), START)
    run_batch(ws, 1, ["a", "b"], 1000.0, 20.0)
    run_batch(ws, 2, ["c"], 1100.0, 22.0)
    ws.claim(3, [], [])  # a batch that found nothing to claim ends when it claims
    rewrite_claim(ws, 3, claimed_at=1125.0)
    assert merge_span(ws, 1150.0) is None  # the final task has not started
    record_attempt(ws, "final", TI("final"))
    assert merge_span(ws, 1150.0) == pytest.approx(1150.0 - 1125.0)
    rewrite_claim(ws, 3, claimed_at=1110.0)
    assert merge_span(ws, 1150.0) == pytest.approx(1150.0 - 1122.0)
    record_attempt(ws, "final", TI("final", try_number=2))
    assert merge_span(ws, 1150.0) is None  # retried
    other = window(cfg(tmp_path), START + 120)
    run_batch(other, 1, ["x"], 2000.0, None)  # claimed, never written: its end is unknown
    record_attempt(other, "final", TI("final"))
    assert merge_span(other, 2100.0) is None


def true_batch(units: int) -> float:
    """What a batch takes on the machine, claim to partial: 11.5 s of task, JVM and session
    start-up, then the Spark work. Its Spark step alone is 7 s less."""
    return 11.5 + 0.075 * units


def true_merge(partials: int) -> float:
    return 14.0 + 0.3 * partials


def run_window(c: QueryConfig, start: float, noise: float):
    """Plan a window, run its batches and merge as taking ``true_*`` times ``1 ± noise``,
    and record them in the cost history as the batch and final jobs do."""
    wp = plan(c, start)
    ws = window(c, start)
    t = start + 120
    for i, b in enumerate(wp.batches):
        seconds = true_batch(b.units) * (1 + noise * (-1) ** i)
        span = run_batch(ws, b.index, [f"{start:.0f}-{b.index}-{u}" for u in range(b.units)], t, seconds)
        open_store(c.state_dir).record_cost(query=c.query, kind="batch", units=b.units, batches=1,
                                            wall_seconds=seconds - 7, backend=c.backend, end_to_end_seconds=span)
        t += seconds
    record_attempt(ws, "final", TI("final"))
    merged = t + true_merge(len(wp.batches)) * (1 + noise)
    open_store(c.state_dir).record_cost(query=c.query, kind="final", units=c.units, batches=len(wp.batches),
                                        wall_seconds=1.0, backend=c.backend, end_to_end_seconds=merge_span(ws, merged))
    return wp


@pytest.mark.parametrize("backend", [SparkSubmit(), SparkSubmit(dispatch=3), SparkConnect()],
                         ids=["spark-submit", "with-dispatch", "spark-connect"])
def test_the_second_window_plans_each_batch_and_the_merge_within_a_quarter_of_what_they_take(tmp_path, backend):
    c = cfg(tmp_path, backend)
    first = run_window(c, START, noise=0.05)
    assert "built-in" in first.models
    second = plan(c, START + 120)
    assert "cost from the built-in" not in second.models and "aggregation from the built-in" not in second.models
    assert "measured from claim to partial" in second.models
    assert "measured from the last batch's end" in second.models and "dispatch" not in second.models
    for b in second.batches:
        assert b.cost == pytest.approx(true_batch(b.units), rel=0.25), b.label
    assert second.plan.final_agg_cost == pytest.approx(true_merge(len(second.batches)), rel=0.25)


def test_one_measured_size_moves_the_default_to_it_and_keeps_its_cost_per_unit(tmp_path):
    c = cfg(tmp_path)
    per_unit = SparkSubmit.default_cost["per_unit"]
    for seconds in (30.0, 32.0):
        open_store(c.state_dir).record_cost(query="cq2", kind="batch", units=40, batches=1, wall_seconds=5.0,
                                            end_to_end_seconds=seconds)
        open_store(c.state_dir).record_cost(query="cq2", kind="final", units=40, batches=1, wall_seconds=5.0,
                                            end_to_end_seconds=seconds - 10)
    cost, agg, source = cost_models(c)
    assert cost.cost(40) == pytest.approx(31.0) and cost.cost(80) == pytest.approx(31.0 + 40 * per_unit)
    assert agg.cost(1) == pytest.approx(21.0)
    assert "2 batches of 40 units measured from claim to partial" in source
    assert "2 merges of 1 partials measured from the last batch's end" in source
    # Faster than the default's cost per unit allows: the line from zero through it.
    for units in (100, 100):
        open_store(c.state_dir).record_cost(query="cq3", kind="batch", units=units, batches=1, wall_seconds=1.0,
                                            end_to_end_seconds=5.0)
    fast, _agg, _s = cost_models(replace(c, query="cq3"))
    assert fast.cost(100) == pytest.approx(5.0) and fast.cost(50) == pytest.approx(2.5)


def test_records_without_a_claim_to_partial_span_are_not_fitted(tmp_path):
    """A calibration's batches and the Spark step alone leave the task's start out."""
    c = cfg(tmp_path)
    for units in (10, 100):
        open_store(c.state_dir).record_cost(query="cq2", kind="batch", units=units, batches=1, wall_seconds=4.5,
                                            source="calibrate")
        open_store(c.state_dir).record_cost(query="cq2", kind="batch", units=units, batches=1, wall_seconds=4.5,
                                            end_to_end_seconds=None)
    assert cost_models(c)[2].startswith("cost from the built-in spark-submit default")


def test_a_query_id_in_capitals_finds_its_own_history_and_arrivals(tmp_path):
    """The store normalises a query's id once: a DAG named ``Revenue`` plans from what its
    earlier windows recorded, whatever case the id is written in."""
    c = replace(cfg(tmp_path, units=None), query="Revenue", rate=1.0)
    store = open_store(c.state_dir)
    for window in ("20260101T000000", "20260101T000200", "20260101T000400"):
        store.window("revenue", window).write_doc("arrivals", {"offsets": [1.0] * 30, "units": [f"u{i}" for i in range(30)]})
    assert expected_units(c, 120) == (30, "median of 3 earlier windows")
    assert observed_offsets(replace(c, units=30, arrival="observed")) == [1.0] * 30
    store.record_cost(query="REVENUE", kind="batch", units=10, batches=1, wall_seconds=1.0, end_to_end_seconds=12.0)
    assert "1 batches of 10 units measured from claim to partial" in cost_models(c)[2]


def test_margins_are_learned_from_the_last_windows_and_the_cluster_s_other_queries(tmp_path, monkeypatch):
    """Batches that took 1.5 times their calibrated cost plus 2 s teach the plan about that
    much (covering 90 % of them); given margins are kept; a query on the same cluster with
    no history of its own learns from the others'."""
    from airflow_iqp.window import costs
    from airflow_iqp.window.plan import register_on_cluster

    fit = {"kind": "linear", "per_unit": 0.1, "per_batch": 1.0}
    c = replace(cfg(tmp_path), cluster="c1")
    store = open_store(c.state_dir)
    for q in ("cq2", "cq3"):
        store.record_fit(query=q, backend=c.backend, cost=fit, final_agg={"kind": "linear", "base": 1.0})
    model = cost_model_from_dict(fit)
    for w in range(3):
        for units, noise in ((10, 1.0), (40, 0.97), (80, 1.02), (120, 0.99)):
            store.record_cost(query="cq2", kind="batch", units=units, batches=1, wall_seconds=1.0,
                              window=window_id(START + 120 * w),
                              end_to_end_seconds=(1.5 * model.cost(units) + 2.0) * noise)
    m = costs.margins(c)
    assert m.samples == 12 and m.covered >= 0.9
    assert 1.3 <= m.scale <= 1.8 and 0.0 <= m.dispatch <= 3.5
    cost, _agg, source = cost_models(c)
    assert cost.cost(50) == pytest.approx(m.scale * model.cost(50) + m.dispatch)
    assert f"margins: costs x {m.scale:.2f}" in source
    # Given, they are kept: the calibrated cost as it is.
    given = replace(c, cost_scale=1.0, dispatch=0.0)
    assert cost_models(given)[0].cost(50) == pytest.approx(model.cost(50)) and "margins" not in cost_models(given)[2]
    # Only the newest windows count.
    monkeypatch.setattr(costs, "MARGIN_WINDOWS", 2)
    assert costs.margins(c).samples == 8
    monkeypatch.undo()
    # cq3 has no batches of its own: alone it learns nothing; on cq2's cluster it learns from cq2's.
    cq3 = replace(c, query="cq3")
    assert costs.margins(replace(cq3, cluster=None)).samples == 0
    assert costs.margins(cq3).samples == 0  # cq2 is not registered yet
    register_on_cluster(c, START, START + 120, START + 200)
    assert costs.margins(cq3) == m
