"""EDF/LLF/SJF weights land in task_instance.priority_weight of real mapped TIs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from iqp_dev.local_airflow import airflow_env  # noqa: E402

pytestmark = pytest.mark.airflow

D = 1767225600  # 2026-01-01T00:00:00Z
PLAN = [
    {"index": 1, "deadline_ts": D + 100, "remaining_cost": 300.0, "cost": 100.0},
    {"index": 2, "deadline_ts": D, "remaining_cost": 200.0, "cost": 140.5},
    {"index": 3, "deadline_ts": D + 50, "remaining_cost": 60.0, "cost": 60.0},
]

DAG_FILE = textwrap.dedent(
    f'''
    from __future__ import annotations

    import pendulum
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import dag, task


    def run_batch(index, deadline_ts, remaining_cost, cost):
        return index


    @dag(schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False)
    def prio_probe():
        @task
        def plan():
            return {PLAN!r}

        batches = plan()
        # by qualified name, on .partial() of a classic mapped operator
        PythonOperator.partial(
            task_id="edf", python_callable=run_batch, weight_rule="airflow_iqp.priority.EDFPriority"
        ).expand(op_kwargs=batches)
        PythonOperator.partial(
            task_id="llf", python_callable=run_batch, weight_rule="airflow_iqp.priority.LLFPriority"
        ).expand(op_kwargs=batches)
        # NOT weight_rule=SJFPriority(): on .partial() Airflow 3.3.2 keeps the instance in
        # partial_kwargs and run creation fails with 400 "Unknown priority strategy <... object>".
        PythonOperator.partial(
            task_id="sjf", python_callable=run_batch, weight_rule="airflow_iqp.priority.SJFPriority"
        ).expand(op_kwargs=batches)


    prio_probe()
    '''
)

def desc(key: float, resolution: float, reference: float) -> int:
    return 2**30 - round((key - reference) / resolution)


REF = 1735689600  # 2025-01-01T00:00:00Z
EXPECTED = {
    "edf": [desc(b["deadline_ts"], 1, REF) for b in PLAN],
    "llf": [desc(b["deadline_ts"] - b["remaining_cost"], 1, REF) for b in PLAN],
    "sjf": [desc(b["cost"], 0.001, 0) for b in PLAN],
}


def test_mapped_weights_in_metadata_db(tmp_path):
    """Every mapped batch gets its policy's weight, batch 1 included.

    Airflow renames the unexpanded TI to map index 0 without recomputing its weight;
    the provider's ``airflow.policy`` entry point installs the task-instance mutation
    hook that fixes it, with no ``airflow_local_settings.py`` in the home.
    """
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "prio_probe.py").write_text(DAG_FILE)
    with airflow_env(dags) as af:
        assert not (af.home / "config" / "airflow_local_settings.py").exists()
        af.wait_for_dag("prio_probe")
        run_id = af.trigger("prio_probe")
        af.wait_for_run("prio_probe", run_id, timeout=180)
        rows = af.sql(
            "SELECT task_id, map_index, priority_weight, state FROM task_instance "
            "WHERE dag_id='prio_probe' AND run_id=? AND task_id IN ('edf','llf','sjf') ORDER BY task_id, map_index",
            (run_id,),
        )
    got = {t: [r["priority_weight"] for r in rows if r["task_id"] == t] for t in EXPECTED}
    assert all(r["state"] == "success" for r in rows), rows
    # sanity of the expectations themselves: most urgent batch gets the largest weight
    assert max(EXPECTED["edf"]) == EXPECTED["edf"][1] and max(EXPECTED["sjf"]) == EXPECTED["sjf"][2]
    assert max(EXPECTED["llf"]) == EXPECTED["llf"][1]
    assert got == EXPECTED
