"""What the ingress accepts of a request before its body: targets, raw header lines, framing and
content types (pure functions)."""

from __future__ import annotations

import email.parser
import http.client

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_adapter.ingress.hook_requests import (
    MAX_TARGET,
    content_type_problem,
    framing_problem,
    header_problem,
    request_path,
)
from engine_adapter.model.errors import Invalid


def headers(*pairs: tuple[str, str]) -> http.client.HTTPMessage:
    text = "".join(f"{name}: {value}\r\n" for name, value in pairs) + "\r\n"
    return email.parser.Parser(_class=http.client.HTTPMessage).parsestr(text)


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("/hooks/greet", "/hooks/greet"),
        ("/hooks/greet?x=1&y=%zz", "/hooks/greet"),  # the query is not interpreted
        ("/hooks/gr%65et", "/hooks/greet"),
        ("/hooks/a.b/c-d_e", "/hooks/a.b/c-d_e"),
        ("/hooks/%C3%A9", "/hooks/\u00e9"),
    ],
)
def test_sound_targets(target, path):
    assert request_path(target) == path


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("/hooks/a\x00", "holds '\\x00'"),
        ("/hooks/a b", "holds ' '"),
        ("/hooks/\u00e9", "only visible ASCII"),
        ("/hooks/a%00", "control character '\\x00'"),
        ("/hooks/a%7f", "control character '\\x7f'"),
        ("/hooks/a%", "% that is not followed by two hex digits"),
        ("/hooks/a%g1", "% that is not followed by two hex digits"),
        ("/hooks/%c3", "not UTF-8"),
        ("/hooks/..", "'..' segment"),
        ("/hooks/./greet", "'.' or '..' segment"),
        ("/hooks/%2E%2E/x", "'..' segment"),
        ("/" + "a" * MAX_TARGET, f"the limit is {MAX_TARGET}"),
    ],
)
def test_bad_targets_name_the_problem(target, says):
    with pytest.raises(Invalid) as refused:
        request_path(target)
    assert says in str(refused.value)


@given(st.text(max_size=300))
def test_any_target_is_a_clean_path_or_a_value_error(target):
    try:
        path = request_path(target)
    except Invalid:
        return
    assert not any(ord(c) < 0x20 or c == "\x7f" for c in path)
    assert ".." not in path.split("/") and "." not in path.split("/")


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ([b"Host: x\r\n", b"\r\n"], None),
        ([b"Host:x\n", b"\n"], None),  # bare LF line endings are tolerated
        ([b"X-Note: a\tb\r\n", b"\r\n"], None),
        ([b"X-Note: a\r\n", b" b\r\n", b"\r\n"], "folded"),
        ([b"X-Note: a\r\n", b"\tb\r\n", b"\r\n"], "folded"),
        ([b"X-Note: a\rb\r\n", b"\r\n"], "control character"),
        ([b"X-Note: a\x00\r\n", b"\r\n"], "control character"),
        ([b"nocolon\r\n", b"\r\n"], "malformed header line 'nocolon'"),
        ([b"X-Note : a\r\n", b"\r\n"], "malformed header line"),
        ([b": a\r\n", b"\r\n"], "malformed header line"),
        ([b"X(Note): a\r\n", b"\r\n"], "malformed header line"),
    ],
)
def test_raw_header_lines(lines, says):
    problem = header_problem(lines)
    assert (problem is None) if says is None else (says in problem), problem


def test_framing():
    assert framing_problem(headers(("Content-Length", "5"))) is None
    assert framing_problem(headers(("Transfer-Encoding", "chunked"))) is None  # 411 elsewhere
    assert framing_problem(headers(("Content-Length", "5"), ("content-length", "5"))) == (
        "2 Content-Length headers: send exactly one"
    )
    assert framing_problem(headers(("Content-Length", "5"), ("Transfer-Encoding", "chunked"))) == (
        "both Content-Length and Transfer-Encoding: send only a Content-Length"
    )


@pytest.mark.parametrize(
    "value",
    [
        "application/json",
        "APPLICATION/JSON",
        "application/json;",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        'application/json; charset="utf-8"',
    ],
)
def test_json_content_types(value):
    assert content_type_problem(headers(("Content-Type", value))) is None


@pytest.mark.parametrize(
    "value",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin-1",
        "application/json; boundary=x",
        "application/jsonp",
        "json",
        "",
    ],
)
def test_other_content_types(value):
    assert "must be application/json" in content_type_problem(headers(("Content-Type", value)))


def test_no_or_two_content_types():
    assert content_type_problem(headers()) == (
        "send the body with one Content-Type: application/json header"
    )
    assert content_type_problem(
        headers(("Content-Type", "application/json"), ("Content-Type", "application/json"))
    ).endswith("(got 2)")
