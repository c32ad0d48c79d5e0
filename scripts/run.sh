#!/usr/bin/env bash
# One command to run Threadline: install (only when its dependencies changed), then start
# Postgres, conductor, bots and console.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/threadline up "$@"
