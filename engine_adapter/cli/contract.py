"""The runtime contract for programs and agents: one JSON request on stdin, exactly one JSON
envelope on stdout, progress as NDJSON events on stderr, and an exit code that says which kind of
answer it is (the Agent-Ops runtime contract, in Threadline's words and snake_case).

`threadline run` starts (or, with the same idempotency key, finds) a run and follows it until it
finishes or pauses at a gate; a pause hands out a resume token, and `threadline resume` decides
the gate with it and follows the run on. `threadline validate` checks a workflow without running
it. The request and envelope schemas are the JSON Schema files in `schemas/`; every answer is
valid against them.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeGuard, overload

import psycopg
from referencing import Registry, Resource

from engine_adapter.cli.contract_follow import STATUS, Emit, Follower
from engine_adapter.cli.requests import (
    PolicyRequest,
    ProposeRequest,
    RequestName,
    ResumeRequest,
    RunRequest,
    ValidateRequest,
)
from engine_adapter.model import domain, errors
from engine_adapter.model.errors import ThreadlineError
from engine_adapter.model.identity import Actor
from engine_adapter.model.vocab import EnvelopeStatus, GateDecision, TriggerKind
from engine_adapter.read.read_model import show_run
from engine_adapter.recipes.recipes import _SLUG as SLUG
from engine_adapter.recipes.recipes import Recipe, RecipeError, load_recipe_text, walk_steps
from engine_adapter.runs import resume_tokens
from engine_adapter.store import db

if TYPE_CHECKING:
    import jsonschema

SCHEMAS = Path(__file__).with_name("schemas")
EXIT_OK, EXIT_INVALID, EXIT_CONTRACT, EXIT_POLICY, EXIT_INTERNAL = (
    errors.CONTRACT_OK,
    errors.CONTRACT_INVALID,
    errors.CONTRACT_MISMATCH,
    errors.CONTRACT_POLICY,
    errors.CONTRACT_INTERNAL,
)


class ContractError(ThreadlineError):
    """An answer that is an error envelope: its exit code, type and message."""

    def __init__(
        self, code: int, kind: str, message: str, details: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.kind, self.details = code, kind, details or []
        self.contract_exit, self.envelope_type = code, kind

    @classmethod
    def of(cls, err: ThreadlineError) -> ContractError:
        """Any Threadline error as its envelope: the exit code and type its kind maps to."""
        if isinstance(err, ContractError):
            return err
        return cls(err.contract_exit, err.envelope_type, str(err), getattr(err, "errors", None))


def schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def validator(name: str) -> jsonschema.Draft202012Validator:
    """A validator of one of the published schemas; they refer to each other by file name."""
    import jsonschema  # here, not at the top: payload_schema.py says why

    registry: Registry[Any] = Registry().with_resources(
        (path.name, Resource.from_contents(json.loads(path.read_text())))
        for path in SCHEMAS.glob("*.schema.json")
    )
    return jsonschema.Draft202012Validator(schema(name), registry=registry)


def check_request(request: Any, name: RequestName) -> Any:
    """The request, valid against its schema (so of its typed record, requests.py); else a
    contract error naming each bad field."""
    validator_ = validator(name)
    errors = sorted(validator_.iter_errors(request), key=lambda e: list(e.absolute_path))
    if errors:
        raise ContractError(
            EXIT_CONTRACT,
            "invalid_request",
            f"the {name} request does not match its schema",
            [f"{'/'.join(map(str, e.absolute_path)) or '(request)'}: {e.message}" for e in errors],
        )
    return request


@overload
def read_request(text: str, name: Literal["validate"]) -> ValidateRequest: ...
@overload
def read_request(text: str, name: Literal["run"]) -> RunRequest: ...
@overload
def read_request(text: str, name: Literal["resume"]) -> ResumeRequest: ...
@overload
def read_request(text: str, name: Literal["propose"]) -> ProposeRequest: ...
def read_request(text: str, name: RequestName) -> Any:
    """The request `text` holds, checked against its schema: of the typed record `name` names."""
    try:
        request = json.loads(text)
    except json.JSONDecodeError as err:
        raise ContractError(
            EXIT_CONTRACT, "invalid_request", f"the request is not JSON: {err}"
        ) from None
    return check_request(request, name)


def error_envelope(err: ContractError, run_id: str | None = None) -> dict[str, Any]:
    return {
        "ok": False,
        "status": EnvelopeStatus.FAILED,
        "run_id": run_id,
        "workflow": None,
        "output": None,
        "steps": [],
        "requires_approval": None,
        "error": {"type": err.kind, "message": str(err), "details": err.details},
    }


# -- validate ----------------------------------------------------------------------------------
def names_a_workflow(workflow: Any) -> TypeGuard[str]:
    """A slug, as `run` takes it (a recipe's text holds more than a slug's characters)."""
    return isinstance(workflow, str) and SLUG.fullmatch(workflow.strip()) is not None


def validate(
    request: ValidateRequest, conn: psycopg.Connection[Any] | None = None
) -> tuple[dict[str, Any], int]:
    """Check what `run` would run: a recipe (object or text), or a workflow's current version by
    its slug (conn: where to look it up), whose hash the answer gives for pinning."""
    from engine_adapter.catalog.workflows import WorkflowNotFound

    workflow = request["workflow"]
    try:
        if names_a_workflow(workflow):
            assert conn is not None, "a slug is looked up in the database"
            digest = current_hash(conn, workflow.strip())
        else:
            digest = _hash(_recipe_of(workflow).canonical_hash)
    except RecipeError as err:
        return _invalid(err.errors), EXIT_INVALID
    except WorkflowNotFound as err:
        return _invalid([str(err)]), EXIT_INVALID
    return {"ok": True, "status": "valid", "workflow_hash": digest, "errors": []}, EXIT_OK


def _invalid(errors: list[str]) -> dict[str, Any]:
    return {"ok": False, "status": "invalid", "workflow_hash": None, "errors": errors}


def current_hash(conn: psycopg.Connection[Any], slug: str) -> str:
    """The hash `run` checks a pinned workflow_hash against: the current version's, its recipe
    checked again (WorkflowNotFound when there is none)."""
    from engine_adapter.catalog.workflows import get_workflow

    current = get_workflow(conn, slug)
    Recipe.from_dict(current["recipe"], slug)
    return _hash(current["hash"])


def hash_hint(slug: str) -> str:
    return f"`threadline recipe hash {slug}` prints it"


def _recipe_of(workflow: Any) -> Recipe:
    if isinstance(workflow, str):  # YAML or JSON text
        return load_recipe_text(workflow, "workflow")
    return Recipe.from_dict(workflow, "workflow")


def _hash(hexdigest: str) -> str:
    return f"sha256:{hexdigest}"


# -- run ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Policy:
    timeout_s: float | None = None
    max_steps: int | None = None
    max_parallel: int | None = None
    max_output_bytes: int | None = None

    @classmethod
    def from_request(cls, d: PolicyRequest | None) -> Policy:
        d = d or PolicyRequest()
        timeout_ms = d.get("timeout_ms")
        return cls(
            timeout_s=None if timeout_ms is None else timeout_ms / 1000,
            max_steps=d.get("max_steps"),
            max_parallel=d.get("max_parallel"),
            max_output_bytes=d.get("max_output_bytes"),
        )

    def check(self, recipe: Recipe) -> None:
        """What can be known before the run starts: its size and its parallelism."""
        steps = list(walk_steps(recipe.steps))
        leaves = [s for s in steps if s.kind in domain.LEAF_KINDS]
        if self.max_steps is not None and len(leaves) > self.max_steps:
            raise ContractError(
                EXIT_POLICY,
                "policy_violation",
                f"workflow {recipe.slug} has {len(leaves)} steps; the policy's max_steps is "
                f"{self.max_steps}",
            )
        if self.max_parallel is None:
            return
        for step in steps:
            width = _width(step)
            if width > self.max_parallel:
                raise ContractError(
                    EXIT_POLICY,
                    "policy_violation",
                    f"step {step.id} runs up to {width} branches at once; the policy's "
                    f"max_parallel is {self.max_parallel}",
                )


def _width(step: Any) -> int:
    """How many child runs a step may run at once (1 for a step that runs none)."""
    if step.kind == domain.PARALLEL:
        return step.max_parallel or len(step.blocks)
    if step.kind == domain.FOREACH:
        return step.max_parallel or 1
    return 1


def run(
    conn: psycopg.Connection[Any], request: RunRequest, actor: Actor, emit: Emit
) -> tuple[dict[str, Any], int]:
    """Start (or find) the run the request asks for and follow it: the envelope, exit code."""
    from engine_adapter.catalog.workflows import WorkflowNotFound, apply_recipe, get_workflow
    from engine_adapter.runs.spawn import SpawnError, manual_key, spawn

    policy = Policy.from_request(request.get("policy"))
    started = time.monotonic()
    workflow = request["workflow"]
    try:
        if isinstance(workflow, str):
            slug = workflow
        else:
            slug = apply_recipe(conn, Recipe.from_dict(workflow, "workflow"), actor=actor).slug
        current = get_workflow(conn, slug)
    except RecipeError as err:
        raise ContractError(
            EXIT_INVALID, "invalid_workflow", "the workflow is invalid", err.errors
        ) from None
    except WorkflowNotFound as err:
        raise ContractError.of(err) from None
    pinned = request.get("workflow_hash")
    if pinned is not None and pinned != _hash(current["hash"]):
        raise ContractError(
            EXIT_CONTRACT,
            "workflow_hash_mismatch",
            f"workflow {slug} is at {_hash(current['hash'])}, not the pinned {pinned} "
            f"({hash_hint(slug)})",
        )
    warnings = []
    if pinned is None and isinstance(workflow, str):  # a whole recipe pins itself
        warnings.append(
            f"no workflow_hash pinned: ran workflow {slug} v{current['version']} as it is now, "
            f"{_hash(current['hash'])}; pin it to run only that version ({hash_hint(slug)})"
        )
    policy.check(Recipe.from_dict(current["recipe"], slug))
    key = request.get("idempotency_key") or str(uuid.uuid4())
    payload = request.get("payload") or {}
    try:
        spawned = spawn(
            conn,
            slug,
            payload,
            idempotency_key=manual_key(slug, key),
            trigger={
                "kind": TriggerKind.MANUAL,
                "caller": actor.name,
                "request_id": key,
                "via": "contract",
            },
            actor=actor,
        )
    except SpawnError as err:  # a pause is a refusal (policy), anything else the payload's
        raise ContractError.of(err) from None
    run_id = spawned.run_id
    if not spawned.created:
        existing = show_run(conn, run_id, thread_limit=0)
        if existing["payload"] != payload or existing["workflow"] != slug:
            raise ContractError(
                EXIT_CONTRACT,
                "idempotency_conflict",
                f"idempotency key {key!r} was used for run {run_id} with another workflow or "
                "payload",
            )
    emit(Follower(conn, run_id, emit).event("run.started", workflow=slug, created=spawned.created))
    envelope, code = _follow(conn, run_id, actor, emit, policy, started)
    if warnings:
        envelope["warnings"] = warnings
    return envelope, code


def _follow(
    conn: psycopg.Connection[Any],
    run_id: str,
    actor: Actor,
    emit: Emit,
    policy: Policy,
    started: float,
) -> tuple[dict[str, Any], int]:
    from engine_adapter.runs.commands import cancel_run

    deadline = None if policy.timeout_s is None else started + policy.timeout_s
    follower = Follower(conn, run_id, emit)
    view = follower.follow(deadline)
    code, error = EXIT_OK, None
    if view["state"] not in STATUS and view["gate"] is None:  # the policy's time is up
        why = f"the run did not finish or pause within the policy's {policy.timeout_s:g} s"
        cancel_run(conn, run_id, actor, f"policy: {why}")
        view = follower.follow(time.monotonic() + 30)
        code, error = EXIT_POLICY, {"type": "policy_violation", "message": why, "details": []}
    envelope = envelope_of(conn, view, actor, policy)
    if error:
        envelope.update(ok=False, error=error)
    emit(follower.event("run.finished", status=envelope["status"]))
    return envelope, code


def envelope_of(
    conn: psycopg.Connection[Any], view: dict[str, Any], actor: Actor, policy: Policy
) -> dict[str, Any]:
    gate = view["gate"]
    status = (
        EnvelopeStatus.NEEDS_APPROVAL if gate else STATUS.get(view["state"], EnvelopeStatus.FAILED)
    )
    steps = [_step(node, policy) for node in view["steps"]]
    output = view["outputs"] or next(
        (s["output"] for s in reversed(steps) if s["status"] == domain.COMPLETED), None
    )
    # The step the run failed at is its last failed one: a step failed before it under
    # `on_failure: continue` did not end the run.
    failed = next((s for s in reversed(steps) if s["status"] == domain.FAILED), None)
    return {
        "ok": status in (EnvelopeStatus.OK, EnvelopeStatus.NEEDS_APPROVAL),
        "status": status,
        "run_id": view["run_id"],
        "workflow": {"slug": view["workflow"], "version": view["workflow_version"]},
        "output": output,
        "steps": steps,
        "requires_approval": _approval(conn, view, actor) if gate else None,
        "error": None
        if status != EnvelopeStatus.FAILED
        else {
            "type": "step_failed",
            "message": f"step {failed['id']} failed: {failed['reason'] or failed['output']}"
            if failed
            else f"the run is {view['state']}",
            "details": [],
        },
    }


def _step(node: dict[str, Any], policy: Policy) -> dict[str, Any]:
    output, cut = node["output"], False
    cap = policy.max_output_bytes
    if cap is not None and isinstance(output, str) and len(output.encode()) > cap:
        output, cut = output.encode()[:cap].decode(errors="ignore"), True
    step = {
        "id": node["id"],
        "kind": node["kind"],
        "status": node["status"],
        "attempt": node["attempts"],
        "started_at": node["started_at"],
        "finished_at": node["finished_at"],
        "output": output,
        "reason": node["reason"],
    }
    if cut:
        step["output_truncated"] = True
    return step


def _approval(conn: psycopg.Connection[Any], view: dict[str, Any], actor: Actor) -> dict[str, Any]:
    """The open gate, with a fresh resume token that decides it as the caller."""
    gate, run_id = view["gate"], view.get("gate_run_id") or view["run_id"]
    question = db.fetch_one(conn, "gate_question", dict(run_id=run_id, gate_key=gate["key"]))
    issued = resume_tokens.issue(conn, run_id, gate["key"], actor.name, actor.via)
    return {
        "run_id": run_id,
        "step": gate["step"],
        "prompt": question["prompt"] if question else "",
        "resume_token": issued.token,
        "token_expires_at": issued.expires_at.isoformat(),
        "timeout_at": question["deadline"] if question else None,
        "on_timeout": gate["on_timeout"],
        "approvers": gate["approvers"],
    }


# -- resume ------------------------------------------------------------------------------------
def resume(
    conn: psycopg.Connection[Any], request: ResumeRequest, actor: Actor, emit: Emit
) -> tuple[dict[str, Any], int]:
    """Decide the gate the token is bound to (as the token's subject), then follow the run on."""
    from engine_adapter.runs.gates import DecisionRefused
    from engine_adapter.runs.run_ids import RunIdError, resolve_run_id
    from engine_adapter.runs.thread_entries import RunNotFound

    try:
        run_id = resolve_run_id(conn, request["run_id"])
    except (RunIdError, RunNotFound) as err:
        raise ContractError(EXIT_CONTRACT, "resume_refused", str(err)) from None
    decision = request.get("decision", GateDecision.APPROVE)
    try:
        redeemed = resume_tokens.redeem(
            conn, request["resume_token"], decision, actor.via, request.get("reason"), run_id
        )
    except (resume_tokens.TokenRefused, DecisionRefused) as err:
        raise ContractError(EXIT_CONTRACT, "resume_refused", str(err)) from None
    follower = Follower(conn, run_id, emit)
    kind = "approval.approved" if decision == GateDecision.APPROVE else "approval.denied"
    emit(follower.event(kind, gate=redeemed.gate_key, by=redeemed.actor.name))
    emit(follower.event("run.resumed"))
    policy = Policy.from_request(request.get("policy"))
    return _follow(conn, run_id, actor, emit, policy, time.monotonic())


# -- propose -----------------------------------------------------------------------------------
def propose(
    conn: psycopg.Connection[Any], request: ProposeRequest, actor: Actor, emit: Emit
) -> tuple[dict[str, Any], int]:
    """A change to a workflow that takes proposals, proposed for review: never applied here."""
    from engine_adapter.catalog import proposals

    try:
        recipe = _recipe_of(request["proposed_workflow"])
    except RecipeError as err:
        raise ContractError(
            EXIT_INVALID, "invalid_workflow", "the proposed workflow is invalid", err.errors
        ) from None
    try:
        row = proposals.propose(
            conn, request["workflow"], request["base_hash"], recipe, request["summary"], actor
        )
    except proposals.ProposalError as err:  # its kind says which envelope (proposals.py)
        raise ContractError.of(err) from None
    return {
        "ok": True,
        "status": "proposal_created",
        "proposal": {
            "id": row["id"],
            "workflow": row["workflow"],
            "base_hash": _hash(row["base_hash"]),
            "proposed_hash": _hash(row["proposed_hash"]),
            "summary": row["summary"],
            "risk": row["risk"],
            "risk_reasons": list(row["risk_reasons"]),
            "diff": row["diff"],
            "status": row["status"],
            "expires_at": row["expires_at"].isoformat(),
        },
        "error": None,
    }, EXIT_OK


def proposal_error(err: ContractError) -> dict[str, Any]:
    return {
        "ok": False,
        "status": "proposal_failed",
        "proposal": None,
        "error": {"type": err.kind, "message": str(err), "details": err.details},
    }
