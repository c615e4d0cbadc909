#!/usr/bin/env bash
# Installs PostgreSQL's server binaries (initdb, pg_ctl) when they are missing: the cluster
# tests (tests/cluster/) run a throw-away PostgreSQL as Airflow's metadata DB. Debian's
# package keeps them in /usr/lib/postgresql/<version>/bin and creates the unprivileged
# 'postgres' user that the harness runs them as when the tests run as root.
# Idempotent; prints what it installs. Called by scripts/test.sh.
set -euo pipefail

have_pg() {
    command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

if have_pg; then
    exit 0
fi
source "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh"
apt_install postgresql "PostgreSQL's server binaries (initdb, pg_ctl) are missing" || {
    echo "       or install PostgreSQL 13 or newer and set IQP_PG_BIN to the directory holding initdb." >&2
    exit 3
}
# The package starts a system cluster on port 5432; the tests start their own and do not need it.
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if command -v pg_lsclusters >/dev/null 2>&1; then
    pg_lsclusters --no-header 2>/dev/null | while read -r ver name _; do
        $SUDO pg_ctlcluster "$ver" "$name" stop 2>/dev/null || true
    done
fi
have_pg || { echo "error: apt-get installed postgresql but no initdb was found" >&2; exit 3; }
echo "setup_postgres: installed $(ls -d /usr/lib/postgresql/*/bin | tail -1)"
