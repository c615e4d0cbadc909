#!/usr/bin/env bash
# The test command: sets up .venv on a fresh machine, then runs the whole suite.
#
#   bash scripts/test.sh            the whole suite, in two lanes at once (below)
#   bash scripts/test.sh ARGS...    pytest with ARGS, in one process
#
# The whole suite runs in two lanes at the same time, then two suites beside what is left of
# the second lane:
#   * the e2e suites, the cluster e2e suite and the fault suite on the object store
#     (tests/cluster/test_faults_remote.py), which run real Airflow processes (marker
#     `airflow`) and mostly wait for live windows to open, fill and close;
#   * everything else (the rest lane), at nice 19 and in the idle I/O class, in a CPU cgroup
#     of its own where the machine lets this script make one (cgroup v1's cpu controller, or
#     v2 with cpu enabled at the root; as root, on most Linux machines). A process in a
#     cgroup other than the root is scheduled by its cgroup's weight, whatever its nice or
#     session: the whole lane, with the spark-submit JVMs and servers its tests start in
#     sessions of their own, weighs as much as one session of the first lane (Airflow's
#     processes and the JVMs they start each run in a session of their own). Without the
#     cgroup, where the kernel groups processes by session (sched_autogroup), nice counts only
#     inside a session, and the lane takes a session's share for itself and one for each JVM
#     it starts. The e2e suites' deadlines leave room for that, and the cluster e2e suite and
#     the fault suite on the object store check results, not deadlines. The rest lane's
#     output goes to var/test-rest.log, printed at the end;
#   * once the first lane is done, tests/cluster/test_faults.py and tests/e2e/test_query_dag.py
#     (the suites alone): each fault's window must meet its deadline with no alert, and the
#     query DAG's three windows check each claim to the second and each deadline 100 s after
#     the window's end, which the last batch and the merge (two spark-submits that each start
#     a JVM) share with the other windows' jobs. With the cgroup, the rest lane's weight drops
#     to a quarter of a session's as they start: what is left of it runs in the CPU they leave
#     idle (their windows mostly wait), takes at most a fifth of the CPU from a job of theirs,
#     and keeps a fifth for its own tests that time a step to the half second. Without it,
#     they wait for the rest lane to end: beside its Spark tests at full weight, their batches
#     take minutes instead of seconds.
# The Airflow suites' output is also kept in var/test-airflow.log and var/test-alone.log,
# and their summaries (what failed, errored or was skipped, and the counts) are printed
# again at the very end, so that the tail of the output names every failure, and then each
# lane's wall time (and the rest lane's CPU time, where the cgroup counts it).
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

# The rest lane's CPU cgroup (see the top): "v1 DIR [ACCT_DIR]" or "v2 DIR", or nothing where
# the machine does not let this script make one.
lane_group() {
    local name="airflow-iqp-rest-$$" dir
    for dir in /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do
        if [ -f "$dir/cpu.shares" ] && mkdir -p "$dir/$name" 2>/dev/null; then
            if [ -f "$dir/$name/cpuacct.usage" ]; then
                echo "v1 $dir/$name $dir/$name"
            elif [ -d /sys/fs/cgroup/cpuacct ] && mkdir -p "/sys/fs/cgroup/cpuacct/$name" 2>/dev/null; then
                echo "v1 $dir/$name /sys/fs/cgroup/cpuacct/$name"
            else
                echo "v1 $dir/$name"
            fi
            return
        fi
    done
    if grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null \
            && mkdir -p "/sys/fs/cgroup/$name" 2>/dev/null; then
        echo "v2 /sys/fs/cgroup/$name"
    fi
}
# Set the lane's weight, in percent of one session's: 1024 shares in v1, weight 100 in v2.
lane_weight() {
    case "$GROUP_KIND" in
        v1) echo $(( 1024 * $1 / 100 )) >"$GROUP_DIR/cpu.shares" ;;
        v2) echo "$1" >"$GROUP_DIR/cpu.weight" ;;
    esac
}
# Seconds of CPU the lane's processes have used, or nothing where the cgroup does not count.
lane_cpu() {
    if [ -n "$GROUP_ACCT" ] && [ -f "$GROUP_ACCT/cpuacct.usage" ]; then
        awk '{ printf "%.0f", $1 / 1e9 }' "$GROUP_ACCT/cpuacct.usage"
    elif [ "$GROUP_KIND" = v2 ]; then
        awk '$1 == "usage_usec" { printf "%.0f", $2 / 1e6 }' "$GROUP_DIR/cpu.stat"
    fi
}
read -r GROUP_KIND GROUP_DIR GROUP_ACCT <<<"$(lane_group)" || true
if [ -n "$GROUP_KIND" ] && ! lane_weight 100 2>/dev/null; then
    rmdir "$GROUP_DIR" 2>/dev/null || true
    GROUP_KIND=""
fi
join_group() {
    if [ -n "$GROUP_KIND" ]; then
        echo "$BASHPID" >"$GROUP_DIR/cgroup.procs"
        if [ -n "$GROUP_ACCT" ] && [ "$GROUP_ACCT" != "$GROUP_DIR" ]; then echo "$BASHPID" >"$GROUP_ACCT/cgroup.procs"; fi
    fi
}
leave_group() {
    for dir in "$GROUP_DIR" "$GROUP_ACCT"; do
        if [ -n "$dir" ]; then rmdir "$dir" 2>/dev/null || true; fi
    done
}

started=$SECONDS
( join_group; exec nice -n 19 ionice -c 3 python -m pytest -m "not airflow" -p no:cacheprovider ) >"$REST_LOG" 2>&1 &
rest=$!
trap 'kill "$rest" 2>/dev/null || true; leave_group' EXIT

ALONE=(tests/cluster/test_faults.py tests/e2e/test_query_dag.py)
LIVE=()
for f in tests/e2e/test_*.py tests/cluster/test_*.py; do
    case " ${ALONE[*]} " in *" $f "*) ;; *) LIVE+=("$f") ;; esac
done
set +e
python -m pytest -m airflow "${LIVE[@]}" 2>&1 | tee "$LIVE_LOG"
live=${PIPESTATUS[0]}
live_wall=$(( SECONDS - started ))
rest_rc=0
if [ -n "$GROUP_KIND" ]; then
    lane_weight 25
else
    wait "$rest" || rest_rc=$?
fi
alone_started=$SECONDS
python -m pytest -m airflow "${ALONE[@]}" 2>&1 | tee "$ALONE_LOG"
alone=${PIPESTATUS[0]}
alone_wall=$(( SECONDS - alone_started ))
if [ -n "$GROUP_KIND" ]; then
    wait "$rest" || rest_rc=$?
fi
rest_cpu=$(lane_cpu)
trap - EXIT
leave_group
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
echo "==== wall time: airflow suites ${live_wall} s, the suites alone ${alone_wall} s, all $(( SECONDS - started )) s;" \
     "the rest lane's CPU cgroup: ${GROUP_KIND:-none}${rest_cpu:+, ${rest_cpu} s of CPU} ===="
for rc in "$live" "$rest_rc" "$alone"; do
    if [ "$rc" -ne 0 ]; then exit "$rc"; fi
done
