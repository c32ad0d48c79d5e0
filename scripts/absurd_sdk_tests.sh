#!/usr/bin/env bash
# Absurd's own Python SDK tests, run against a Threadline-migrated database whose engine functions
# are specialised for every queue the tests make (tests/absurd_sdk/conftest.py):
#   bash scripts/absurd_sdk_tests.sh PATH/TO/absurd   (a checkout of Absurd's repository)
# The tests are copied into tests/absurd_sdk (ignored by git: they are Absurd's, never committed
# here) and run there; the README's test command runs them too while they are present.
set -euo pipefail
cd "$(dirname "$0")/.."
src="${1:?usage: bash scripts/absurd_sdk_tests.sh PATH/TO/absurd (a checkout of Absurd)}/sdks/python/tests"
if ! ls "$src"/test_*.py >/dev/null 2>&1; then
  echo "no Absurd SDK tests in $src" >&2
  exit 2
fi
cp "$src"/test_*.py tests/absurd_sdk/
exec .venv/bin/python -m pytest -q tests/absurd_sdk
