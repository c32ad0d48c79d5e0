"""Resume tokens: one open gate decided once, with no other credential, by whoever holds it.

A token is random (256 bits), handed out once by the door that issues it and stored only as its
sha256. It is bound to its run and gate key (a new try of a gate has a new key, so an old token
cannot decide it), decides as the subject it was issued for (the gate's approver rules apply to
that subject), is single use and expires. Every use, refused ones included, is audited.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from engine_adapter.model.domain import PERSON_DECISIONS
from engine_adapter.model.errors import CONTRACT_MISMATCH, Invalid, Refused
from engine_adapter.model.identity import Actor
from engine_adapter.runs import gates
from engine_adapter.store import db

PREFIX = "tl_rt_"
DEFAULT_TTL_S = 24 * 3600
_AT = "%Y-%m-%d %H:%M:%S %Z"


class TokenRefused(Refused):
    """A token that decides nothing (unknown, used, expired, another run's, the gate closed);
    nothing was written but the audit row."""

    contract_exit = CONTRACT_MISMATCH
    envelope_type = "resume_refused"


@dataclass(frozen=True)
class Issued:
    token: str  # shown once; only its hash is kept
    expires_at: datetime


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue(
    conn: psycopg.Connection[Any],
    run_id: str,
    gate_key: str,
    subject: str,
    via: str,
    ttl_s: float = DEFAULT_TTL_S,
) -> Issued:
    """A new token for the gate the run waits at (gate_key)."""
    token = PREFIX + secrets.token_urlsafe(32)
    with conn.transaction():
        row = db.fetch_row(
            conn,
            "insert_resume_token",
            dict(
                token_hash=token_hash(token),
                run_id=run_id,
                gate_key=gate_key,
                subject=subject,
                via=via,
                ttl_s=ttl_s,
            ),
        )
    return Issued(token, row["expires_at"])


@dataclass(frozen=True)
class Redeemed:
    run_id: str
    gate_key: str
    actor: Actor


def redeem(
    conn: psycopg.Connection[Any],
    token: str,
    decision: str,
    via: str,
    reason: str | None = None,
    run_id: str | None = None,
) -> Redeemed:
    """Decide the token's gate as its subject, and use the token up, in one transaction; a
    refusal (TokenRefused, DecisionRefused) writes only its audit row. `run_id`: the run the
    caller means; a token of another run is refused."""
    if decision not in PERSON_DECISIONS:
        raise Invalid(f"decision must be approve or deny, not {decision!r}")
    found: dict[str, Any] | None = None
    try:
        with conn.transaction():
            # The database hashes, locks and checks the token and marks it used by this
            # transaction: only then may the ingress decide that token's gate, as its subject.
            row = db.fetch_one(conn, "use_resume_token", dict(token=token, run_id=run_id))
            assert row is not None
            found = row if row["run_id"] is not None else None
            _check(row, run_id)
            actor = Actor(row["subject"], via)
            gates.decide(
                conn, str(row["run_id"]), decision, actor, reason, gate_key=row["gate_key"]
            )
        return Redeemed(str(row["run_id"]), row["gate_key"], actor)
    except (TokenRefused, gates.DecisionRefused) as err:
        with conn.transaction():  # the refusal's own: the attempt's rolled back
            where = found or {"run_id": run_id}
            subject = Actor(found["subject"], via) if found else None
            gates.audit(
                conn, where["run_id"], where.get("gate_key"), subject, decision, reason, err, via
            )
        raise


def _check(row: dict[str, Any], run_id: str | None) -> None:
    """Why threadline.use_resume_token refused the token, in words."""
    refusal = row["refusal"]
    if refusal == "unknown":
        raise TokenRefused("the resume token is not valid")
    if refusal == "other run":
        raise TokenRefused(f"the resume token is not one of run {run_id}")
    if refusal == "used":
        raise TokenRefused(f"the resume token was used already, at {row['used_at']:{_AT}}")
    if refusal == "expired":
        raise TokenRefused(f"the resume token expired at {row['expires_at']:{_AT}}")
    if refusal == "account removed":
        raise TokenRefused(
            f"the resume token was issued to account {row['subject']}, which was removed since"
        )
    if refusal is not None:
        raise TokenRefused(f"the resume token is refused: {refusal}")
