"""Dev tooling of airflow-iqp, run from a source checkout and never shipped in the wheel.

- ``iqp_dev.local_airflow``: a throw-away local Airflow of real processes for the tests,
  the demo and the benchmarks (its auth config makes everybody admin).
- ``iqp_dev.demo``: the README's main job (``bash scripts/demo.sh``).

Nothing in ``airflow_iqp`` imports this package.
"""
