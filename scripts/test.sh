#!/usr/bin/env bash
# The test command: sets up .venv on a fresh machine, then runs the whole suite.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
# The cluster tests run a throw-away PostgreSQL: install it where it is missing.
"$ROOT/scripts/setup_postgres.sh"
# tests/test_dag_hygiene.py runs `docker compose config`: install a Compose client where none is.
"$ROOT/scripts/setup_compose.sh"
exec python -m pytest "$@"
