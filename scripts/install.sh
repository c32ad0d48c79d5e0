#!/usr/bin/env bash
# Creates .venv and installs Threadline into it (with the test tools when given "test").
# pip's own chatter goes to .venv/install.log; it is shown only when the install fails.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
target=.
if [ "${1:-}" = "test" ]; then
  target='.[test]'
fi
echo "installing Threadline into .venv ..."
if ! { .venv/bin/python -m pip install --disable-pip-version-check --upgrade pip \
       && .venv/bin/python -m pip install --disable-pip-version-check -e "$target"; } \
     > .venv/install.log 2>&1; then
  tail -n 40 .venv/install.log >&2
  echo "install failed; the whole log is in .venv/install.log" >&2
  exit 1
fi
