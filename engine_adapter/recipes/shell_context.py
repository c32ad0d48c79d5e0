"""Where each {{placeholder}} of a run_command sits in bash's quoting, and in its commands.

A command never holds a value: each placeholder becomes a reference to an environment variable
(`"$TL_PAYLOAD_TARGET"` unquoted, `${TL_PAYLOAD_TARGET}` inside "…" or a heredoc), and bash does
not parse the result of an expansion as part of the command. A reference does not expand inside
'…', $'…' or a quoted heredoc, and arithmetic evaluates a value as code: those places are refused.
Some commands also take a word, once expanded, as a variable name or arithmetic (`[[ -v "$X" ]]`,
`printf -v`, `read`): the scanner hands each command's words to shell_commands.py, which refuses a
placeholder there. The scanner follows bash's rules closely enough for that: quotes, backslash
escapes, $(…), backticks, <(…) and ${…} (inside which quoting starts afresh or continues),
comments, heredocs (bodies end at the delimiter line, as bash reads them), words, redirections
and the separators between commands. Iterative: no nesting depth can exhaust the stack.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from engine_adapter.recipes.shell_commands import (
    BACKTICKS,
    IN_ARITH,
    PARAM_NAME,
    Analysis,
    Builder,
    special_variable,
)

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
    closer: str = ""  # code: ")" for $(…) and <(…), "" at the top; arith: "))" or "]"
    quoted: bool = False  # param: inside "…" (or a heredoc body)
    arith: bool = False  # evaluated as arithmetic: quotes and ${…} directly inside inherit it
    depth: int = 0  # open ( or { inside this frame
    builder: Builder | None = None  # code and bq: the words of its commands
    subscript: bool = False  # arith: a name's [subscript], part of the word
    name_end: int = -1  # param: where its variable's name ends (a placeholder there extends it)
    # Set as it is pushed (_push), from the frame under it, so that no placeholder walks the stack:
    owner: Builder | None = None  # whose current word text here is part of (None: nobody's)
    in_arith: bool = False  # some frame under it is arithmetic
    special: str = ""  # a ${NAME:=…} under it assigns to a variable bash evaluates
    quote: str = ""  # the nearest "…" (dq) or heredoc body (hd) at or under it
    in_bq: bool = False  # it is, or is inside, a `…`


@dataclass
class _Scan:
    text: str
    spans: dict[int, int]  # placeholder start -> end
    starts: list[int] = field(default_factory=list)  # the same starts, sorted
    found: dict[int, str] = field(default_factory=dict)  # placeholder start -> context
    heredocs: list[tuple[str, bool, bool]] = field(default_factory=list)  # (delim, quoted, dash)
    limits: list[tuple[int, int, int]] = field(default_factory=list)  # body (end, resume, frames)
    analysis: Analysis = field(default_factory=Analysis)

    def mark(self, lo: int, hi: int, context: str) -> None:
        """Every placeholder starting in text[lo:hi] is in context."""
        first, last = bisect.bisect_left(self.starts, lo), bisect.bisect_left(self.starts, hi)
        for start in self.starts[first:last]:
            self.found[start] = context


@dataclass(frozen=True)
class Placement:
    context: str  # BARE, DOUBLE, HEREDOC, COMMENT, or one of REFUSED
    refusal: str | None  # why no placeholder may stand there (after "{{payload.x}} "), else None


def placements(text: str, spans: list[tuple[int, int]]) -> list[Placement]:
    """Where each placeholder span (start, end) of text sits, and whether it may, in order."""
    scan = _Scan(text, dict(spans), sorted(start for start, _ in spans))
    stack: list[_Frame] = []
    _push(scan.analysis, stack, _Frame("code"))
    _scan(scan, stack)
    _close(stack, 0)
    refused = scan.analysis.finish(scan.starts)
    found = [scan.found.get(start, BARE) for start, _ in spans]
    return [
        Placement(context, REFUSED.get(context) or refused.get(start))
        for context, (start, _) in zip(found, spans, strict=True)
    ]


def contexts(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """The quoting context of each placeholder span (start, end) of text, in order."""
    return [placement.context for placement in placements(text, spans)]


def _close(stack: list[_Frame], keep: int) -> None:
    """Frames above the first `keep` end: their commands are complete."""
    for frame in reversed(stack[keep:]):
        if frame.builder is not None:
            frame.builder.close()
    del stack[keep:]


def _scan(scan: _Scan, stack: list[_Frame]) -> None:
    text, spans, end = scan.text, scan.spans, len(scan.text)
    i = 0
    while i < end and stack:
        if scan.limits and i >= scan.limits[-1][0]:  # a heredoc body ends: back to the command
            _, i, frames = scan.limits.pop()
            _close(stack, frames)
            continue
        top = stack[-1]
        c = text[i]
        if i in spans:
            scan.found[i] = _context_of(stack)
            _note_placeholder(scan.analysis, stack[-1], i)
            i = spans[i]
        elif c == "\\":
            words = _literal_words(stack)
            if text[i + 1 : i + 2] in ("$", "`") and top.in_bq:
                # Inside `…` bash removes this backslash and parses what follows again (a $(…)
                # or a `…` nested in it): not followed here, so no placeholder may be in it.
                scan.analysis.unread = BACKTICKS
            if i + 1 in spans:
                scan.found[i + 1] = ESCAPED
                i = spans[i + 1]
            elif top.kind in ("dq", "hd") and text[i + 1 : i + 2] not in _ESCAPABLE[top.kind]:
                if words:
                    words.char("\\", quoted=True)
                i += 1  # a literal backslash inside "…" or a heredoc body
            else:
                if words and text[i + 1 : i + 2] not in ("", "\n"):  # \<newline> is no character
                    words.char(text[i + 1], quoted=True)
                i += 2
        elif c == "$" and text.startswith("((", i + 1):
            _expansion(scan, stack, _Frame("arith", closer="))", arith=True))
            i += 3
        elif c == "$" and text.startswith("[", i + 1):
            _expansion(scan, stack, _Frame("arith", closer="]", arith=True))
            i += 2
        elif c == "$" and text.startswith("(", i + 1):
            _expansion(scan, stack, _Frame("code", closer=")"))
            i += 2
        elif c == "$" and text.startswith("{", i + 1):
            quoted = top.kind in ("dq", "hd") or (top.kind == "param" and top.quoted)
            frame = _Frame("param", quoted=quoted, arith=top.arith)
            i = _open_param(scan, i + 2, stack, frame)
        elif c == "$" and top.kind != "arith" and (name := _SIMPLE_PARAM.match(text, i + 1)):
            if top.owner is not None:
                top.owner.expansion(split=top.builder is not None)
            i = name.end()
        elif c == "`":
            if top.kind == "bq":
                _close(stack, len(stack) - 1)
            else:
                _expansion(scan, stack, _Frame("bq"))
            i += 1
        elif top.kind in ("dq", "hd"):
            if c == '"' and top.kind == "dq":
                stack.pop()
            elif words := _literal_words(stack):
                words.char(c, quoted=True)
            i += 1
        else:
            i = _scan_unquoted(scan, i, stack)


def _literal_words(stack: list[_Frame]) -> Builder | None:
    """The builder whose current word the next character is literally part of: the code or
    backticks on top, or the one just under the "…" on top."""
    top = stack[-1]
    if top.builder is not None:
        return top.builder
    if top.kind == "dq" and len(stack) > 1 and stack[-2].builder is not None:
        return stack[-2].builder
    return None


def _push(analysis: Analysis, stack: list[_Frame], frame: _Frame) -> None:
    """A frame opens: what it inherits from the one under it. A $(…), `…` or <(…) gets a builder
    of its own, whose output is part of the current word of the builder it opens in."""
    under = stack[-1] if stack else _Frame("code")
    frame.in_arith = under.in_arith or under.arith
    frame.special = under.special
    frame.quote = frame.kind if frame.kind in ("dq", "hd") else under.quote
    frame.in_bq = under.in_bq or frame.kind == "bq"
    if frame.kind in ("code", "bq"):
        frame.builder = Builder(analysis, in_arith=frame.in_arith)
        if under.owner is not None:
            under.owner.child(frame.builder)
        frame.owner = frame.builder
    elif frame.kind not in ("hd", "arith") and not frame.arith:
        frame.owner = under.owner
    stack.append(frame)


def _expansion(scan: _Scan, stack: list[_Frame], frame: _Frame) -> None:
    """An expansion opens: its word is no longer literal, and may split into several words
    (or none) where it is unquoted."""
    top = stack[-1]
    if top.owner is not None:
        top.owner.expansion(split=top.builder is not None and frame.kind != "arith")
    _push(scan.analysis, stack, frame)


def _note_placeholder(analysis: Analysis, top: _Frame, start: int) -> None:
    """The placeholder is part of the current word of the builder whose text it is in; a heredoc
    body is nobody's word, and arithmetic is refused by its context."""
    if top.kind == "param" and top.name_end == start:
        analysis.refuse([start], PARAM_NAME)
    if top.special:
        analysis.assigned.append((top.special, [start], []))
    if top.owner is None:
        return
    if top.owner.in_arith:
        analysis.refuse([start], IN_ARITH)
    top.owner.hole(start)


