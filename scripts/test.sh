#!/usr/bin/env bash
# One command to run the whole test suite (lint first), then the benchmarks' smoke mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy --no-error-summary  # engine_adapter and console, as pyproject.toml's [tool.mypy] says
.venv/bin/python -m pytest -q "$@"
if [ -f bench/run.py ]; then
  .venv/bin/python bench/run.py --smoke
fi
