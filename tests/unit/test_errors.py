"""One error root: every kind maps once to an exit code, an HTTP status and a contract envelope;
each door (the command line, the contract) answers a kind with its code and anything else as a
bug (exit 1 / exit 40, the traceback kept); no door catches a broad built-in; every exception
class of Threadline is a ThreadlineError but the few listed here, each with its reason."""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import json
import pkgutil
import sys
from pathlib import Path

import pytest

import console
import engine_adapter
from engine_adapter.cli import contract
from engine_adapter.cli.main import main
from engine_adapter.model.errors import (
    INTERNAL,
    KINDS,
    Conflict,
    Invalid,
    NotFound,
    Refused,
    ThreadlineError,
)
from engine_adapter.recipes import recipes

ROOT = Path(__file__).resolve().parents[2]
# kind -> (command line exit, HTTP status, contract exit, envelope error type)
TABLE = {
    NotFound: (2, 404, 20, "invalid_request"),
    Refused: (2, 403, 30, "policy_violation"),
    Invalid: (2, 400, 20, "invalid_request"),
    Conflict: (2, 409, 20, "invalid_request"),
}
# The doors: where an exception meets a person or a program. Each catches ThreadlineError (and
# named third-party errors it explains), never a broad built-in that would pass a bug of ours
# off as the user's mistake; `except Exception` only as the bug handler, which reports it.
DOORS = (
    "engine_adapter/cli/main.py",
    "engine_adapter/cli/contract_cli.py",
    "engine_adapter/cli/contract.py",
    "engine_adapter/ingress/hooks.py",
    "console/api.py",
)
BROAD = {"ValueError", "LookupError", "KeyError", "IndexError", "PermissionError", "RuntimeError"}
BUG_REPORTERS = {"report_bug", "_internal", "print_exc"}
# Exceptions that are no ThreadlineError, and why: signals inside one part that never reach a
# door (making them user errors would hide a leak of one as a bug), or a test's assertion.
NOT_THREADLINE = {
    "engine_adapter.bots.agent_loop.Stopped": "the attempt is no longer current; the loop ends",
    "engine_adapter.bots.agent_loop.AgentFailed": "a step's failure, recorded on the step",
    "engine_adapter.conductor.notifier.DeliveryError": "recorded on the notification, retried",
    "engine_adapter.conductor.notifier.Refused": "a DeliveryError that is not retried",
    "engine_adapter.conductor.reruns._Unrecorded": "a replay reaching where the run never got",
    "engine_adapter.conductor.handler_base.EndRun": "a child run ending at its first failure",
    "engine_adapter.ingress.hooks._LostRace": "rolls a duplicate delivery's run back",
    "engine_adapter.runs.child_runs.ParentEnded": "the conductor stops a run cancelled meanwhile",
    "engine_adapter.store.specialise._Unsupported": "a statement the rewrite leaves to Absurd",
    "engine_adapter.testing.harness.RunEndedElsewhere": "an AssertionError, for pytest",
}
ROOT_ONLY = {
    "engine_adapter.model.errors.ThreadlineError": "the root",
    "engine_adapter.cli.contract.ContractError": "an envelope: exit code and type given",
    "console.api.ApiError": "an HTTP answer: status given",
    "engine_adapter.catalog.proposals.ProposalError": "its kind is a value (proposals._ANSWERS)",
}


def test_each_kind_maps_once_to_every_door():
    assert set(KINDS) == set(TABLE)
    for kind, (exit_code, status, contract_exit, envelope_type) in TABLE.items():
        err = kind("x")
        assert isinstance(err, ThreadlineError)
        got = (err.exit_code, err.http_status, err.contract_exit, err.envelope_type)
        assert got == (exit_code, status, contract_exit, envelope_type), kind
    assert (INTERNAL.exit_code, INTERNAL.http_status, INTERNAL.contract_exit) == (1, 500, 40)
    assert INTERNAL.envelope_type == "internal_error"


def test_the_classes_that_answer_otherwise_than_their_kind():
    from engine_adapter.catalog.proposals import ProposalError
    from engine_adapter.catalog.workflows import ProtectedChange, WorkflowNotFound
    from engine_adapter.ingress.webhook_auth import SignatureError
    from engine_adapter.model.settings import NotConfigured
    from engine_adapter.runs.resume_tokens import TokenRefused
    from engine_adapter.runs.spawn import Paused, SpawnError

    table = {
        recipes.RecipeError(["a: b"]): (Invalid, 422, 10, "invalid_workflow"),
        ProtectedChange(["a: b"]): (Refused, 403, 30, "policy_violation"),
        WorkflowNotFound("w"): (NotFound, 404, 10, "workflow_not_found"),
        SpawnError("p"): (Invalid, 400, 10, "invalid_payload"),
        Paused("p"): (Refused, 403, 30, "policy_violation"),
        TokenRefused("t"): (Refused, 403, 20, "resume_refused"),
        SignatureError("s"): (Refused, 401, 30, "policy_violation"),
        NotConfigured("n"): (Conflict, 503, 20, "invalid_request"),
        ProposalError("stale", "s"): (ThreadlineError, 409, 20, "workflow_hash_mismatch"),
        ProposalError("not_found", "s"): (ThreadlineError, 404, 10, "workflow_not_found"),
    }
    for err, (kind, status, contract_exit, envelope_type) in table.items():
        assert isinstance(err, kind)
        got = (err.exit_code, err.http_status, err.contract_exit, err.envelope_type)
        assert got == (2, status, contract_exit, envelope_type), err


