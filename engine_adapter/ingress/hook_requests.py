"""What the webhook ingress accepts of a request before it reads the body: the target, the raw
header lines, the framing and the content type.

Pure functions over what arrived; each returns None or a sentence naming the problem (Invalid
for the target). Strict on purpose: a request two HTTP parsers could read differently (two
Content-Lengths, a length beside a Transfer-Encoding, a folded header) is refused, so a proxy in
front and this ingress can never disagree about where one request ends.
"""

from __future__ import annotations

import ipaddress
import re
from email.message import Message
from urllib.parse import unquote_to_bytes

from engine_adapter.model.errors import Invalid

MAX_TARGET = 2048  # characters of path and query; a webhook path is at most 200

_VISIBLE = re.compile(r"[\x21-\x7e]*")  # a request target is visible ASCII, nothing else
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a header name (RFC 9110 token)
_VALUE = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")  # no control characters but tab
_MEDIA = re.compile(r"\s*application/json\s*", re.IGNORECASE)
_CHARSET = re.compile(r'\s*charset\s*=\s*(?:utf-8|"utf-8")\s*', re.IGNORECASE)


def request_path(target: str) -> str:
    """The percent-decoded path of a request target (its query is ignored); Invalid naming
    what makes it unacceptable."""
    if len(target) > MAX_TARGET:
        raise Invalid(f"the request target is {len(target)} characters; the limit is {MAX_TARGET}")
    if not _VISIBLE.fullmatch(target):
        bad = next(c for c in target if not _VISIBLE.fullmatch(c))
        raise Invalid(
            f"the request target holds {bad!r}: only visible ASCII is accepted "
            f"(percent-encode anything else)"
        )
    path = target.split("?", 1)[0]
    if _BAD_ESCAPE.search(path):
        raise Invalid("the request path has a % that is not followed by two hex digits")
    try:
        decoded = unquote_to_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("the request path, percent-decoded, is not UTF-8") from None
    control = _CONTROL.search(decoded)
    if control:
        raise Invalid(
            f"the request path, percent-decoded, holds the control character {control.group()!r}"
        )
    if any(segment in (".", "..") for segment in decoded.split("/")):
        raise Invalid("the request path has a '.' or '..' segment")
    return decoded


def header_problem(lines: list[bytes]) -> str | None:
    """The raw header lines as they arrived (each with its line ending, the blank line last):
    each must be `name: value` on a line of its own."""
    for line in lines:
        content = line.rstrip(b"\n")
        content = content[:-1] if content.endswith(b"\r") else content
        if not content:
            continue  # the blank line that ends the headers
        if content[:1] in (b" ", b"\t"):
            return "a header is folded over several lines (obs-fold): send each on one line"
        name, colon, value = content.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            return f"malformed header line {_show(content)}: expected name: value"
        if not _VALUE.fullmatch(value):
            return f"header {_show(name)} holds a control character"
    return None


def framing_problem(headers: Message) -> str | None:
    """A body whose length two parsers could read differently."""
    lengths = headers.get_all("Content-Length") or []
    if len(lengths) > 1:
        return f"{len(lengths)} Content-Length headers: send exactly one"
    if lengths and headers.get_all("Transfer-Encoding"):
        return "both Content-Length and Transfer-Encoding: send only a Content-Length"
    return None


def content_type_problem(headers: Message) -> str | None:
    """Only JSON is accepted; this also turns away a browser's cross-site "simple" POST
    (text/plain, a form, or no type at all), which cannot carry application/json."""
    values = headers.get_all("Content-Type") or []
    if len(values) != 1:
        return "send the body with one Content-Type: application/json header" + (
            f" (got {len(values)})" if values else ""
        )
    media, *params = values[0].split(";")
    if _MEDIA.fullmatch(media) and all(not p.strip() or _CHARSET.fullmatch(p) for p in params):
        return None
    return f"Content-Type must be application/json (charset utf-8), got {values[0][:60]!r}"


def _show(raw: bytes) -> str:
    return repr(raw[:60].decode("latin-1"))


def ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address host spells out, or None for a name (which only DNS can answer)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:  # ipaddress's way of saying "not an address"
        return None