def _scan_unquoted(scan: _Scan, i: int, stack: list[_Frame]) -> int:
    """One step in code, backticks, arithmetic or ${…}: where quotes open; returns the next i."""
    text, top, c = scan.text, stack[-1], scan.text[i]
    quotes_work = top.kind != "param" or not top.quoted
    words = top.builder
    if c == '"' or (c == "$" and text.startswith('"', i + 1)):
        if words:
            words.quote()
        _push(scan.analysis, stack, _Frame("dq", arith=top.arith))
        return i + (2 if c == "$" else 1)
    if c == "'" and quotes_work:
        if words:
            words.quote()
        return _skip_quoted(scan, i + 1, ARITH if top.arith else SINGLE, escapes=False, words=words)
    if c == "$" and text.startswith("'", i + 1) and quotes_work:
        if words:
            words.expansion(split=False)
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
            if top.subscript and stack[-1].builder:
                stack[-1].builder.char("]")
            return i + len(top.closer)
        opening, closing = ("[", "]") if top.closer == "]" else ("(", ")")
        top.depth = max(0, top.depth + {opening: 1, closing: -1}.get(c, 0))
        return i + 1
    assert words is not None  # code or backticks, where quoting starts afresh
    return _scan_code(scan, i, stack, words)


_REDIRECTIONS = ("&>>", "&>", ">>", ">|", ">&", "<&", "<>", ">", "<")
_SEPARATORS = (";;&", ";;", ";&", ";", "&&", "&", "||", "|&", "|", "\n")