def test_a_contract_error_is_the_envelope_of_any_kind():
    for kind, (_, _, contract_exit, envelope_type) in TABLE.items():
        err = contract.ContractError.of(kind("why"))
        assert (err.code, err.kind, str(err)) == (contract_exit, envelope_type, "why")


def _caught(handler: ast.ExceptHandler) -> set[str]:
    if handler.type is None:
        return {"BaseException"}
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {ast.unparse(t).rsplit(".", 1)[-1] for t in types}


def _reports_or_reraises(handler: ast.ExceptHandler) -> bool:
    calls = {
        ast.unparse(n.func).rsplit(".", 1)[-1] for n in ast.walk(handler) if isinstance(n, ast.Call)
    }
    reraises = isinstance(handler.body[-1], ast.Raise) and handler.body[-1].exc is None
    return bool(calls & BUG_REPORTERS) or reraises


def door_problems(source: str, name: str) -> list[str]:
    problems = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ExceptHandler):
            continue
        caught = _caught(node)
        if caught & BROAD:
            problems.append(f"{name}:{node.lineno} catches {sorted(caught & BROAD)}")
        if caught & {"Exception", "BaseException"} and not _reports_or_reraises(node):
            problems.append(f"{name}:{node.lineno} catches everything without reporting a bug")
    return problems


def test_no_door_catches_a_broad_builtin():
    problems = [p for door in DOORS for p in door_problems((ROOT / door).read_text(), door)]
    assert problems == []


def test_the_door_scan_finds_a_broad_catch():
    """The scan itself can fail: the catch list main() had, and a silent catch-all."""
    old = "try:\n    f()\nexcept (LookupError, ValueError) as err:\n    print(err)\n"
    silent = "try:\n    f()\nexcept Exception:\n    pass\n"
    assert door_problems(old, "old") == ["old:3 catches ['LookupError', 'ValueError']"]
    assert door_problems(silent, "s") == ["s:3 catches everything without reporting a bug"]


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for package in (engine_adapter, console):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == info.name:
                    found[f"{info.name}.{cls.__qualname__}"] = cls
    return found


def test_every_exception_class_is_a_threadline_error_but_the_listed():
    classes = _exception_classes()
    assert len(classes) > 40  # the walk found them
    outside = {name for name, cls in classes.items() if not issubclass(cls, ThreadlineError)}
    assert outside == set(NOT_THREADLINE)
    # ...and each is one of the kinds, but the root and those whose kind is each instance's
    rooted = {name for name, cls in classes.items() if issubclass(cls, ThreadlineError)}
    assert {name for name in rooted if not issubclass(classes[name], KINDS)} == set(ROOT_ONLY)


# -- the command line, in-process: a real command whose first call is made to raise ----------
def _validate_raising(monkeypatch, tmp_path, err: BaseException) -> None:
    def raising(*args, **kwargs):
        raise err

    monkeypatch.setattr(recipes, "load_recipe_file", raising)
    (tmp_path / "r.yaml").write_text("slug: r\nsteps: []\n")
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("kind", list(TABLE))
def test_the_command_line_answers_each_kind_with_its_exit_code(monkeypatch, tmp_path, capsys, kind):
    _validate_raising(monkeypatch, tmp_path, kind("workflow r: what to change"))
    assert main(["recipe", "validate", "r.yaml"]) == TABLE[kind][0]
    err = capsys.readouterr().err
    assert err == "threadline: workflow r: what to change\n"


def test_a_bug_at_the_command_line_is_exit_1_with_its_traceback(monkeypatch, tmp_path, capsys):
    _validate_raising(monkeypatch, tmp_path, KeyError("slug"))
    assert main(["recipe", "validate", "r.yaml"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "KeyError: 'slug'" in err
    last = err.strip().splitlines()[-1]
    assert last == "threadline: internal error: a bug in Threadline; its traceback is above"


# -- the contract, in-process: `threadline validate` of a recipe object needs no database ------
def _contract(monkeypatch, capsys, err: BaseException) -> tuple[int, dict]:
    def raising(*args, **kwargs):
        raise err

    monkeypatch.setattr(contract, "validate", raising)
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps({"workflow": {"slug": "r"}})))
    code = main(["validate"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", list(TABLE))
def test_the_contract_answers_each_kind_with_its_envelope(monkeypatch, capsys, kind):
    code, envelope = _contract(monkeypatch, capsys, kind("why"))
    contract.validator("envelope").validate(envelope)
    assert code == TABLE[kind][2]
    assert envelope["error"] == {"type": TABLE[kind][3], "message": "why", "details": []}


def test_a_bug_in_the_contract_is_exit_40_with_its_traceback(monkeypatch, capsys):
    code, envelope = _contract(monkeypatch, capsys, KeyError("slug"))
    contract.validator("envelope").validate(envelope)
    assert code == 40 and envelope["error"]["type"] == "internal_error"
    assert envelope["error"]["message"] == "KeyError: 'slug'"
    details = envelope["error"]["details"]
    assert details[0].startswith("at test_errors.py:") and "Traceback" in details[1]
