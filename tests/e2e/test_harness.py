"""The real-process harness: deferral through the triggerer and dynamic task mapping."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from iqp_dev.local_airflow import airflow_env  # noqa: E402

pytestmark = pytest.mark.airflow

DAG_FILE = textwrap.dedent(
    '''
    from __future__ import annotations

    import pendulum
    from airflow.providers.standard.sensors.date_time import DateTimeSensorAsync
    from airflow.sdk import dag, task


    @dag(schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False)
    def harness_probe():
        wait = DateTimeSensorAsync(
            task_id="wait",
            # a few seconds after the TI starts: the sensor must defer to the triggerer
            target_time="{{ (macros.datetime.now(macros.dateutil.tz.UTC) + macros.timedelta(seconds=6)).isoformat() }}",
        )

        @task
        def plan(**context):
            return [{"index": i, "units": 10 * i} for i in range(1, context["params"].get("n", 3) + 1)]

        @task(map_index_template="batch {{ batch['index'] }}")
        def run_batch(batch):
            return batch["units"] * 2

        @task
        def total(values):
            return sum(values)

        batches = plan()
        wait >> batches
        total(run_batch.expand(batch=batches))


    harness_probe()
    '''
)


def test_deferral_and_mapping(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "harness_probe.py").write_text(DAG_FILE)
    with airflow_env(dags) as af:
        print("start-up timings:", af.timings)
        af.wait_for_dag("harness_probe")
        run_id = af.trigger("harness_probe", conf={})
        seen: dict = {}
        t0 = time.monotonic()
        run = af.wait_for_run("harness_probe", run_id, timeout=180, observe=seen)
        print("run took", time.monotonic() - t0, "s; states seen:", seen)
        assert run["state"] == "success"

        tis = af.task_instances("harness_probe", run_id)
        mapped = [t for t in tis if t["task_id"] == "run_batch"]
        assert [t["map_index"] for t in mapped] == [0, 1, 2]
        assert [t["rendered_map_index"] for t in mapped] == ["batch 1", "batch 2", "batch 3"]
        assert all(t["state"] == "success" and t["try_number"] == 1 for t in mapped)
        assert af.xcom("harness_probe", run_id, "total") == 120
        assert af.xcom("harness_probe", run_id, "run_batch", map_index=2) == 60

        # The sensor went through the triggerer: it was seen deferred while polling, its
        # worker log says it paused as DEFERRED, and the triggerer wrote a trigger log for
        # this TI in which the DateTimeTrigger fired.
        wait_ti = next(t for t in tis if t["task_id"] == "wait")
        assert wait_ti["state"] == "success" and wait_ti["try_number"] == 1
        assert "deferred" in seen[("wait", -1)], seen
        files = af.task_log_files("harness_probe", run_id, "wait")
        trigger_logs = [f for f in files if ".trigger." in f.name]
        assert trigger_logs, files
        assert "Trigger fired event" in trigger_logs[0].read_text()
        worker_log = next(f for f in files if f.name == "attempt=1.log").read_text()
        assert "Pausing task as DEFERRED" in worker_log
    assert not af.leftover_pids(), "processes survived stop()"
