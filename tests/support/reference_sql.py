"""Reference queries for DuckDB: the paper's table 3 and the standard TPC-H text (default
substitution parameters), over the whole window. They are the catalogue's own SQL files:
what is checked is that the decomposer's split of a text, run batch by batch on Spark,
equals DuckDB running that same text once."""

from airflow_iqp.query.catalogue import catalogue_sql, list_queries

REFERENCE_SQL = {q: catalogue_sql(q) for q in list_queries()}
