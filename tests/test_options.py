"""The typed settings of ``iqp_dag``: each object refuses a bad value or combination when it
is built, naming the field to fix, and yields its part of the runtime's QueryConfig."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from airflow_iqp.errors import ConfigError
from airflow_iqp.backends import Backend, SparkConnect, SparkSubmit
from airflow_iqp.options import Alerts, Algorithm1, Arrival, Cut, MinBatches, OneBatch
from airflow_iqp.window.config import QueryConfig
from tests.support.batches import TPCH_STREAMS

ROOT = Path(__file__).resolve().parents[1]


def refused(build, field: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        build()
    assert err.value.field == field, str(err.value)
    assert str(err.value).startswith(field + ":")
    return err.value


# ----------------------------------------------------------------------------- bad values

@pytest.mark.parametrize("build, field", [
    (lambda: Arrival(units=0), "arrival.units"),
    (lambda: Arrival(units=2.5), "arrival.units"),
    (lambda: Arrival(units=True), "arrival.units"),
    (lambda: Arrival(rate=0), "arrival.rate"),
    (lambda: Arrival(rate="fast"), "arrival.rate"),
    (lambda: Arrival(profile="steady"), "arrival.profile"),
    (lambda: Arrival(observed="yes"), "arrival.observed"),
    (lambda: Arrival(grace=-1), "arrival.grace"),
    (lambda: Arrival(grace=timedelta(seconds=-1)), "arrival.grace"),
    (lambda: Arrival(late="drop"), "arrival.late"),
    (lambda: Arrival(late="merge", lateness=float("nan")), "arrival.lateness"),
    (lambda: Algorithm1(margin=-1), "cut.margin"),
    (lambda: Algorithm1(ahead=-5), "cut.ahead"),
    (lambda: Algorithm1(shares=[("cq1", 60)]), "cut.shares"),
    (lambda: Algorithm1(shares={"cq1": -1}), "cut.shares.cq1"),
    (lambda: Algorithm1(cost_hint={"per_unit": 1}), "cut.cost_hint.kind"),
    (lambda: Algorithm1(cost_hint="linear"), "cut.cost_hint"),
    (lambda: Algorithm1(final_agg_hint={"kind": "cubic"}), "cut.final_agg_hint.kind"),
    (lambda: OneBatch(cost_scale=0), "cut.cost_scale"),
    (lambda: MinBatches(rsf=-0.1), "cut.rsf"),
    (lambda: MinBatches(c_max=0), "cut.c_max"),
    (lambda: MinBatches(max_batches=0), "cut.max_batches"),
    (lambda: Cut(), "cut"),
    (lambda: SparkSubmit(retries=-1), "backend.retries"),
    (lambda: SparkSubmit(fuse_tail=1), "backend.fuse_tail"),
    (lambda: SparkSubmit(tail_lead=-1), "backend.tail_lead"),
    (lambda: SparkConnect(tail_slots=-1), "backend.tail_slots"),
    (lambda: SparkConnect(dispatch=-0.5), "backend.dispatch"),
    (lambda: SparkConnect(pool=""), "backend.pool"),
    (lambda: SparkConnect(weight_rule=3), "backend.weight_rule"),
    (lambda: SparkSubmit(conf={"spark.executor.memory": ["1g"]}), "backend.conf"),
    (lambda: SparkSubmit(conf="spark.executor.memory=1g"), "backend.conf"),
    (lambda: Backend(), "backend"),
    (lambda: Alerts(deadline="no"), "alerts.deadline"),
    (lambda: Alerts(on_miss="log"), "alerts.on_miss"),
    (lambda: Alerts(on_risk="warn"), "alerts.on_risk"),
])
def test_a_bad_value_names_its_field(build, field):
    refused(build, field)


# ----------------------------------------------------------------------------- cross-field rules

def test_shares_and_ahead_exclude_each_other():
    err = refused(lambda: Algorithm1(shares={"cq1": 60}, ahead=30), "cut.shares")
    assert "not both" in str(err)
    Algorithm1(shares={"cq1": 60})
    Algorithm1(ahead=30)
    Algorithm1(shares={}, ahead=30)  # no other query: nothing to plan with


def test_tail_slots_on_spark_submit_need_a_fused_tail():
    err = refused(lambda: SparkSubmit(tail_slots=1, fuse_tail=False), "backend.tail_slots")
    assert "fuse_tail=True" in str(err) and "SparkConnect" in str(err)
    # Left to the default, it is refused where the default is decided: a query's DAG fuses no tail.
    refused(lambda: SparkSubmit(tail_slots=1).with_fuse_tail(False), "backend.tail_slots")
    assert SparkSubmit(tail_slots=1).with_fuse_tail(True).fuse_tail
    SparkSubmit(tail_slots=1, fuse_tail=True)
    SparkConnect(tail_slots=1)  # on Connect every batch takes its turn


def test_lateness_matters_only_when_late_units_are_merged():
    refused(lambda: Arrival(lateness=30), "arrival.lateness")
    assert Arrival(late="merge", lateness=timedelta(seconds=30)).lateness == 30.0


def test_a_miss_callback_needs_the_deadline_alert():
    refused(lambda: Alerts(deadline=False, on_miss=object()), "alerts.on_miss")


@pytest.mark.parametrize("field", ["conn_id", "pool", "weight_rule"])
def test_spark_conf_given_where_it_does_not_belong_says_where_it_goes(field):
    err = refused(lambda: SparkConnect(**{field: {"spark.executor.memory": "1g"}}), f"backend.{field}")
    assert "SparkSubmit(conf=" in str(err)


def test_spark_connect_has_no_conf():
    with pytest.raises(TypeError, match="conf"):
        SparkConnect(conf={"spark.executor.memory": "1g"})


def test_the_objects_are_frozen_and_keyword_only():
    with pytest.raises(AttributeError):
        Arrival().units = 3
    with pytest.raises(TypeError):
        Arrival(240)


# ----------------------------------------------------------------------------- QueryConfig kwargs

def query_config(*parts) -> QueryConfig:
    kwargs = {}
    for part in parts:
        kwargs.update(part.query_config())
    return QueryConfig(query="q", landing="/d", state_dir="/s", streams=TPCH_STREAMS, **kwargs)


def test_arrival_yields_its_part_of_the_query_config():
    a = Arrival(units=240, rate=0.5, profile="bursty", observed=True, grace=timedelta(seconds=3), late="merge",
                lateness=10)
    assert a.query_config() == {"units": 240, "rate": 0.5, "profile": "bursty", "arrival": "observed",
                                "grace": 3.0, "late": "merge", "lateness": 10.0}
    assert Arrival().query_config()["arrival"] == "hint"
    cfg = query_config(a)
    assert (cfg.units, cfg.arrival, cfg.grace, cfg.late) == (240, "observed", 3.0, "merge")


def test_algorithm1_yields_plan_mode_with_its_margin_and_shares_in_seconds():
    cut = Algorithm1(margin=5, shares={"cq1": timedelta(minutes=1), "cq3": 90}, cost_scale=1.5,
                     cost_hint={"kind": "linear", "per_unit": 0.05, "per_batch": 20})
    assert cut.query_config() == {
        "mode": "plan", "margin": 5.0, "ahead": 0.0, "shares": {"cq1": 60.0, "cq3": 90.0}, "cost_scale": 1.5,
        "cost_hint": {"kind": "linear", "per_unit": 0.05, "per_batch": 20}, "final_agg_hint": None}
    cfg = query_config(cut)
    assert (cfg.mode, cfg.margin, cfg.shares, cfg.cost_scale) == ("plan", 5.0, {"cq1": 60.0, "cq3": 90.0}, 1.5)
    assert query_config(Algorithm1(ahead=timedelta(seconds=30))).ahead == 30.0


def test_minbatches_yields_dynamic_mode_with_rsf_and_cmax():
    cfg = query_config(MinBatches(rsf=1.0, c_max=30, max_batches=8))
    assert (cfg.mode, cfg.rsf, cfg.c_max, cfg.max_batches) == ("dynamic", 1.0, 30.0, 8)
    assert MinBatches().query_config()["rsf"] == 0.5 and MinBatches().query_config()["max_batches"] == 16


def test_one_batch_yields_one_batch_mode_and_keeps_its_cost_hints():
    cfg = query_config(OneBatch(cost_hint={"kind": "linear", "per_unit": 0.2}))
    assert cfg.mode == "one_batch" and cfg.cost_hint == {"kind": "linear", "per_unit": 0.2}


def test_the_defaults_are_the_query_configs():
    """Every default here equals the runtime's, so that a plan is the same either way."""
    defaults = QueryConfig(query="q", landing="/d", state_dir="/s", streams=TPCH_STREAMS)
    assert query_config(Arrival(), Algorithm1(), SparkSubmit()) == defaults
    mb = query_config(MinBatches())
    assert (mb.rsf, mb.c_max, mb.max_batches) == (defaults.rsf, defaults.c_max, defaults.max_batches)


