"""A step's command without bash, when bash would only start one program.

`bash -c 'pytest -q tests'` parses the line, finds pytest on PATH and execs it in its own place,
so the program runs exactly as if started directly; bash's own start-up (an exec, its dynamic
loading and initialisation) is all it adds. A command line made only of literal words, whose
first word names a program the step can run, is therefore started directly, with the argv and
the three variables bash would have given it (PWD, SHLVL, _). Everything else goes to bash as
before: any character bash treats specially (quotes, $, globs, ~, redirections, ;, &, |, #,
newlines ...), a first word that is a builtin, a keyword or an assignment, a program that is not
found or that the step could not see or run (so bash's "command not found" and exit 127 stay
bash's), a file that is neither a binary nor a script with a #! line (bash runs it as a bash
script), and an environment that sets something for bash (BASH_ENV, SHELLOPTS, an exported
function ...).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

# Characters bash gives no meaning to in a word (spaces and tabs separate the words).
_LITERAL_LINE = re.compile(r"[A-Za-z0-9_./,:=+@%\t -]+")
# Names bash resolves itself before looking at PATH (`compgen -b -k` of bash 5.2).
_BASH_WORDS = frozenset(
    """. : [ alias bg bind break builtin caller cd command compgen complete compopt continue
    declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history
    jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return set
    shift shopt source suspend test times trap true type typeset ulimit umask unalias unset wait
    if then else elif fi case esac for select while until do done in function time coproc""".split()
)
# Files, options and functions bash takes from its environment (BASH_ENV, BASHOPTS,
# BASH_FUNC_name%%, BASH_XTRACEFD ...) before it runs the command.
_BASH_ENV_PREFIX = "BASH"
_BASH_ENV_NAMES = ("ENV", "SHELLOPTS", "PS4")
# What execve runs: a binary, or a script naming its interpreter. Any other file bash would run
# as a bash script itself, where the C library's execvp would hand it to /bin/sh.
_RUNNABLE_HEADS = (b"\x7fELF", b"#!")


def words(command: str) -> list[str] | None:
    """The command's words when bash would take every character literally, else None."""
    if not _LITERAL_LINE.fullmatch(command):
        return None
    found = command.split()
    if not found or found[0] in _BASH_WORDS or "=" in found[0]:
        return None
    return found


def program(name: str, path_var: str, workdir: Path) -> tuple[Path, str] | None:
    """Where bash would find `name`: a path as given (relative to the working directory), else
    the first file of that name on PATH (an empty entry is the working directory); and the name
    as bash spells it in `_` (the PATH entry joined to the name). None when that file is not one
    anyone may read and execute, or not one execve runs: the step may run as a user of its own,
    so the bot's permissions do not say whether bash would run it or search on."""
    entries = path_var.split(":")
    candidates = [name] if "/" in name else [f"{entry or '.'}/{name}" for entry in entries]
    for candidate in candidates:
        path = Path(os.path.normpath(workdir / candidate))
        try:
            mode = path.stat().st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            continue  # bash passes over directories too
        wanted = stat.S_IXOTH | stat.S_IROTH  # a script is read by its interpreter
        return (path, candidate) if mode & wanted == wanted and _runnable(path) else None
    return None


def _runnable(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head.startswith(_RUNNABLE_HEADS)


def direct_argv(
    command: str, env: dict[str, str], workdir: Path, step_sees: Callable[[Path], bool]
) -> tuple[list[str], dict[str, str]] | None:
    """(argv, environment) that start the command's program without bash, or None when the
    command needs bash. `step_sees` says whether a path is visible inside the step's sandbox."""
    if any(n.startswith(_BASH_ENV_PREFIX) or n in _BASH_ENV_NAMES for n in env):
        return None
    found = words(command)
    if found is None:
        return None
    if "PATH" not in env or "~" in env["PATH"]:
        return None  # bash's own default PATH, or one it would tilde-expand
    located = program(found[0], env["PATH"], workdir)
    if located is None:
        return None
    path, as_found = located
    if not step_sees(path) or not step_sees(path.resolve()):
        return None
    # What bash -c exports on its way to exec: the directory, its level (one up, then down again
    # as it execs in its own place), the program as it found it.
    extra = {"PWD": str(workdir), "SHLVL": env.get("SHLVL", "0"), "_": as_found}
    # The words as they are: the exec at the end of the sandbox searches the same PATH from the
    # same directory, and finds what was found here, with bash's argv[0].
    return found, {**env, **extra}
