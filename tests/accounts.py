"""An ordinary account for checks that Threadline run by someone other than root must pass: the
account (made once), and a copy of the package it can import."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
PACKAGE = CHECKOUT / "engine_adapter"


def ordinary_account(name: str) -> pwd.struct_passwd:
    """A system account without a home or shell; the check is skipped unless we are root."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the check as another account")
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        check=False,
    )
    return pwd.getpwnam(name)


def package_copy(base: Path) -> Path:
    """base/code holding a copy of engine_adapter (for PYTHONPATH): the checkout may be out of the
    account's reach."""
    code = base / "code"
    shutil.copytree(PACKAGE, code / "engine_adapter", ignore=shutil.ignore_patterns("__pycache__"))
    return code


def run_python(
    account: pwd.struct_passwd, code: Path, script: str, *args: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The system's Python running script as the account, the package copy importable, from
    code's parent."""
    return subprocess.run(
        ["/usr/bin/python3", "-c", script, *args],
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],
        cwd=str(code.parent),
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(code), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextmanager
def checkout_in_reach(argv: list[str]) -> Iterator[tuple[list[str], Path]]:
    """argv (which may name this checkout's Python) made runnable by another account however
    deep the checkout lies: in a mount namespace of its own, the checkout is bound onto a
    directory anyone may traverse. Yields (argv to run as root, its working directory), whose
    command then drops to the other account itself (setpriv); the checkout's Python and code
    appear there under the new directory."""
    where = Path(tempfile.mkdtemp(prefix="threadline-checkout-"))
    where.chmod(0o755)
    moved = [
        str(where / Path(a).relative_to(CHECKOUT)) if Path(a).is_relative_to(CHECKOUT) else a
        for a in argv
    ]
    bind = 'mount --bind "$0" "$1" && shift && exec "$@"'
    unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", bind]
    try:
        yield [*unshare, str(CHECKOUT), str(where), *moved], where
    finally:
        where.rmdir()
