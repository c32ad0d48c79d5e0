#!/usr/bin/env bash
# The 16-core scaling table (bench/scale16.py) on a lent machine: Ubuntu 24.04, Python 3.12,
# no network, no PostgreSQL, no bubblewrap. Installs from the carried .wheelhouse (built by
# bench/device/wheelhouse.sh) into a fresh virtual environment, then runs the table with steps
# unsandboxed; its output goes to $OUT/scale16.txt, the machine's description to
# $OUT/machine.txt. Arguments replace the default sizes (about 8 minutes on 16 cores).
#
#   bash bench/device/scale16.sh [--processes 1 2 4 8] [--runs 2000] [--repeats 2] [--engine specialised]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
VENV=${VENV:-$(mktemp -d)/venv}
LIMIT_S=${LIMIT_S:-540}  # the table is printed after each repeat: a cut-short run keeps one
mkdir -p "$OUT"
if [ $# -eq 0 ]; then
    set -- --processes 1 2 4 8 --runs 2000 --repeats 2
fi
if ! compgen -G ".wheelhouse/pip-*.whl" >/dev/null; then
    echo "no .wheelhouse here: build it with bench/device/wheelhouse.sh and carry it" >&2
    exit 1
fi

# The wheels are for CPython 3.12; pip runs from its own wheel, so no ensurepip is needed.
PY=""
for candidate in "${PYTHON:-}" python3.12 python3; do
    if [ -n "$candidate" ] && command -v "$candidate" >/dev/null \
        && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
        PY=$(command -v "$candidate")
        break
    fi
done
if [ -z "$PY" ]; then
    echo "no Python 3.12 here (the wheelhouse is for 3.12)" >&2
    exit 1
fi
started=$SECONDS
"$PY" -m venv --without-pip "$VENV"
pip_wheel=$(compgen -G ".wheelhouse/pip-*.whl" | head -n 1)
"$VENV/bin/python" "$pip_wheel/pip" install -q --no-index --no-compile --find-links .wheelhouse \
    .wheelhouse/*.whl
"$VENV/bin/python" -m pip install -q --no-index --no-deps --no-build-isolation .
{
    echo "cores: $(nproc)"
    echo "python: $("$VENV/bin/python" --version) ($PY)"
    echo "kernel: $(uname -srm)"
    grep -m1 "model name" /proc/cpuinfo || true
    grep MemTotal /proc/meminfo || true
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "installed in $((SECONDS - started)) s"
} | tee "$OUT/machine.txt"

set -o pipefail
PYTHONUNBUFFERED=1 timeout -s INT "$LIMIT_S" \
    "$VENV/bin/python" -m bench.scale16 --sandbox none "$@" 2>&1 | tee "$OUT/scale16.txt"