def _scan_code(scan: _Scan, i: int, stack: list[_Frame], words: Builder) -> int:
    """One step in code or backticks outside quotes: words, redirections, separators."""
    text, top, c = scan.text, stack[-1], scan.text[i]
    word_start = words.word is None
    if c == "#" and word_start:
        end = text.find("\n", i)
        end = len(text) if end < 0 else end
        scan.mark(i, end, COMMENT)
        return end
    if text.startswith("((", i) and word_start:
        _expansion(scan, stack, _Frame("arith", closer="))", arith=True))
        return i + 2
    if c == "[" and (_name_before(text, i) or (i and words.element_start(text[i - 1]))):
        words.char("[")  # name[subscript] (or [subscript]= in name=(…)): arithmetic
        _expansion(scan, stack, _Frame("arith", closer="]", arith=True, subscript=True))
        return i + 1
    if text.startswith("<<<", i):
        words.redirection("<<<")
        return i + 3
    if text.startswith("<<", i):
        words.heredoc()
        return _read_delimiter(scan, i + 2)
    if c in "<>" and text.startswith("(", i + 1):  # <(…) and >(…) run a command of their own
        _expansion(scan, stack, _Frame("code", closer=")"))
        return i + 2
    if c in "<>&":
        op = next((op for op in _REDIRECTIONS if text.startswith(op, i)), "")
        if op:
            words.redirection(op)
            return i + len(op)
    if c in ";&|\n":
        op = next(op for op in _SEPARATORS if text.startswith(op, i))
        words.separator(op)
        if c == "\n" and scan.heredocs:
            return _read_bodies(scan, i + 1, stack)
        return i + len(op)
    if c in " \t":
        words.blank(text, i + 1)
        return i + 1
    if c == "(":
        words.open_paren(text, i + 1)
        top.depth += 1
        return i + 1
    if c == ")":
        words.end_word()
        if top.depth == 0 and top.closer == ")" and not words.cases:
            _close(stack, len(stack) - 1)  # the end of $(…) or <(…)
        else:
            words.close_paren()
            top.depth = max(0, top.depth - 1)
        return i + 1
    words.char(c)
    return i + 1


_PARAM_NAME = re.compile(r"[#!]?(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])")
_SIMPLE_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")  # $name, $1, $@ …


def _name_before(text: str, i: int) -> bool:
    """Whether a word of text ending at i is a variable name (as in `name[…]=`)."""
    j = i
    while j > 0 and (text[j - 1].isascii() and (text[j - 1].isalnum() or text[j - 1] == "_")):
        j -= 1
    return j < i and not text[j].isdigit() and (j == 0 or text[j - 1] in _WORD_END)


def _open_param(scan: _Scan, i: int, stack: list[_Frame], frame: _Frame) -> int:
    """After `${`: past the parameter's name. A subscript (`${a[…]}`) and an offset or length
    (`${v:…}`, unlike the operators :- := :? :+) are arithmetic."""
    text = scan.text
    _expansion(scan, stack, frame)
    name = _PARAM_NAME.match(text, i)
    frame.name_end = i = i if name is None else name.end()
    if name is None:
        return i
    if text.startswith("[", i):
        _push(scan.analysis, stack, _Frame("arith", closer="]", arith=True))
        return i + 1
    if text.startswith(":", i) and text[i + 1 : i + 2] not in ("-", "=", "?", "+"):
        frame.arith, frame.owner = True, None
    if text.startswith(("=", ":="), i) and special_variable(name.group()):
        frame.special = name.group()  # ${NAME:=…} assigns what follows to NAME
    return i


_ESCAPABLE = {"dq": ("$", "`", '"', "\\", "\n"), "hd": ("$", "`", "\\", "\n")}


def _context_of(stack: list[_Frame]) -> str:
    top = stack[-1]
    if top.arith:
        return ARITH
    if top.kind == "hd" or (top.kind == "param" and top.quoted and top.quote == "hd"):
        return HEREDOC
    if top.kind == "dq" or (top.kind == "param" and top.quoted):
        return DOUBLE
    return BARE


def _skip_quoted(
    scan: _Scan, i: int, context: str, *, escapes: bool, words: Builder | None = None
) -> int:
    """Past a '…' (or $'…', with escapes) whose text starts at i; placeholders in it get context;
    words: the builder whose current word its characters are part of."""
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
            if words:
                words.char(text[i], quoted=True)
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
        _push(scan.analysis, stack, _Frame("hd"))
        resume = start
    return resume