def test_a_hint_dict_is_copied_in_and_out():
    hint = {"kind": "linear", "per_unit": 0.1}
    cut = Algorithm1(cost_hint=hint)
    hint["per_unit"] = 9
    cut.query_config()["cost_hint"]["per_unit"] = 7
    assert cut.cost_hint["per_unit"] == 0.1


def test_the_backends_yield_their_name_and_tail_and_task_settings():
    submit = SparkSubmit(fuse_tail=True, tail_slots=1, dispatch=timedelta(seconds=1.5), pool="spark",
                         conf={"spark.executor.memory": "1g"}, retries=0)
    assert submit.query_config() == {"backend": "spark-submit", "fuse_tail": True, "dispatch": 1.5, "cluster": None}
    assert submit.task_kwargs() == {"retries": 0, "pool": "spark", "conf": {"spark.executor.memory": "1g"}}
    connect = SparkConnect(conn_id="sc_main", weight_rule="airflow_iqp.priority.EDFPriority", cluster="etl")
    # No dispatch given: learned with the cost scale (window.costs.margins).
    assert connect.query_config() == {"backend": "spark-connect", "fuse_tail": False, "dispatch": None,
                                      "cluster": "etl"}
    assert connect.task_kwargs() == {"retries": 2, "conn_id": "sc_main",
                                     "weight_rule": "airflow_iqp.priority.EDFPriority"}
    assert query_config(connect).backend == "spark-connect"


def test_the_default_tail_lead_is_the_backends():
    assert SparkConnect().lead == 20.0
    assert SparkSubmit().lead == 30.0  # its job starts a JVM during the lead
    assert SparkSubmit(tail_lead=0).lead == 0.0
    assert SparkConnect(tail_lead=timedelta(seconds=12)).lead == 12.0


def test_the_options_module_imports_neither_airflow_nor_spark():
    code = ("import sys, airflow_iqp.options, airflow_iqp; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark')]; "
            "assert not bad, bad; assert airflow_iqp.Arrival is airflow_iqp.options.Arrival")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
