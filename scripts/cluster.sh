#!/usr/bin/env bash
# Starts the cluster harness by hand (iqp_dev/cluster.py): a throw-away PostgreSQL, a Spark
# standalone master and worker, a Spark Connect server on that master, and Airflow's
# scheduler, triggerer, dag-processor and api-server on PostgreSQL, all on 127.0.0.1.
# Prints the addresses and stops everything on Ctrl-C.
#   scripts/cluster.sh [--dags DIR] [--root DIR]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
"$ROOT/scripts/setup_postgres.sh"
exec python -m iqp_dev.cluster up "$@"
