#!/usr/bin/env bash
# Creates .venv and installs Threadline into it (with the test tools when given "test").
# pip's own chatter goes to .venv/install.log; it is shown only when the install fails.
# The install is skipped when nothing it depends on changed since the last one (a hash of
# pyproject.toml and this script, kept in .venv/installed); THREADLINE_REINSTALL=1 forces it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
target=.
if [ "${1:-}" = "test" ]; then
  target='.[test]'
fi
deps=$(cat pyproject.toml scripts/install.sh | sha256sum | cut -d' ' -f1)
stamp=.venv/installed
if [ -z "${THREADLINE_REINSTALL:-}" ] && [ -x .venv/bin/threadline ] && [ -f "$stamp" ]; then
  read -r had_deps had_target < "$stamp" || true
  # The test install holds everything the plain one does, so it serves both.
  if [ "$had_deps" = "$deps" ] && { [ "$had_target" = "$target" ] || [ "$had_target" = '.[test]' ]; }; then
    echo "Threadline is installed in .venv and its dependencies are unchanged; not reinstalling"
    exit 0
  fi
fi
echo "installing Threadline into .venv ..."
rm -f "$stamp"
if ! { .venv/bin/python -m pip install --disable-pip-version-check --upgrade pip \
       && .venv/bin/python -m pip install --disable-pip-version-check -e "$target"; } \
     > .venv/install.log 2>&1; then
  tail -n 40 .venv/install.log >&2
  echo "install failed; the whole log is in .venv/install.log" >&2
  exit 1
fi
echo "$deps $target" > "$stamp"
