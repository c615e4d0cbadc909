"""The Spark side: a query catalogue, the per-batch and final steps, and the spark-submit jobs.

Nothing here imports Airflow. Modules import PySpark only inside functions (or, for the
job scripts, at run time), so ``import airflow_iqp.spark.steps`` works without Spark.
"""
