#!/usr/bin/env bash
# Creates .venv and installs airflow-iqp with its test extra. Idempotent: a stamp
# holding the hash of pyproject.toml skips pip when nothing changed.
# Sourced by scripts/demo.sh and scripts/test.sh; not meant to be run alone.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

need_java() {
    if ! command -v java >/dev/null 2>&1; then
        echo "error: Java 17 or newer is required (Spark 4 runs on the JVM) and 'java' is not on the PATH." >&2
        echo "       Install it, e.g. 'apt-get install openjdk-17-jre-headless', or set JAVA_HOME and PATH." >&2
        exit 3
    fi
    local v
    v=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
    local major=${v%%.*}
    if [ -z "$major" ] || [ "$major" -lt 17 ]; then
        echo "error: Java 17 or newer is required by Spark 4; found '$v' ($(command -v java))." >&2
        exit 3
    fi
}
need_java

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.airflow-iqp-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[test]"
    echo "$want" > "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
export VIRTUAL_ENV="$ROOT/.venv"
