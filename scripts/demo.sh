#!/usr/bin/env bash
# The main job: sets up .venv on a fresh machine, then runs the demo.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
exec python -m iqp_dev.demo "$@"
