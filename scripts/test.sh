#!/usr/bin/env bash
# The test command: sets up .venv on a fresh machine, then runs the whole suite.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
exec python -m pytest "$@"
