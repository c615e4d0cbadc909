"""The fault suite: twelve faults on one cluster harness (PostgreSQL, Spark standalone, Spark
Connect, Airflow as real processes), each ending with the window's result equal to DuckDB's,
no unit lost, none counted twice, and the report and alerts saying what happened.

One module-scoped run (``tests/cluster/fault_scenario.py``) drives seven one-window DAGs of
one small query over parquet events and strikes the faults at the batches they are about
(``fault_inject.py``); each test below is one fault's verdict (``fault_checks.py``).
``benchmarks/faults.py`` runs the same cases and writes the faults table.

All twelve faults are real: processes are killed with signals, files are really corrupt,
the deadline really cannot be met. Nothing is faked.
"""

from __future__ import annotations

import pytest

from tests.cluster.fault_checks import NAMES, verdict

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from tests.cluster.fault_scenario import run_faults

    return run_faults(tmp_path_factory.mktemp("faults"))


def _assert(run, n: int) -> None:
    v = verdict(run, n)
    assert v.problems == [], f"fault {n} ({NAMES[n]}): {v.row}\n" + "\n".join(v.problems)


def test_fault_1_a_spark_submit_driver_jvm_sigkilled_mid_batch_is_retried_from_the_same_claim(run):
    _assert(run, 1)


def test_fault_2_a_batch_whose_task_process_is_killed_is_retried_from_the_same_claim(run):
    _assert(run, 2)


def test_fault_3_a_restarted_triggerer_takes_over_the_deferred_sensors(run):
    _assert(run, 3)


def test_fault_4_a_restarted_scheduler_finishes_the_window(run):
    _assert(run, 4)


def test_fault_5_a_batch_survives_its_spark_worker_killed_and_restarted(run):
    _assert(run, 5)


def test_fault_6_batches_on_a_killed_connect_server_retry_on_the_restarted_one(run):
    _assert(run, 6)


def test_fault_7_corrupt_wrong_schema_and_half_written_files_are_quarantined(run):
    _assert(run, 7)


def test_fault_8_a_unit_published_twice_is_counted_once(run):
    _assert(run, 8)


def test_fault_9_a_unit_after_the_last_claim_is_recorded_late_and_the_result_partial(run):
    _assert(run, 9)


def test_fault_10_an_empty_window_gives_an_empty_result_on_time(run):
    _assert(run, 10)


def test_fault_11_an_infeasible_deadline_warns_runs_the_earliest_plan_and_alerts(run):
    _assert(run, 11)


def test_fault_12_a_batch_failing_every_retry_fails_the_run_and_a_cleared_rerun_finishes_it(run):
    _assert(run, 12)
