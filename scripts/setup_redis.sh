#!/usr/bin/env bash
# Installs redis-server when it is missing: the cluster harness with the CeleryExecutor
# (iqp_dev/cluster.py, executor="celery") runs a throw-away Redis as the Celery broker
# (iqp_dev/redis.py). The tests start their own on a free port and do not need the
# system instance that Debian's package starts: it is stopped and disabled.
# Idempotent; prints what it installs. Called by scripts/test.sh.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
source "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh"
apt_install redis-server "redis-server (the Celery broker of the cluster harness) is missing" || {
    echo "       or install Redis 6 or newer so that redis-server is on PATH." >&2
    exit 3
}
# The package starts a system instance on port 6379 (through systemd, or its init script
# where there is no systemd); the tests start their own and do not need it.
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
elif [ -x /etc/init.d/redis-server ]; then
    $SUDO /etc/init.d/redis-server stop >/dev/null 2>&1 || true
    if command -v update-rc.d >/dev/null 2>&1; then $SUDO update-rc.d redis-server disable >/dev/null 2>&1 || true; fi
fi
command -v redis-server >/dev/null 2>&1 || { echo "error: apt-get installed redis-server but it is not on PATH" >&2; exit 3; }
echo "setup_redis: installed $(redis-server --version | head -1)"
