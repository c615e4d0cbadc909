#!/usr/bin/env bash
# Installs a Compose client when none is here: tests/test_dag_hygiene.py checks
# that `docker compose config` (or `docker-compose config`) accepts docker-compose.yaml.
# `config` only reads the file; no Docker engine is needed. Idempotent; prints what it
# installs. Called by scripts/test.sh.
set -euo pipefail

if docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; then
    exit 0
fi
source "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh"
apt_install docker-compose "no Compose client is here to validate docker-compose.yaml"
