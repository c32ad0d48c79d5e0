"""A command bash would only start one program for runs without bash, exactly as bash runs it;
anything else still goes to bash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine_adapter.sandbox import plain_command
from engine_adapter.sandbox.sandbox import Sandbox

SHOW = """#!/usr/bin/python3
import os, sys
print(sys.argv, os.getcwd(), {k: os.environ.get(k) for k in ("PWD", "SHLVL", "_", "HOME")})
"""


def anywhere(path: Path) -> bool:
    return True


@pytest.fixture(name="place")
def _place(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working directory and an environment whose PATH has `show` (prints what it was given)."""
    bin_dir, workdir = tmp_path / "bin", tmp_path / "work"
    bin_dir.mkdir()
    workdir.mkdir()
    show = bin_dir / "show"
    show.write_text(SHOW)
    show.chmod(0o755)
    (workdir / "local.sh").write_text(SHOW)
    (workdir / "local.sh").chmod(0o755)
    return workdir, {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(workdir)}


@pytest.mark.parametrize(
    "command",
    [
        "show",
        "show -q --x=1,2 a:b @c 50% +d",
        "  show\tspaced   words  ",
        "./local.sh one",
        "../work/local.sh two",
        "env",
    ],
)
def test_a_plain_command_runs_as_bash_would_run_it(place, command):
    workdir, env = place
    direct = plain_command.direct_argv(command, env, workdir, anywhere)
    assert direct is not None, command
    argv, direct_env = direct
    by_bash = subprocess.run(
        ["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True, check=True
    )
    by_us = subprocess.run(argv, cwd=workdir, env=direct_env, capture_output=True, text=True)
    assert by_us.returncode == 0, by_us.stderr
    # The same lines; bash lists its environment in an order of its own (`env` shows it).
    assert sorted(by_us.stdout.splitlines()) == sorted(by_bash.stdout.splitlines())
    assert by_us.stdout.strip()


@pytest.mark.parametrize(
    "command",
    [
        "echo hi",  # a builtin
        "true",
        "cd /",
        "exec show",
        "time show",  # a keyword
        "FOO=1 show",  # an assignment
        "show $HOME",
        "show *.sh",
        "show ~/x",
        "show 'quoted'",
        'show "quoted"',
        "show a\\ b",
        "show > out",
        "show | cat",
        "show; show",
        "show && show",
        "show &",
        "show # a comment",
        "show\nshow",
        "show {a,b}",
        "show [ab]",
        "show `id`",
        "show (x)",
        "show !x",
        "no-such-program",
        "",
        "   ",
    ],
)
def test_anything_more_than_one_plain_program_goes_to_bash(place, command):
    workdir, env = place
    assert plain_command.direct_argv(command, env, workdir, anywhere) is None


def test_a_program_the_step_could_not_run_goes_to_bash(place):
    """bash, not us, says what happens to a program the step user may not run or read, and
    to one inside what the step cannot see."""
    workdir, env = place
    show = Path(env["PATH"].split(":")[0]) / "show"
    show.chmod(0o750)  # the step runs as a user of its own: not in the owner's group
    assert plain_command.direct_argv("show", env, workdir, anywhere) is None
    show.chmod(0o711)  # executable, but a script must be read by its interpreter
    assert plain_command.direct_argv("show", env, workdir, anywhere) is None
    show.chmod(0o755)
    hidden = show.parent

    def sees(path: Path) -> bool:
        return hidden not in path.parents

    assert plain_command.direct_argv("show", env, workdir, sees) is None


def test_a_symlink_is_followed_into_what_the_step_can_see(place, tmp_path):
    workdir, env = place
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "tool").write_text(SHOW)
    (secret / "tool").chmod(0o755)
    link = Path(env["PATH"].split(":")[0]) / "tool"
    link.symlink_to(secret / "tool")

    def sees(path: Path) -> bool:
        return secret not in path.parents

    assert plain_command.direct_argv("tool", env, workdir, sees) is None
    assert plain_command.direct_argv("tool", env, workdir, anywhere) is not None


