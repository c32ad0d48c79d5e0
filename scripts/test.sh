#!/usr/bin/env bash
# One command to run the whole test suite (lint first), then the benchmarks' smoke mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy --no-error-summary  # engine_adapter and console, as pyproject.toml's [tool.mypy] says
# Two workers by default (THREADLINE_TEST_WORKERS; 0 runs the tests in this process): most tests
# wait on processes and servers of their own, so two at once fill a small machine's cores. A
# file's tests stay in one worker, where its module-wide fixtures serve them all.
.venv/bin/python -m pytest -q -n "${THREADLINE_TEST_WORKERS:-2}" --dist loadfile "$@"
if [ -f bench/run.py ]; then
  .venv/bin/python bench/run.py --smoke
fi
