"""Input streams: TPC-H generation into arrival units, arrival profiles and replay.

Pure Python plus pyarrow; nothing here imports Spark or Airflow.
"""