def test_the_path_search_is_bashs(place, tmp_path):
    workdir, env = place
    first, second = tmp_path / "first", tmp_path / "second"
    for d in (first, second):
        d.mkdir()
    (first / "show").mkdir()  # a directory of that name is passed over, as bash does
    (second / "show").write_text(SHOW)
    (second / "show").chmod(0o755)
    env = {**env, "PATH": f"{first}:{second}"}
    assert plain_command.program("show", env["PATH"], workdir) == (
        second / "show",
        f"{second}/show",
    )
    # An empty entry is the working directory, spelled as bash spells it in `_`.
    assert plain_command.program("local.sh", f":{second}", workdir) == (
        workdir / "local.sh",
        "./local.sh",
    )


def test_an_environment_that_sets_something_for_bash_goes_to_bash(place):
    workdir, env = place
    assert plain_command.direct_argv("show", env, workdir, anywhere) is not None
    assert plain_command.direct_argv("show", {"HOME": "/x"}, workdir, anywhere) is None
    for name, value in [
        ("BASH_ENV", "/x"),
        ("ENV", "/x"),
        ("SHELLOPTS", "xtrace"),
        ("BASHOPTS", "extglob"),
        ("BASH_FUNC_show%%", "() { echo function; }"),  # an exported function named show
        ("PATH", f"~/bin:{env['PATH']}"),  # bash expands the tilde, the C library does not
    ]:
        assert plain_command.direct_argv("show", {**env, name: value}, workdir, anywhere) is None


def test_a_script_without_an_interpreter_line_goes_to_bash(place):
    """bash runs such a file as a bash script; started directly, the C library would hand it to
    /bin/sh (or fail): not the same program."""
    workdir, env = place
    script = workdir / "bare.sh"
    script.write_text("echo [[ bashism ]]\n")
    script.chmod(0o755)
    assert plain_command.direct_argv("./bare.sh", env, workdir, anywhere) is None
    script.write_text("#!/bin/bash\necho fine\n")
    assert plain_command.direct_argv("./bare.sh", env, workdir, anywhere) is not None


def test_the_step_sees_what_the_sandbox_mounts_show(tmp_path):
    """The later mounts cover the earlier: the workdir, over what is hidden, over what is shared,
    over the private home and bubblewrap's own /tmp, /dev and /proc."""
    home, runs, shared = Path("/home/op"), Path("/srv/runs"), Path("/home/op/tools")
    box = Sandbox(
        bwrap="/usr/bin/bwrap",
        user=None,
        runs_root=runs,
        shared=(shared, Path("/tmp/shared")),
        hidden=(runs, Path("/home/op/tools/keys")),
        private=(home,),
    )
    workdir = runs / "r1"
    sees = {
        "/usr/bin/env": True,
        "/srv/runs/r1/check.sh": True,  # its own directory
        "/srv/runs/r2/check.sh": False,  # another run's
        "/srv/runs/r1/../r2/x": False,
        "/home/op/bin/tool": False,  # the private home
        "/home/op/tools/lint": True,  # shared out of it
        "/home/op/tools/keys/k": False,  # hidden inside what is shared
        "/tmp/x": False,  # bubblewrap's own /tmp
        "/tmp/shared/x": True,
        "/proc/1/exe": False,
    }
    assert {p: box.step_sees(Path(p), workdir) for p in sees} == sees
    unboxed = Sandbox(bwrap=None, user=(1, 1), runs_root=runs, hidden=(runs,), private=(home,))
    assert unboxed.step_sees(Path("/tmp/x"), workdir)  # without bubblewrap /tmp is the host's


def test_the_words_are_split_as_bash_splits_them():
    assert plain_command.words("a  b\tc") == ["a", "b", "c"]
    assert plain_command.words("a=b c") is None
    assert plain_command.words("a b=c") == ["a", "b=c"]
