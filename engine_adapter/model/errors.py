"""One root for every error Threadline means to tell a person about, and the four kinds it comes
in. Each kind says once how every door answers it: the command line's exit code, the HTTP status
(API, console, webhooks) and the runtime contract's exit code and error type. A door catches
ThreadlineError only; anything else that reaches it is a bug, answered as one (INTERNAL).

Imports nothing else of Threadline: every part may raise these.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass

# The runtime contract's exit codes (threadline run | resume | validate | propose).
CONTRACT_OK = 0  # an answer: ok, needs_approval, cancelled, failed
CONTRACT_INVALID = 10  # the workflow or its payload is invalid, or no such workflow
CONTRACT_MISMATCH = 20  # the request does not fit: its schema, a pinned hash, a resume token
CONTRACT_POLICY = 30  # the policy or a refusal forbids it
CONTRACT_INTERNAL = 40  # a bug, or the database gone
EXIT_USER = 2  # the command line: a user error, the message says what to change
EXIT_BUG = 1  # the command line: a bug of ours, the traceback follows on stderr


class ThreadlineError(Exception):
    """An error with a message meant for a person. Raise one of its kinds, not the root itself.
    A class (or one instance) may override what a door answers; the kind gives the default.

    The contract's error types are a published enum (cli/schemas/envelope.schema.json) that
    names what in the request was wrong: a kind's default is the general "invalid_request", and
    the classes that are one of the specific types say so (RecipeError: invalid_workflow,
    WorkflowNotFound: workflow_not_found, SpawnError: invalid_payload, TokenRefused:
    resume_refused)."""

    exit_code: int = EXIT_USER
    http_status: int = 400
    contract_exit: int = CONTRACT_MISMATCH
    envelope_type: str = "invalid_request"


class NotFound(ThreadlineError):
    """No such thing: a run, a workflow, a version, a proposal, an account."""

    http_status = 404


class Refused(ThreadlineError):
    """Not allowed: authorization, a limit, a protected workflow, a pause."""

    http_status = 403
    contract_exit = CONTRACT_POLICY
    envelope_type = "policy_violation"


class Invalid(ThreadlineError):
    """Bad input; the message names the field and the value."""

    http_status = 400


class Conflict(ThreadlineError):
    """The state of things does not allow it: a gate already decided, a run already finished."""

    http_status = 409


KINDS: tuple[type[ThreadlineError], ...] = (NotFound, Refused, Invalid, Conflict)


@dataclass(frozen=True)
class Internal:
    """How every door answers a bug (an exception that is no ThreadlineError)."""

    exit_code: int = EXIT_BUG
    http_status: int = 500
    contract_exit: int = CONTRACT_INTERNAL
    envelope_type: str = "internal_error"
    message: str = "internal error: a bug in Threadline"


INTERNAL = Internal()


def report_bug(log: logging.Logger, err: BaseException, where: str) -> str:
    """Log a bug with its traceback (where: what was being done) and return the line a client
    gets: that it is ours, never the traceback itself."""
    log.error("%s failed\n%s", where, "".join(traceback.format_exception(err)).rstrip())
    return f"{INTERNAL.message}; its traceback is in the server's log"
