#!/usr/bin/env bash
# The test command: sets up .venv on a fresh machine, then runs the whole suite.
#
#   bash scripts/test.sh            the whole suite, in two lanes at once (below)
#   bash scripts/test.sh ARGS...    pytest with ARGS, in one process
#
# The whole suite runs in two lanes at the same time:
#   * the suites that run real Airflow processes (marker `airflow`: tests/e2e and
#     tests/cluster, in the order below), which mostly wait for live windows to open,
#     fill and close;
#   * everything else, beside them at nice 19 and in the idle I/O class. Where the kernel
#     groups processes by session (sched_autogroup), nice counts only inside the group,
#     and the first lane's Airflow and Spark processes each run in sessions of their own:
#     there the second lane takes about one group's share of the CPU beside them, which
#     the live windows' deadlines leave room for. Its output goes to var/test-rest.log and
#     is printed after the first lane's.
# The first lane's output is also kept in var/test-airflow.log, and its summary (what
# failed, errored or was skipped, and the counts) is printed again at the very end, so
# that the tail of the output names every lane's failures.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
# The cluster tests run a throw-away PostgreSQL: install it where it is missing.
"$ROOT/scripts/setup_postgres.sh"
# tests/test_dag_hygiene.py runs `docker compose config`: install a Compose client where none is.
"$ROOT/scripts/setup_compose.sh"
if [ "$#" -gt 0 ]; then
    exec python -m pytest "$@"
fi

mkdir -p "$ROOT/var"
REST_LOG="$ROOT/var/test-rest.log"
LIVE_LOG="$ROOT/var/test-airflow.log"
nice -n 19 ionice -c 3 python -m pytest -m "not airflow" -p no:cacheprovider >"$REST_LOG" 2>&1 &
rest=$!
trap 'kill "$rest" 2>/dev/null || true' EXIT

# The e2e suites, the cluster suites, then the query DAG's three live windows: they check
# that each batch claims within a second of its due time and that each window meets its
# deadline, and by then the second lane has (nearly) finished.
LAST=tests/e2e/test_query_dag.py
LIVE=()
for f in tests/e2e/test_*.py; do
    if [ "$f" != "$LAST" ]; then LIVE+=("$f"); fi
done
LIVE+=(tests/cluster "$LAST")
set +e
python -m pytest -m airflow "${LIVE[@]}" 2>&1 | tee "$LIVE_LOG"
live=${PIPESTATUS[0]}
set -e
rest_rc=0
wait "$rest" || rest_rc=$?
trap - EXIT

echo
echo "==== the rest of the suite (not marked airflow), run beside the above: $REST_LOG ===="
cat "$REST_LOG"
echo
echo "==== the airflow suites' summary again (whole output above and in $LIVE_LOG) ===="
if grep -q "short test summary info" "$LIVE_LOG"; then
    sed -n '/short test summary info/,$p' "$LIVE_LOG"
else
    tail -n 1 "$LIVE_LOG"
fi
echo "==== airflow suites: exit $live; the rest: exit $rest_rc ===="
if [ "$live" -ne 0 ]; then exit "$live"; fi
exit "$rest_rc"
