#!/usr/bin/env bash
# Creates .venv and installs Threadline into it (with the test tools when given "test").
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
if [ "${1:-}" = "test" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
else
  .venv/bin/python -m pip install -q --disable-pip-version-check -e .
fi
