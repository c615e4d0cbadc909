"""The provider's hooks: the state directory (:mod:`~airflow_iqp.hooks.state`) and where the
Spark work runs, by spark-submit or on a Spark Connect server (:mod:`~airflow_iqp.hooks.spark`)."""
