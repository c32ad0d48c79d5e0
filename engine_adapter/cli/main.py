"""The `threadline` command. Read commands take --json; errors name the problem and exit
non-zero."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

from engine_adapter.model import logs

EXIT_DATABASE = 3  # the database refused or failed (one line, no traceback)
PROCESSES = ("up", "conductor", "bots", "hooks", "console")  # the commands that run until stopped


def build_parser() -> argparse.ArgumentParser:
    """Each command group adds its own commands, in the order `threadline --help` lists them."""
    from engine_adapter.cli import (
        commands_govern,
        commands_operate,
        commands_recipes,
        commands_runs,
        commands_serve,
        contract_cli,
        reset,
    )

    p = argparse.ArgumentParser(
        prog="threadline", description="Durable workflows where every run is a thread."
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (
        commands_serve,
        commands_recipes,
        commands_runs,
        commands_operate,
        commands_govern,
        contract_cli,
        reset,
    ):
        group.register(sub)
    for name in PROCESSES:  # every long-running process logs alike
        sub.choices[name].add_argument(
            "--log-format",
            choices=logs.FORMATS,
            default=None,
            help=f"text lines, or one JSON object per line (default ${logs.LOG_FORMAT_ENV})",
        )
    return p


def database_error_line(err: Exception) -> str:
    """A database error in one line: its first line, its kind and SQLSTATE."""
    first = (str(err).strip().splitlines() or [""])[0]
    state = getattr(err, "sqlstate", None)
    kind = type(err).__name__ + (f" {state}" if state else "")
    return f"database error ({kind}): {first or 'no message'}"


def main(argv: list[str] | None = None) -> int:
    import psycopg

    args = build_parser().parse_args(argv)
    # Each process names itself to Postgres (pg_stat_activity, the server's log): libpq reads it.
    from engine_adapter.model.errors import INTERNAL, ThreadlineError
    from engine_adapter.model.settings import application_name

    os.environ["PGAPPNAME"] = application_name(args.fn.__name__.removeprefix("cmd_"))
    try:
        if args.fn.__name__.removeprefix("cmd_") in PROCESSES:
            logs.configure(args.command, args.log_format)
        return args.fn(args)
    except ThreadlineError as err:  # meant for a person: its message, its kind's exit code
        print(f"threadline: {err}", file=sys.stderr)
        return err.exit_code
    except psycopg.Error as err:
        # The database refused or failed: one line naming it (its class keeps a bug of ours
        # recognisable); anything else that is not ours to explain still shows its traceback.
        print(f"threadline: {database_error_line(err)}", file=sys.stderr)
        return EXIT_DATABASE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `threadline show RUN | head`: the reader has gone, which is no error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a process ended by SIGPIPE
    except Exception:  # a bug of ours: its traceback, then one line that says so
        if logs.in_json():  # one record, its traceback inside
            logging.getLogger("threadline").exception("threadline: %s", INTERNAL.message)
            return INTERNAL.exit_code
        traceback.print_exc()
        print(f"threadline: {INTERNAL.message}; its traceback is above", file=sys.stderr)
        return INTERNAL.exit_code


if __name__ == "__main__":
    sys.exit(main())
