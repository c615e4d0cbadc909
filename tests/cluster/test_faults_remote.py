"""The fault suite's twelve faults again, with the state store and every partial and result on
an S3-compatible server (moto's, as a process: :mod:`iqp_dev.s3`), which Spark writes
through its S3A connector (:func:`iqp_dev.s3a.s3a_spark_conf`).

The same run (``tests/cluster/fault_scenario.py``) and the same verdicts
(``fault_checks.py``) as ``tests/cluster/test_faults.py``, whose tests this module collects
again on its own ``run``. What differs by store is only where a killed attempt's partial
goes: on the object store it stays a hidden directory that no key names, and the check is
that every named partial is whole.

This module runs beside the rest of the suite (``scripts/test.sh``), where on 2 cores a
batch's spark-submit can take minutes: its verdicts check what each fault did to the
claims, partials, results, reports and alerts, not whether a survivable fault's window met
its deadline. ``tests/cluster/test_faults.py`` runs alone and checks that too.
"""

from __future__ import annotations

import pytest

from tests.cluster.test_faults import *  # noqa: F401,F403 - the twelve verdicts, on this module's run

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


@pytest.fixture(scope="module")
def run(tmp_path_factory, s3_server):
    from iqp_dev.s3 import CREDENTIALS
    from iqp_dev.s3a import s3a_spark_conf
    from tests.cluster.fault_scenario import run_faults

    conf = s3a_spark_conf(s3_server.endpoint, CREDENTIALS["AWS_ACCESS_KEY_ID"], CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
    return run_faults(tmp_path_factory.mktemp("faults_remote"), state=s3_server.bucket("faults") + "/state",
                      spark_conf=conf, on_time=False)
