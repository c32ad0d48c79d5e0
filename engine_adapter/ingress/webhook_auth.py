"""Webhook signatures: HMAC-SHA256 over "<timestamp>.<body>", compared in constant time.

The timestamp is signed too, and one outside the tolerance window is refused: a captured request
cannot be replayed later, even under a new delivery id. Pure functions, no database.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

from engine_adapter.model.errors import Refused

TIMESTAMP_HEADER = "X-Threadline-Timestamp"
SIGNATURE_HEADER = "X-Threadline-Signature"
DELIVERY_HEADER = "X-Threadline-Delivery"
TOLERANCE_S = 300.0

_SIGNATURE = re.compile(r"sha256=([0-9a-f]{64})")
_TIMESTAMP = re.compile(r"\d{1,12}")  # Unix seconds


class SignatureError(Refused):
    """The signature is missing, malformed or wrong, or its timestamp is outside the window."""

    http_status = 401  # who sent it is not established


def _digest(secret: str, timestamp: str, body: bytes) -> str:
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """The X-Threadline-Signature value for body sent at timestamp (Unix seconds)."""
    return "sha256=" + _digest(secret, str(timestamp), body)


def signed_headers(secret: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """The two headers a sender adds: a timestamp and the signature over it and the body."""
    timestamp = str(int(time.time() if now is None else now))
    return {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: sign(secret, timestamp, body)}


def verify(
    secret: str,
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    *,
    now: float | None = None,
    tolerance: float = TOLERANCE_S,
) -> str:
    """Raise SignatureError unless signature signs timestamp and body with secret and timestamp
    is within tolerance seconds of now; returns the signature's hex digest."""
    if not signature:
        raise SignatureError(f"missing {SIGNATURE_HEADER} header")
    if not timestamp:
        raise SignatureError(f"missing {TIMESTAMP_HEADER} header")
    match = _SIGNATURE.fullmatch(signature.strip().lower())
    if match is None:
        raise SignatureError(f"{SIGNATURE_HEADER} must be sha256=<64 hex digits>")
    timestamp = timestamp.strip()
    if not _TIMESTAMP.fullmatch(timestamp):
        raise SignatureError(f"{TIMESTAMP_HEADER} must be Unix seconds, got {timestamp[:40]!r}")
    if not hmac.compare_digest(_digest(secret, timestamp, body), match.group(1)):
        raise SignatureError("signature does not match the timestamp and body")
    skew = (time.time() if now is None else now) - int(timestamp)
    if abs(skew) > tolerance:
        when = "old" if skew > 0 else "in the future"
        raise SignatureError(
            f"{TIMESTAMP_HEADER} is {abs(skew):.0f}s {when}; accepted within {tolerance:.0f}s"
        )
    return match.group(1)
