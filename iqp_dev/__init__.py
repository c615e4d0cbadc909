"""Dev tooling of airflow-iqp, run from a source checkout and never shipped in the wheel.

- ``iqp_dev.local_airflow``: a throw-away local Airflow of real processes for the tests,
  the demo and the benchmarks (its auth config makes everybody admin); its home's settings
  are ``iqp_dev.airflow_config``'s, its REST/SQL client ``iqp_dev.airflow_api``'s.
- ``iqp_dev.cluster``: the same on PostgreSQL (``iqp_dev.postgres``) with a Spark standalone
  master, worker(s) and Connect server (``iqp_dev.spark_standalone``), for the cluster and
  fault tests, optionally on the CeleryExecutor with Celery workers and a Redis broker
  (``iqp_dev.redis``); ``iqp_dev.procs`` finds their processes in ``/proc``.
- ``iqp_dev.demo``: the README's main job (``bash scripts/demo.sh``).

Their processes run under the package's one supervisor, ``airflow_iqp.cli.supervisor``
(which ``airflow-iqp dev`` runs on too). Nothing in ``airflow_iqp`` imports this package.
"""
