"""The ``airflow-iqp`` command line. Each subcommand lives in its own module."""
