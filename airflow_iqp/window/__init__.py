"""What the provider does for one window, without Airflow and without Spark.

The operators, the sensor and the trigger are thin: they read the run's window and
configuration from Airflow and call these modules, and hand data work to Spark. Times
here are Unix seconds (floats); the planning core works in seconds since the window's
start, and :mod:`~airflow_iqp.window.plan` converts.

- :mod:`~airflow_iqp.window.config`: the query's settings as the runtime uses them;
- :mod:`~airflow_iqp.window.batch`: the typed contract between tasks (:class:`Batch`);
- :mod:`~airflow_iqp.window.costs`: arrival and cost models to plan with;
- :mod:`~airflow_iqp.window.plan`: one window's plan;
- :mod:`~airflow_iqp.window.readiness`: when a batch may start, and its claim;
- :mod:`~airflow_iqp.window.replan`: re-plans of a window whose total is unknown;
- :mod:`~airflow_iqp.window.accounting`: late data, observed arrivals, task CPU;
"""
