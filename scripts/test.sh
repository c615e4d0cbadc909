#!/usr/bin/env bash
# The test command: sets up .venv on a fresh machine, then runs the whole suite.
#
#   bash scripts/test.sh            the whole suite, in two lanes at once (below)
#   bash scripts/test.sh ARGS...    pytest with ARGS, in one process
#
# The whole suite runs in two lanes at the same time, then two suites alone:
#   * the e2e suites, the cluster e2e suite and the fault suite on the object store
#     (tests/cluster/test_faults_remote.py), which run real Airflow processes (marker
#     `airflow`) and mostly wait for live windows to open, fill and close;
#   * everything else, beside them at nice 19 and in the idle I/O class. Where the kernel
#     groups processes by session (sched_autogroup), nice counts only inside the group,
#     and the first lane's Airflow and Spark processes run in sessions of their own: there
#     the second lane takes about one group's share of the CPU beside them, and so do the
#     spark-submit JVMs of its own tests, which start sessions of their own. The e2e suites'
#     deadlines leave room for that, and the cluster e2e suite and the fault suite on the
#     object store check results, not deadlines. The second lane's output goes to
#     var/test-rest.log, printed at the end;
#   * then, once both lanes are done, tests/cluster/test_faults.py and
#     tests/e2e/test_query_dag.py, with nothing else running: each fault's window must meet
#     its deadline with no alert, and the query DAG's three windows check each claim to the
#     second and each deadline 100 s after the window's end, which the last batch and the
#     merge (two spark-submits that each start a JVM) share with the other windows' jobs.
#     Beside the second lane's Spark tests, those batches take minutes instead of seconds.
# The Airflow suites' output is also kept in var/test-airflow.log and var/test-alone.log,
# and their summaries (what failed, errored or was skipped, and the counts) are printed
# again at the very end, so that the tail of the output names every failure.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
# The cluster tests run a throw-away PostgreSQL: install it where it is missing.
"$ROOT/scripts/setup_postgres.sh"
# The cluster harness with the CeleryExecutor runs a throw-away Redis as its broker.
"$ROOT/scripts/setup_redis.sh"
# tests/test_dag_hygiene.py runs `docker compose config`: install a Compose client where none is.
"$ROOT/scripts/setup_compose.sh"
# tests/iqp_dev/test_s3a.py runs Spark on s3a:// paths: fetch the pinned S3A jars into var/jars/s3a/.
"$ROOT/scripts/setup_spark_jars.sh"
if [ "$#" -gt 0 ]; then
    exec python -m pytest "$@"
fi

mkdir -p "$ROOT/var"
REST_LOG="$ROOT/var/test-rest.log"
LIVE_LOG="$ROOT/var/test-airflow.log"
ALONE_LOG="$ROOT/var/test-alone.log"
nice -n 19 ionice -c 3 python -m pytest -m "not airflow" -p no:cacheprovider >"$REST_LOG" 2>&1 &
rest=$!
trap 'kill "$rest" 2>/dev/null || true' EXIT

ALONE=(tests/cluster/test_faults.py tests/e2e/test_query_dag.py)
LIVE=()
for f in tests/e2e/test_*.py tests/cluster/test_*.py; do
    case " ${ALONE[*]} " in *" $f "*) ;; *) LIVE+=("$f") ;; esac
done
set +e
python -m pytest -m airflow "${LIVE[@]}" 2>&1 | tee "$LIVE_LOG"
live=${PIPESTATUS[0]}
rest_rc=0
wait "$rest" || rest_rc=$?
trap - EXIT
python -m pytest -m airflow "${ALONE[@]}" 2>&1 | tee "$ALONE_LOG"
alone=${PIPESTATUS[0]}
set -e

echo
echo "==== the rest of the suite (not marked airflow), run beside the first: $REST_LOG ===="
cat "$REST_LOG"
for log in "$LIVE_LOG" "$ALONE_LOG"; do
    echo
    echo "==== summary again of $log ===="
    if grep -q "short test summary info" "$log"; then
        sed -n '/short test summary info/,$p' "$log"
    else
        tail -n 1 "$log"
    fi
done
# The first line of each failure, last: a failure's message may carry pages of logs.
echo "==== what failed or errored, a line each ===="
grep -hE "^(FAILED|ERROR) " "$REST_LOG" "$LIVE_LOG" "$ALONE_LOG" | cut -c1-400 || true
echo "==== airflow suites: exit $live; the rest: exit $rest_rc; the suites alone: exit $alone ===="
for rc in "$live" "$rest_rc" "$alone"; do
    if [ "$rc" -ne 0 ]; then exit "$rc"; fi
done
