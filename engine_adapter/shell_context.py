"""Where each {{placeholder}} of a run_command sits in bash's quoting.

A command never holds a value: each placeholder becomes a reference to an environment variable
(`"$TL_PAYLOAD_TARGET"` unquoted, `${TL_PAYLOAD_TARGET}` inside "…" or a heredoc), and bash never
parses the result of an expansion again, so no value can run as code. A reference does not
expand inside '…', $'…' or a quoted heredoc, and arithmetic evaluates a value as code: those
places are refused. The scanner follows bash's rules closely enough for that: quotes, backslash
escapes, $(…), backticks and ${…} (inside which quoting starts afresh or continues), comments,
heredocs (bodies end at the delimiter line, as bash reads them). Iterative: no nesting depth can
exhaust the stack.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

# Where a placeholder sits; REFUSED: where no reference can stand, and why.
BARE, DOUBLE, HEREDOC, COMMENT = "bare", "double", "heredoc", "comment"
SINGLE, ANSI, QUOTED_HEREDOC, ARITH, ESCAPED, DELIMITER = (
    "single",
    "ansi",
    "quoted_heredoc",
    "arith",
    "escaped",
    "delimiter",
)
REFUSED = {
    SINGLE: "is inside single quotes '…', where a variable does not expand: use double quotes",
    ANSI: "is inside $'…', where a variable does not expand: use double quotes",
    QUOTED_HEREDOC: "is in the body of a quoted heredoc (<<'EOF'), where a variable does not "
    "expand: leave the delimiter unquoted (<<EOF)",
    ARITH: "is inside arithmetic ($((…)), ((…)), an array subscript or ${var:offset}), which "
    "would evaluate its value as code",
    ESCAPED: "follows a backslash, which would quote its reference: remove the backslash",
    DELIMITER: "is a heredoc delimiter, which cannot come from a value",
}
_WORD_END = set(" \t\n;&|()<>")


@dataclass
class _Frame:
    kind: str  # code | bq (backticks) | dq | hd (heredoc body) | param (${…}) | arith
    closer: str = ""  # code: ")" for $(…), "" at the top; arith: "))" or "]"
    quoted: bool = False  # param: inside "…" (or a heredoc body)
    arith: bool = False  # evaluated as arithmetic: quotes and ${…} directly inside inherit it
    depth: int = 0  # open ( or { inside this frame
    cases: int = 0  # code: open `case … esac`, whose pattern's ")" closes nothing


@dataclass
class _Scan:
    text: str
    spans: dict[int, int]  # placeholder start -> end
    starts: list[int] = field(default_factory=list)  # the same starts, sorted
    found: dict[int, str] = field(default_factory=dict)  # placeholder start -> context
    heredocs: list[tuple[str, bool, bool]] = field(default_factory=list)  # (delim, quoted, dash)
    limits: list[tuple[int, int, int]] = field(default_factory=list)  # body (end, resume, frames)

    def mark(self, lo: int, hi: int, context: str) -> None:
        """Every placeholder starting in text[lo:hi] is in context."""
        first, last = bisect.bisect_left(self.starts, lo), bisect.bisect_left(self.starts, hi)
        for start in self.starts[first:last]:
            self.found[start] = context


def contexts(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """The context of each placeholder span (start, end) of text, in order."""
    scan = _Scan(text, dict(spans), sorted(start for start, _ in spans))
    _scan(scan, [_Frame("code")])
    return [scan.found.get(start, BARE) for start, _ in spans]


def _scan(scan: _Scan, stack: list[_Frame]) -> None:
    text, spans, end = scan.text, scan.spans, len(scan.text)
    i = 0
    while i < end and stack:
        if scan.limits and i >= scan.limits[-1][0]:  # a heredoc body ends: back to the command
            _, i, frames = scan.limits.pop()
            del stack[frames:]
            continue
        top = stack[-1]
        c = text[i]
        if i in spans:
            scan.found[i] = _context_of(stack)
            i = spans[i]
        elif c == "\\":
            if i + 1 in spans:
                scan.found[i + 1] = ESCAPED
                i = spans[i + 1]
            elif top.kind in ("dq", "hd") and text[i + 1 : i + 2] not in _ESCAPABLE[top.kind]:
                i += 1  # a literal backslash inside "…" or a heredoc body
            else:
                i += 2
        elif c == "$" and text.startswith("((", i + 1):
            stack.append(_Frame("arith", closer="))", arith=True))
            i += 3
        elif c == "$" and text.startswith("[", i + 1):
            stack.append(_Frame("arith", closer="]", arith=True))
            i += 2
        elif c == "$" and text.startswith("(", i + 1):
            stack.append(_Frame("code", closer=")"))
            i += 2
        elif c == "$" and text.startswith("{", i + 1):
            quoted = top.kind in ("dq", "hd") or (top.kind == "param" and top.quoted)
            i = _open_param(text, i + 2, stack, _Frame("param", quoted=quoted, arith=top.arith))
        elif c == "`":
            if top.kind == "bq":
                stack.pop()
            else:
                stack.append(_Frame("bq"))
            i += 1
        elif top.kind in ("dq", "hd"):
            if c == '"' and top.kind == "dq":
                stack.pop()
            i += 1
        else:
            i = _scan_unquoted(scan, i, stack)


def _scan_unquoted(scan: _Scan, i: int, stack: list[_Frame]) -> int:
    """One step in code, backticks, arithmetic or ${…}: where quotes open; returns the next i."""
    text, top, c = scan.text, stack[-1], scan.text[i]
    quotes_work = top.kind != "param" or not top.quoted
    if c == '"' or (c == "$" and text.startswith('"', i + 1)):
        stack.append(_Frame("dq", arith=top.arith))
        return i + (2 if c == "$" else 1)
    if c == "'" and quotes_work:
        return _skip_quoted(scan, i + 1, ARITH if top.arith else SINGLE, escapes=False)
    if c == "$" and text.startswith("'", i + 1) and quotes_work:
        return _skip_quoted(scan, i + 2, ARITH if top.arith else ANSI, escapes=True)
    if top.kind == "param":
        if c == "}" and top.depth == 0:
            stack.pop()
        else:
            top.depth += {"{": 1, "}": -1}.get(c, 0)
        return i + 1
    if top.kind == "arith":
        if top.depth == 0 and text.startswith(top.closer, i):
            stack.pop()
            return i + len(top.closer)
        opening, closing = ("[", "]") if top.closer == "]" else ("(", ")")
        top.depth = max(0, top.depth + {opening: 1, closing: -1}.get(c, 0))
        return i + 1
    # code or backticks, where quoting starts afresh
    word_start = i == 0 or text[i - 1] in _WORD_END
    if c == "#" and word_start:
        end = text.find("\n", i)
        end = len(text) if end < 0 else end
        scan.mark(i, end, COMMENT)
        return end
    if text.startswith("((", i) and word_start:
        stack.append(_Frame("arith", closer="))", arith=True))
        return i + 2
    if c == "[" and _name_before(text, i):  # name[subscript]: arithmetic
        stack.append(_Frame("arith", closer="]", arith=True))
        return i + 1
    if text.startswith("<<<", i):
        return i + 3
    if text.startswith("<<", i):
        return _read_delimiter(scan, i + 2)
    if c == "\n" and scan.heredocs:
        return _read_bodies(scan, i + 1, stack)
    if word_start and _keyword(text, i, "case"):
        top.cases += 1
    elif word_start and _keyword(text, i, "esac"):
        top.cases = max(0, top.cases - 1)
    if c == ")" and top.depth == 0 and top.closer == ")" and not top.cases:
        stack.pop()
    else:
        top.depth = max(0, top.depth + {"(": 1, ")": -1}.get(c, 0))
    return i + 1


_PARAM_NAME = re.compile(r"[#!]?(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])")


def _keyword(text: str, i: int, word: str) -> bool:
    end = i + len(word)
    return text.startswith(word, i) and (end == len(text) or text[end] in _WORD_END)


def _name_before(text: str, i: int) -> bool:
    """Whether a word of text ending at i is a variable name (as in `name[…]=`)."""
    j = i
    while j > 0 and (text[j - 1].isascii() and (text[j - 1].isalnum() or text[j - 1] == "_")):
        j -= 1
    return j < i and not text[j].isdigit() and (j == 0 or text[j - 1] in _WORD_END)


def _open_param(text: str, i: int, stack: list[_Frame], frame: _Frame) -> int:
    """After `${`: past the parameter's name. A subscript (`${a[…]}`) and an offset or length
    (`${v:…}`, unlike the operators :- := :? :+) are arithmetic."""
    stack.append(frame)
    name = _PARAM_NAME.match(text, i)
    if name is None:
        return i
    i = name.end()
    if text.startswith("[", i):
        stack.append(_Frame("arith", closer="]", arith=True))
        return i + 1
    if text.startswith(":", i) and text[i + 1 : i + 2] not in ("-", "=", "?", "+"):
        frame.arith = True
    return i


_ESCAPABLE = {"dq": ("$", "`", '"', "\\", "\n"), "hd": ("$", "`", "\\", "\n")}


def _context_of(stack: list[_Frame]) -> str:
    top = stack[-1]
    if top.arith:
        return ARITH
    if top.kind == "hd" or (top.kind == "param" and top.quoted and _in_heredoc(stack)):
        return HEREDOC
    if top.kind == "dq" or (top.kind == "param" and top.quoted):
        return DOUBLE
    return BARE


def _in_heredoc(stack: list[_Frame]) -> bool:
    for frame in reversed(stack):
        if frame.kind in ("hd", "dq"):
            return frame.kind == "hd"
    return False


def _skip_quoted(scan: _Scan, i: int, context: str, *, escapes: bool) -> int:
    """Past a '…' (or $'…', with escapes) whose text starts at i; placeholders in it get context."""
    text, end = scan.text, len(scan.text)
    while i < end:
        if i in scan.spans:
            scan.found[i] = context
            i = scan.spans[i]
        elif text[i] == "\\" and escapes:
            i += 2
        elif text[i] == "'":
            return i + 1
        else:
            i += 1
    return i


def _read_delimiter(scan: _Scan, i: int) -> int:
    """After `<<`: note the heredoc's delimiter word (quoted or not) for the next newline."""
    text, end = scan.text, len(scan.text)
    dash = text.startswith("-", i)
    i += dash
    while i < end and text[i] in " \t":
        i += 1
    word: list[str] = []
    quoted, quote = False, ""
    while i < end:
        c = text[i]
        if i in scan.spans:
            scan.found[i] = DELIMITER
            word.append("\0")  # matches no line: the body runs to the end
            i = scan.spans[i]
            continue
        if quote:
            if c == quote:
                quote = ""
            else:
                word.append(c)
        elif c in "'\"":
            quote, quoted = c, True
            if word and word[-1] == "$":  # $'…' and $"…" quote too
                word.pop()
        elif c == "\\" and i + 1 < end:
            quoted = True
            word.append(text[i + 1])
            i += 1
        elif c in _WORD_END:
            break
        else:
            word.append(c)
        i += 1
    if word:
        scan.heredocs.append(("".join(word), quoted, dash))
    return i


def _read_bodies(scan: _Scan, i: int, stack: list[_Frame]) -> int:
    """Heredoc bodies start after the newline ending their command, one after another; each ends
    at the line that is its delimiter (leading tabs stripped for <<-), as bash reads them. An
    unquoted body is scanned as a frame of its own that ends there; returns where to go on."""
    text, end = scan.text, len(scan.text)
    bodies = []
    for delim, quoted, dash in scan.heredocs:
        start, body_end = i, end
        while i < end:
            nl = text.find("\n", i)
            line_end = end if nl < 0 else nl
            line = text[i:line_end]
            at_delim = (line.lstrip("\t") if dash else line) == delim
            if at_delim:
                body_end = i
            i = line_end + 1 if nl >= 0 else end
            if at_delim:
                break
        bodies.append((start, body_end, quoted))
    scan.heredocs = []
    resume = i  # after the last body's delimiter line
    for start, body_end, quoted in reversed(bodies):  # the first body's frame ends up on top
        if quoted:
            scan.mark(start, body_end, QUOTED_HEREDOC)
            continue
        scan.limits.append((body_end, resume, len(stack)))
        stack.append(_Frame("hd"))
        resume = start
    return resume
