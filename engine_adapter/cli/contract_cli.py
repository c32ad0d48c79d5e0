"""`threadline run | resume | validate`: the contract's commands (contract.py). Each reads one
JSON request on stdin, prints exactly one JSON envelope on stdout, writes progress as NDJSON on
stderr, and exits 0 (an answer: ok, needs_approval, cancelled, failed), 10 (invalid workflow),
20 (contract mismatch), 30 (policy violation) or 40 (internal error)."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from engine_adapter.cli import contract
from engine_adapter.cli.common import _actor, _conn
from engine_adapter.model.errors import INTERNAL, ThreadlineError
from engine_adapter.model.identity import Actor


def _emit(event: dict[str, Any]) -> None:
    print(json.dumps(event, ensure_ascii=False, default=str), file=sys.stderr, flush=True)


def _answer(envelope: dict[str, Any], code: int) -> int:
    print(json.dumps(envelope, ensure_ascii=False, default=str, indent=2))
    return code


def cmd_contract(args: argparse.Namespace) -> int:
    """One request in, one envelope out, whatever happens."""
    run_id = None
    try:
        text = sys.stdin.read()
        if args.request == "validate":
            checked = contract.read_request(text, "validate")
            if not contract.names_a_workflow(checked["workflow"]):
                return _answer(*contract.validate(checked))
            with _conn() as conn:  # a slug: its current version, as `run` would run it
                return _answer(*contract.validate(checked, conn))
        if args.request == "run":
            with _conn() as conn:
                return _answer(*contract.run(conn, contract.read_request(text, "run"), *_by(args)))
        if args.request == "resume":
            resume = contract.read_request(text, "resume")
            run_id = resume["run_id"]
            with _conn() as conn:
                return _answer(*contract.resume(conn, resume, *_by(args)))
        with _conn() as conn:
            return _answer(
                *contract.propose(conn, contract.read_request(text, "propose"), *_by(args))
            )
    except ThreadlineError as err:  # its kind says the exit code and type (model/errors.py)
        error = contract.ContractError.of(err)
    except Exception as err:  # a bug, or the database gone: still exactly one envelope
        error = _internal(err)
    if args.request == "propose":
        return _answer(contract.proposal_error(error), error.code)
    return _answer(contract.error_envelope(error, run_id), error.code)


def _by(args: argparse.Namespace) -> tuple[Actor, contract.Emit]:
    """Who asks, and where the request's progress events go."""
    return _actor(args), _emit


def _internal(err: Exception) -> contract.ContractError:
    """A bug's envelope: exit 40, its class and message, where it happened, then its traceback
    (standard error carries NDJSON only, so the envelope is where it is kept)."""
    where = traceback.extract_tb(err.__traceback__)[-1]
    return contract.ContractError(
        INTERNAL.contract_exit,
        INTERNAL.envelope_type,
        f"{type(err).__name__}: {err}".strip(),
        [
            f"at {Path(where.filename).name}:{where.lineno} in {where.name}",
            *"".join(traceback.format_exception(err)).rstrip().splitlines(),
        ],
    )


def register(sub: Any) -> None:
    for name, help in (
        ("run", "start a run from a JSON request on stdin; print one JSON envelope"),
        ("resume", "decide a paused run's gate with its resume token; print one JSON envelope"),
        (
            "validate",
            "check a workflow (a slug or a recipe, as run takes it) given in a JSON request on "
            "stdin; print one envelope",
        ),
        ("propose", "propose a change to a workflow (JSON on stdin); print one envelope"),
    ):
        sp = sub.add_parser(name, help=help, description=help + " (see docs/cli.md)")
        sp.set_defaults(fn=cmd_contract, request=name)
