"""Webhook signatures: what verifies, and every way a request is refused."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from engine_adapter.ingress.webhook_auth import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    SignatureError,
    sign,
    signed_headers,
    verify,
)

SECRET = "s3cret"
BODY = b'{"pull_request": {"number": 42}}'
NOW = 1_700_000_000


def test_signature_is_hmac_sha256_over_timestamp_dot_body():
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, NOW, BODY) == f"sha256={expected}"
    headers = signed_headers(SECRET, BODY, now=NOW + 0.9)
    assert headers == {TIMESTAMP_HEADER: str(NOW), SIGNATURE_HEADER: f"sha256={expected}"}


def test_a_valid_signature_verifies_within_the_window():
    signature = sign(SECRET, NOW, BODY)
    assert verify(SECRET, str(NOW), signature, BODY, now=NOW) == signature.removeprefix("sha256=")
    assert verify(SECRET, str(NOW), signature.upper().replace("SHA256=", "sha256="), BODY, now=NOW)
    assert verify(SECRET, str(NOW), signature, BODY, now=NOW + 300)  # the edge is inside
    assert verify(SECRET, str(NOW), signature, BODY, now=NOW - 300)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"secret": "other"}, "signature does not match"),
        ({"body": BODY + b" "}, "signature does not match"),
        ({"timestamp": str(NOW + 1)}, "signature does not match"),  # the timestamp is signed
        ({"signature": None}, f"missing {SIGNATURE_HEADER}"),
        ({"signature": ""}, f"missing {SIGNATURE_HEADER}"),
        ({"timestamp": None}, f"missing {TIMESTAMP_HEADER}"),
        ({"signature": "sha1=abc"}, "must be sha256=<64 hex digits>"),
        ({"signature": sign(SECRET, NOW, BODY)[:-1]}, "must be sha256=<64 hex digits>"),
        ({"timestamp": "yesterday"}, "must be Unix seconds"),
        ({"timestamp": "-5"}, "must be Unix seconds"),
        ({"now": NOW + 301}, "is 301s old; accepted within 300s"),
        ({"now": NOW - 301}, "is 301s in the future"),
    ],
)
def test_refusals(change, message):
    args = {
        "secret": SECRET,
        "timestamp": str(NOW),
        "signature": sign(SECRET, NOW, BODY),
        "body": BODY,
        "now": NOW,
    }
    args.update(change)
    with pytest.raises(SignatureError, match=message.replace("(", r"\(").replace(")", r"\)")):
        verify(args["secret"], args["timestamp"], args["signature"], args["body"], now=args["now"])


def test_a_stale_request_re_signed_by_someone_without_the_secret_still_fails():
    # Moving the timestamp forward breaks the signature; keeping it keeps it stale.
    old = sign(SECRET, NOW, BODY)
    with pytest.raises(SignatureError, match="does not match"):
        verify(SECRET, str(NOW + 1000), old, BODY, now=NOW + 1000)
    with pytest.raises(SignatureError, match="old"):
        verify(SECRET, str(NOW), old, BODY, now=NOW + 1000)


def test_the_tolerance_is_configurable():
    signature = sign(SECRET, NOW, BODY)
    assert verify(SECRET, str(NOW), signature, BODY, now=NOW + 3000, tolerance=3600)
    with pytest.raises(SignatureError, match="accepted within 10s"):
        verify(SECRET, str(NOW), signature, BODY, now=NOW + 11, tolerance=10)
