#!/usr/bin/env bash
# Starts the cluster harness by hand (iqp_dev/cluster.py): a throw-away PostgreSQL, a Spark
# standalone master and worker(s), a Spark Connect server on that master, and Airflow's
# scheduler, triggerer, dag-processor and api-server on PostgreSQL (with --executor celery,
# also a Redis broker and Celery workers), all on 127.0.0.1.
# Prints the addresses and stops everything on Ctrl-C.
#   scripts/cluster.sh [--dags DIR] [--root DIR] [--executor celery] [--celery-workers N] [--spark-workers N]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
"$ROOT/scripts/setup_postgres.sh"
"$ROOT/scripts/setup_redis.sh"
exec python -m iqp_dev.cluster up "$@"
