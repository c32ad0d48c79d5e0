"""The contract's requests as typed records: what `threadline validate|run|resume|propose` read
from standard input once schemas/<name>.schema.json has accepted it.

The JSON schemas stay the definition other programs read; these mirror them for the code that
handles a request (tests/unit/test_contract_requests.py holds the two equal, field by field)."""

from typing import Any, Literal, NotRequired, TypedDict

RequestName = Literal["validate", "run", "resume", "propose"]


class PolicyRequest(TypedDict, total=False):
    timeout_ms: int
    max_steps: int
    max_parallel: int
    max_output_bytes: int


class ValidateRequest(TypedDict):
    workflow: dict[str, Any] | str  # a recipe (object, YAML or JSON text) or a workflow's slug


class RunRequest(TypedDict):
    workflow: dict[str, Any] | str  # a slug, or a whole recipe (applied first)
    workflow_hash: NotRequired[str]
    payload: NotRequired[dict[str, Any]]
    idempotency_key: NotRequired[str]
    policy: NotRequired[PolicyRequest]


class ResumeRequest(TypedDict):
    run_id: str
    resume_token: str
    decision: NotRequired[Literal["approve", "deny"]]
    reason: NotRequired[str]
    policy: NotRequired[PolicyRequest]


class ProposeRequest(TypedDict):
    workflow: str
    base_hash: str
    proposed_workflow: dict[str, Any] | str
    summary: str


RECORDS: dict[RequestName, type] = {
    "validate": ValidateRequest,
    "run": RunRequest,
    "resume": ResumeRequest,
    "propose": ProposeRequest,
}
