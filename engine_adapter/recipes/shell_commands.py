"""Which command each {{placeholder}} of a run_command is a word of, and whether bash would take
its value there as a variable name, arithmetic or code.

A placeholder becomes a quoted variable reference (shell_context.py), so bash never parses its
value as part of the command. But some builtins and keywords take a *name* or an arithmetic
expression from a word after it is expanded, quotes or not, and evaluate it: `[[ -v "$X" ]]`,
`printf -v "$X"`, `read "$X"` with X = `a[$(id)]` run `id` while they evaluate the subscript.
shell_context.py hands each command's words here as it reads them (one `Builder` per top level,
$(…), `…` and <(…)); `Analysis.finish` then says, per placeholder, why it cannot stand where it
is. The rule is an allowlist: a placeholder may be an argument of a program bash runs (a literal
name that is no builtin or function), of a builtin known to take values only (echo, cd, exit, …),
an operand of `[[ … ]]` or `test` whose operators are literal and do not take names or
arithmetic, a variable's value, a case subject or pattern, a loop's list or a file to redirect.
Anything else is refused, naming the construct. What a command does with a value after it (copies
it into a variable, a function's arguments, a file, a pipe) is not followed:
see docs/recipes.md, "Placeholders and payload schemas".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DYN, HOLE = "\0", "\1"  # in a word's shape: an expansion, a placeholder

# Bash's builtins (`compgen -b` of bash 5.2) and the reserved words it reads at a command's start.
BUILTINS = frozenset(
    """. : [ alias bg bind break builtin caller cd command compgen complete compopt continue
    declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history
    jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return set
    shift shopt source suspend test times trap true type typeset ulimit umask unalias unset
    wait""".split()
)
KEYWORDS = frozenset(
    """if then else elif fi case esac for select while until do done in function time coproc
    { } ! [[ ]]""".split()
)
# Builtins that use a value only as a value (a path, a number bash parses without arithmetic,
# text to print, a name to look up): checked by running each with hostile values.
_VALUE_BUILTINS = frozenset(
    """: true false echo cd pwd pushd popd dirs exit return break continue shift kill umask type
    help times""".split()
)
_DECLARING = frozenset("declare typeset local export readonly".split())
_WRAPPERS = ("command", "builtin", "exec")  # run the command their first operand names
_ATTRIBUTES = frozenset("declare typeset local".split())  # those that take -i and -n
_SHELLS = frozenset("bash sh dash ash zsh ksh mksh rbash".split())
_TEST_UNARY = frozenset(
    "-a -b -c -d -e -f -g -h -k -p -r -s -t -u -w -x -G -L -N -O -S -z -n -o".split()
)
_NAME_OPS = frozenset(("-v", "-R"))  # their operand is a variable name
_ARITH_OPS = frozenset("-eq -ne -lt -le -gt -ge".split())
_TEST_BINARY = frozenset(("=", "==", "!=", "<", ">", "-nt", "-ot", "-ef", "-a", "-o", *_ARITH_OPS))
_SIMPLE_KEYWORDS = frozenset("if then else elif fi do done while until ! { } ]] esac".split())
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[[^=]*\])?\+?=")

# Why a placeholder cannot stand where it is. Each reads after "{{payload.x}} ".
NAME_OF_COMMAND = "is part of the command's name `{cmd}`: a value would choose what runs"
ARGS_OF_DYNAMIC = (
    "is an argument of `{cmd}`, whose name is not a literal word, so what it does with the value "
    "cannot be checked"
)
ARGS_OF_FUNCTION = (
    "is an argument of `{cmd}`, a function defined in this command, whose use of its arguments is "
    "not checked: use the value in the command itself"
)
TAKES_NAMES = (
    "is an argument of `{cmd}`, which takes variable names (bash evaluates a name's subscript as "
    "arithmetic, running any $(…) in it)"
)
DECLARES = (
    "is an argument of `{cmd}`, which takes variable names and evaluates a value such as (…) as an "
    "array's elements: assign first (x={{…}}), then `{cmd} x`"
)
BUILTIN = (
    "is an argument of the bash builtin `{cmd}`, which may run it as a name, arithmetic or code"
)
RUNS_CODE = "is an argument of `{cmd}`, which runs it as code"
ARITHMETIC = "is an argument of `{cmd}`, which evaluates it as arithmetic"
PRINTF_NAME = (
    "is the variable name of `printf -v`, which bash evaluates (a subscript runs as arithmetic)"
)
OPTION = (
    "could be read as an option of `{cmd}`{example}: put `--` (or, for printf, a literal format) "
    "before it"
)
TEST_NAME = (
    "is the operand of `{op}` in `{cmd}`, a variable name bash evaluates (a subscript runs as "
    "arithmetic)"
)
TEST_ARITH = (
    "is an operand of `{op}` in [[ … ]], which evaluates it as arithmetic: compare with "
    "`[ … {op} … ]` (numbers only) or `==`"
)
TEST_ROLES = (
    "is in a `{cmd}` whose operators are not all literal: bash decides each word's role from the "
    "values, and a value `-v` would make the next one a variable name it evaluates; use [[ … ]], "
    "or one literal operator between two values"
)
DUPLICATE = (
    "is the target of `{op}`, which bash expands a second time when it is not a number, running "
    "any $(…) in it: use `>` or `&>`"
)
SHELL_SCRIPT = "is the script or an option of `{cmd}`, which runs it as code"
LOOP_NAME = "is a loop's variable name"
FUNCTION_NAME = "is a function's name"
PARAM_NAME = "names the variable of a ${…}, which bash evaluates as a name"
IN_ARITH = "is in a $(…) whose output bash evaluates as arithmetic ($((…)), ((…)) or a subscript)"
GRAMMAR = "is in a part of the command whose bash grammar the check does not follow"
BACKTICKS = (
    "is in a command with \\$ or \\` inside `…`, which bash parses again as a $(…) or `…` of its "
    "own: use $(…) instead of backticks"
)
DECLARES_EVALUATING = (
    "is in a command that may declare integer or nameref variables (`{cmd}`), which evaluate "
    "any value assigned to them"
)
ALIASES = "is in a command that turns alias expansion on, which can make any word a command"
ENABLES = "is in a command that uses `enable`, which can change what a command's name runs"
NESTED = "is in a $(…) whose output "  # + a reason without its "is "
_SPECIAL = {
    **dict.fromkeys(
        ("HISTCMD", "OPTIND", "RANDOM", "SRANDOM"), "whose value bash evaluates as arithmetic"
    ),
    **dict.fromkeys(
        ("PS0", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND"),
        "which bash expands as a prompt, running any $(…) in it",
    ),
    **dict.fromkeys(("ENV", "SHELLOPTS"), "which bash reads options or a file to run from"),
    "PATH": "which chooses the program each command runs",
}


def special_variable(name: str) -> str | None:
    """Why a value may not be assigned to name (bash or the dynamic loader runs it), else None."""
    if name.startswith("BASH"):
        return "one of bash's own variables, from which it reads code, options and names"
    if name.startswith("LD_"):
        return "which the dynamic loader loads code from"
    return _SPECIAL.get(name)


@dataclass
class Word:
    """One word of a command as far as it is known: literal characters, DYN where an expansion
    goes, HOLE where a placeholder does."""

    shape: list[str] = field(default_factory=list)
    quoted_at: list[bool] = field(default_factory=list)
    holes: list[tuple[int, int]] = field(default_factory=list)  # (placeholder start, shape index)
    children: list[Builder] = field(default_factory=list)  # its $(…), `…` and <(…)
    split: bool = False  # may expand to other than exactly one word (unquoted $x, a glob)
    unquoted: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, text: str) -> Word:
        return cls(list(text), [False] * len(text))

    @property
    def text(self) -> str:
        return "".join(self.shape)

    @property
    def literal(self) -> bool:
        return DYN not in self.shape and HOLE not in self.shape and not self.split

    @property
    def quoted(self) -> bool:
        return any(self.quoted_at)

    def has_holes(self) -> bool:
        """Whether a placeholder is in it, or in a command whose output it holds."""
        return bool(self.holes) or any(child.has_holes for child in self.children)

    def add(self, piece: str, quoted: bool) -> None:
        self.shape.append(piece)
        self.quoted_at.append(quoted)

    def finish(self) -> None:
        self.split = self.split or _globs("".join(self.unquoted))

    def shown(self) -> str:
        """The word for a message: … for an expansion, {{…}} for a placeholder, cut short."""
        text = self.text.replace(DYN, "…").replace(HOLE, "{{…}}")
        return text if len(text) <= 60 else text[:59] + "…"

    def assignment(self) -> str | None:
        """The name the word assigns (`x=…`, `a[…]=…`, `x+=…`), if it is an assignment."""
        m = _ASSIGNMENT.match(self.text)
        if m is None or any(self.quoted_at[: len(m.group(1))]):
            return None
        return m.group(1)


def _globs(unquoted: str) -> bool:
    """Whether unquoted characters of a word may expand it to other words: a glob (*, ?, […])
    or a brace expansion ({a,b}, {1..3}). Linear: no regular expression backtracks here."""
    if "*" in unquoted or "?" in unquoted:
        return True
    bracket = unquoted.find("[")
    if bracket >= 0 and "]" in unquoted[bracket + 1 :]:
        return True
    brace = unquoted.find("{")
    if brace < 0:
        return False
    close = unquoted.rfind("}")
    inside = unquoted[brace + 1 : close]
    return close > brace and ("," in inside or ".." in inside)


@dataclass
class Command:
    words: list[Word]  # assignments, the command's name, its arguments (no redirections)
    garbled: bool = False


@dataclass
class Analysis:
    """What the builders found in one command text; `finish` decides."""

    refused: dict[int, str] = field(default_factory=dict)  # placeholder start -> why
    commands: list[Command] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)
    # (name, placeholders, words whose placeholders all go into it): a value assigned to name
    assigned: list[tuple[str, list[int], list[Word]]] = field(default_factory=list)
    everywhere: list[str] = field(default_factory=list)  # refuses every placeholder of the text
    unread: str = ""  # a part the scanner cannot follow: every placeholder is refused for it

    def refuse(self, starts: list[int], reason: str) -> None:
        for start in starts:
            self.refused.setdefault(start, reason)

    def refuse_word(self, word: Word, reason: str) -> None:
        """Every placeholder of the word, and of the commands whose output it holds."""
        self.refuse([s for s, _ in word.holes], reason)
        nested = NESTED + reason.removeprefix("is ")
        todo = [child for child in word.children if not child.swept]
        while todo:  # each builder is swept once: a text's refusals take linear time
            builder = todo.pop()
            builder.swept = True
            self.refuse(builder.holes, nested)
            todo += [child for child in builder.children if not child.swept]

    def refuse_words(self, words: list[Word], reason: str) -> None:
        for word in words:
            self.refuse_word(word, reason)

    def finish(self, starts: list[int]) -> dict[int, str]:
        if self.unread:
            self.refuse(starts, self.unread)
        for command in self.commands:
            _Check(self).command(command)
        for name, holes, words in self.assigned:
            why = special_variable(name)
            if why:
                self.refuse(holes, f"is assigned to {name}, {why}")
                self.refuse_words(words, f"is assigned to {name}, {why}")
        if self.everywhere:
            self.refuse(starts, self.everywhere[0])
        return self.refused


class _Check:
    """One simple command against the rules: its assignments, then its name and arguments."""

    def __init__(self, analysis: Analysis) -> None:
        self.a = analysis

    def command(self, command: Command) -> None:
        words = command.words
        if command.garbled:
            self.a.refuse_words(words, GRAMMAR)
            return
        i = 0
        while i < len(words) and (assigned := words[i].assignment()) is not None:
            self.a.assigned.append((assigned, [], [words[i]]))
            i += 1
        if i < len(words):
            self.run(words, i)

    def run(self, words: list[Word], i: int) -> None:
        """words[i] names the command, the words after it are its arguments; `command`,
        `builtin` and `exec` run the command their first operand names (a placeholder where an
        option could be is that command's name, refused as one)."""
        functions, external = True, False
        while True:
            name, shown, after = words[i], words[i].shown(), i + 1
            if name.has_holes():
                self.a.refuse_word(name, NAME_OF_COMMAND.format(cmd=shown))
                return self.a.refuse_words(words[after:], NAME_OF_COMMAND.format(cmd=shown))
            if not name.literal:
                # A path (a "/" always there) is a file bash runs: never a builtin or function.
                if not name.split and "/" in name.text:
                    return self.program(name.text, words[after:])
                return self.a.refuse_words(words[after:], ARGS_OF_DYNAMIC.format(cmd=shown))
            cmd = name.text
            if not external and functions and cmd in self.a.functions:
                return self.a.refuse_words(words[after:], ARGS_OF_FUNCTION.format(cmd=cmd))
            if external or cmd not in BUILTINS:
                return self.program(cmd, words[after:])
            if cmd not in _WRAPPERS:
                return self.builtin(cmd, words[after:])
            j = after
            while j < len(words) and words[j].literal and words[j].text[:1] == "-":
                text = words[j].text
                j += 1
                if text in ("-", "--"):
                    break
                if cmd == "command" and re.search("[vV]", text):
                    return  # command -v/-V only looks the names up
                if cmd == "exec" and text == "-a":
                    j += 1  # the name the program is given: a value
            if j >= len(words):
                return
            i, functions, external = j, False, cmd == "exec"

    def program(self, cmd: str, args: list[Word]) -> None:
        """A program bash starts: its arguments are values, unless it is a shell's script."""
        if cmd.rsplit("/", 1)[-1] not in _SHELLS:
            return
        j = 0
        while j < len(args):
            word = args[j]
            if not word.literal:
                return self.a.refuse_words(args[j:], SHELL_SCRIPT.format(cmd=cmd))
            text = word.text
            if text in ("-", "--"):
                j += 1
                break
            if not text.startswith(("-", "+")):
                break
            j += 2 if text in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file") else 1
        if j < len(args):
            self.a.refuse_word(args[j], SHELL_SCRIPT.format(cmd=cmd))

    def builtin(self, cmd: str, args: list[Word]) -> None:
        if cmd in _VALUE_BUILTINS:
            return
        if cmd == "printf":
            return self.printf(args)
        if cmd in ("test", "["):
            return self.test(cmd, args)
        if cmd == "set":
            self.options(cmd, args, takes_value=("-o", "+o"), example=" (as -x)")
            return
        if cmd in _DECLARING:
            for word in args:
                text = word.text
                maybe_option = not word.literal and not word.has_holes() and not word.assignment()
                flags = word.literal and text[:1] in "-+" and ("i" in text or "n" in text)
                if cmd in _ATTRIBUTES and (maybe_option or flags):
                    shown = f"{cmd} {word.shown()}"
                    self.a.everywhere.append(DECLARES_EVALUATING.format(cmd=shown))
                    break
            return self.a.refuse_words(args, DECLARES.format(cmd=cmd))
        if cmd == "shopt" and any(w.text == "expand_aliases" or not w.literal for w in args):
            self.a.everywhere.append(ALIASES)
        elif cmd == "enable":
            self.a.everywhere.append(ENABLES)
        if cmd in ("read", "mapfile", "readarray", "unset", "getopts", "wait"):
            reason = TAKES_NAMES
        elif cmd == "let":
            reason = ARITHMETIC
        elif cmd in ("eval", "trap", "source", ".", "alias", "bind", "complete", "compgen", "fc"):
            reason = RUNS_CODE
        else:
            reason = BUILTIN
        self.a.refuse_words(args, reason.format(cmd=cmd))

    def options(
        self, cmd: str, args: list[Word], takes_value: tuple[str, ...] = (), example: str = ""
    ) -> int:
        """Past the literal options of cmd; a placeholder (or a word not known) where an option
        could be is refused, with every placeholder after it. Returns the first operand's index."""
        j = 0
        while j < len(args):
            word = args[j]
            if not word.literal:
                self.a.refuse_words(args[j:], OPTION.format(cmd=cmd, example=example))
                return len(args)
            text = word.text
            if text in ("--", "-"):
                return j + 1
            if len(text) < 2 or not text.startswith(("-", "+")):
                return j
            j += 2 if text in takes_value else 1
        return j

    def printf(self, args: list[Word]) -> None:
        """Past printf's options: -v NAME (also -vNAME) takes a variable name."""
        j = 0
        while j < len(args):
            word = args[j]
            if not word.literal:
                return self.a.refuse_words(
                    args[j:], OPTION.format(cmd="printf", example=" (as -v, which takes a name)")
                )
            text = word.text
            if text == "--" or not text.startswith("-v"):
                return  # the format (or an option printf refuses): the rest are values
            if text == "-v" and j + 1 == len(args):
                return
            name, j = (args[j + 1], j + 2) if text == "-v" else (Word.of(text[2:]), j + 1)
            if name.has_holes():
                self.a.refuse_word(name, PRINTF_NAME)
            elif name.literal and (why := special_variable(name.text.split("[", 1)[0])):
                reason = f"is assigned to {name.text} (printf -v), {why}"
                return self.a.refuse_words(args[j:], reason)

    def test(self, cmd: str, args: list[Word]) -> None:
        """`test`/`[` decide each word's role by its value and the count: only the forms whose
        operators are literal words take placeholders, and never as the operand of -v or -R."""
        shown = "[" if cmd == "[" else "test"
        if cmd == "[":
            if not args or args[-1].text != "]" or not args[-1].literal:
                return self.a.refuse_words(args, TEST_ROLES.format(cmd=shown))
            args = args[:-1]
        if not any(w.has_holes() for w in args):
            return
        if any(w.split for w in args):
            return self.a.refuse_words(args, TEST_ROLES.format(cmd=shown))
        ops = [w.text if w.literal else None for w in args]
        n, name_op = len(ops), None
        if n == 2:
            name_op = ops[0] if ops[0] in _NAME_OPS else None
            fixed = ops[0] in _TEST_UNARY or ops[0] == "!"
        elif n == 3 and ops[1] not in _TEST_BINARY and ops[0] == "!":  # ! OP X
            name_op = ops[1] if ops[1] in _NAME_OPS else None
            fixed = ops[1] in _TEST_UNARY or ops[1] == "!"
        else:  # X, X OP Y, ! X OP Y
            fixed = n == 1 or (n == 3 and ops[1] in _TEST_BINARY)
            fixed = fixed or (n == 4 and ops[0] == "!" and ops[2] in _TEST_BINARY)
        if name_op:
            self.a.refuse_word(args[-1], TEST_NAME.format(op=name_op, cmd=shown))
        elif not fixed:
            self.a.refuse_words(args, TEST_ROLES.format(cmd=shown))


def cond(analysis: Analysis, tokens: list[Word]) -> None:
    """The words of a [[ … ]]: an operand of -v or -R is a name, of -eq … -ge arithmetic."""
    texts = [w.text if w.literal else None for w in tokens]
    for i, word in enumerate(tokens):
        if not word.has_holes():
            continue
        before = texts[i - 1] if i else None
        after = texts[i + 1] if i + 1 < len(texts) else None
        if before in _NAME_OPS:
            analysis.refuse_word(word, TEST_NAME.format(op=before, cmd="[[ … ]]"))
        elif before in _ARITH_OPS or after in _ARITH_OPS:
            analysis.refuse_word(
                word, TEST_ARITH.format(op=before if before in _ARITH_OPS else after)
            )


# Builder states: where the next word goes.
START, SIMPLE, TIME, COND, FOR_NAME, FOR_IN, FOR_LIST = (
    "start",
    "simple",
    "time",
    "cond",
    "for_name",
    "for_in",
    "for_list",
)
CASE_WORD, CASE_IN, PATTERN, FUNC_NAME, COPROC = (
    "case_word",
    "case_in",
    "pattern",
    "func_name",
    "coproc",
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Builder:
    """The words of the commands of one $(…), `…`, <(…) or the top level, as the scanner meets
    them; a finished simple command goes to the analysis."""

    def __init__(self, analysis: Analysis, in_arith: bool = False) -> None:
        self.a = analysis
        self.in_arith = in_arith  # its output is evaluated as arithmetic
        self.parent: Builder | None = None  # whose word its output is part of
        self.children: list[Builder] = []
        self.holes: list[int] = []  # the placeholders in its own words
        self.has_holes = False  # in its words or its children's
        self.swept = False  # its placeholders are all refused already
        self.words: list[Word] = []
        self.word: Word | None = None
        self.redirect: str | None = None
        self.state = START
        self.cases: list[str] = []  # per open `case`: "pattern" or "body"
        self.array = False  # inside name=( … )
        self.tokens: list[Word] = []  # of a [[ … ]]
        self.loop_var: str | None = None
        self.garbled = False

    # -- characters of the current word
    def current(self) -> Word:
        if self.word is None:
            self.word = Word()
        return self.word

    def char(self, c: str, *, quoted: bool = False) -> None:
        word = self.current()
        word.add(c, quoted)
        if not quoted:
            word.unquoted.append(c)

    def quote(self) -> None:
        """An opening quote: the word exists even if the quotes hold nothing."""
        self.current().add("", True)

    def expansion(self, *, split: bool) -> Word:
        """A $…, `…` or <(…) in the current word; returns the word."""
        word = self.current()
        word.add(DYN, False)
        word.split = word.split or split
        return word

    def hole(self, start: int) -> None:
        word = self.current()
        word.holes.append((start, len(word.shape)))
        word.add(HOLE, True)
        self.holes.append(start)
        builder: Builder | None = self
        while builder is not None and not builder.has_holes:  # once per builder in all
            builder.has_holes = True
            builder = builder.parent

    def child(self, builder: Builder) -> None:
        """A $(…), `…` or <(…) opens in the current word: its output is part of the word."""
        self.current().children.append(builder)
        self.children.append(builder)
        builder.parent = self

    # -- what ends words and commands
    def blank(self, text: str, at: int) -> None:
        """A space or tab; text[at:] follows it."""
        if not self.array:
            self.end_word(text, at)

    def separator(self, op: str) -> None:
        """; & && || | |& ;; ;& ;;& or a newline."""
        if self.array and op == "\n":
            return
        self.end_word()
        if self.state == COND:
            if op != "\n":
                self.tokens.append(Word.of(op))
            return
        if self.state == PATTERN or (op == "\n" and self.state in (CASE_WORD, CASE_IN, FOR_IN)):
            return  # `|` between patterns; newlines where bash allows them
        self.end_command()
        if op in (";;", ";&", ";;&") and self.cases:
            self.cases[-1] = PATTERN
            self.state = PATTERN
        else:
            self.state = START

    def redirection(self, op: str) -> None:
        word = self.word
        if self.state == COND:
            self.end_word()
            self.tokens.append(Word.of(op))  # < and > compare strings inside [[ … ]]
            return
        if word is not None and word.literal and not word.quoted:
            if word.text.isdigit() or re.fullmatch(r"\{[A-Za-z_][A-Za-z0-9_]*\}", word.text):
                self.word = None  # the descriptor the redirection is of
        self.end_word()
        self.redirect = op

    def heredoc(self) -> None:
        """A << or <<-: the scanner reads its delimiter word itself."""
        self.redirection("<<")
        self.redirect = None

    def open_paren(self, text: str, at: int) -> None:
        """A `(`; text[at:] follows it."""
        word = self.word
        if self.state == COND:
            self.end_word()
            self.tokens.append(Word.of("("))
        elif self.state == PATTERN:
            self.end_word()
        elif word is not None and word.assignment() is not None and word.text.endswith("="):
            self.array = True
            word.add(DYN, False)
        elif (
            self.state in (SIMPLE, START, COPROC)
            and _next_char(text, at) == ")"
            and ((word is not None and not self.words) or (word is None and len(self.words) == 1))
        ):
            name = word if word is not None else self.words[0]
            if name.has_holes():
                self.a.refuse_word(name, FUNCTION_NAME)
            self.a.functions.add(name.text)
            self.word, self.words, self.state = None, [], START
        elif self.state in (START, COPROC) and word is None:
            self.state = START  # a subshell
        else:
            self.end_word()
            self.garbled = True

    def close_paren(self) -> None:
        if self.array:
            self.array = False
            return
        self.end_word()
        if self.state == COND:
            self.tokens.append(Word.of(")"))
        elif self.state == PATTERN:
            self.cases[-1] = "body"
            self.state = START
        else:
            self.end_command()
            self.state = START

    def close(self) -> None:
        """The end of the text, or of the $(…) or `…` the builder is of."""
        self.end_word()
        self.end_command()

    def element_start(self, before: str) -> bool:
        """Whether a `[` is where an array element's [subscript]= may begin."""
        return self.array and before in " \t\n(" and self.word is not None

    # -- a finished word
    def end_word(self, text: str = "", at: int = 0) -> None:
        """The current word is complete; text[at:] follows it."""
        word, self.word = self.word, None
        if word is None:
            return
        word.finish()
        if self.redirect is not None:
            op, self.redirect = self.redirect, None
            if op in ("<&", ">&"):
                self.a.refuse_word(word, DUPLICATE.format(op=op))
            return
        state = self.state
        keyword = word.text if word.literal and not word.quoted else None
        if state == COND:
            if keyword == "]]":
                cond(self.a, self.tokens)
                self.tokens, self.state = [], SIMPLE
            else:
                self.tokens.append(word)
        elif state == FOR_NAME:
            if word.has_holes():
                self.a.refuse_word(word, LOOP_NAME)
            self.loop_var = keyword if keyword and _NAME.fullmatch(keyword) else None
            self.state = FOR_IN
        elif state == FOR_IN:
            self.state = FOR_LIST if keyword == "in" else START
            if keyword not in ("in", "do"):
                self.garbled = True
        elif state == FOR_LIST:
            if self.loop_var:
                self.a.assigned.append((self.loop_var, [], [word]))
        elif state == CASE_WORD:
            self.state = CASE_IN
        elif state == CASE_IN:
            if keyword == "in":
                self.cases.append(PATTERN)
                self.state = PATTERN
            else:
                self.garbled = True
        elif state == PATTERN:
            if keyword == "esac":
                self.cases.pop()
                self.state = SIMPLE
        elif state == FUNC_NAME:
            if word.has_holes():
                self.a.refuse_word(word, FUNCTION_NAME)
            self.a.functions.add(word.text)
            self.state = START
        elif (
            state == COPROC
            and keyword
            and _NAME.fullmatch(keyword)
            and _next_char(text, at)
            in (
                "{",
                "(",
            )
        ):
            self.state = START  # the coprocess's name
        elif state in (START, TIME, COPROC) and not self.words and keyword in KEYWORDS:
            self.keyword(keyword)
        elif state == TIME and keyword == "-p":
            self.state = START
        else:
            self.words.append(word)
            self.state = SIMPLE

    def keyword(self, word: str) -> None:
        if word in _SIMPLE_KEYWORDS:
            if word == "esac" and self.cases:
                self.cases.pop()
            self.state = START
        elif word == "time":
            self.state = TIME
        elif word in ("for", "select"):
            self.state = FOR_NAME
        elif word == "case":
            self.state = CASE_WORD
        elif word == "function":
            self.state = FUNC_NAME
        elif word == "[[":
            self.state, self.tokens = COND, []
        elif word == "coproc":
            self.state = COPROC
        else:  # `in` out of place
            self.garbled = True

    def end_command(self) -> None:
        self.end_word()
        if self.state == COND:  # never closed: bash refuses it, but look at what is there
            cond(self.a, self.tokens)
            self.tokens = []
        if self.words:
            self.a.commands.append(Command(self.words, self.garbled))
        elif self.garbled:
            self.a.commands.append(Command([], True))
        self.words, self.garbled, self.redirect = [], False, None


def _next_char(text: str, at: int) -> str:
    """The first character of text[at:] that is no space or tab ("" at the end)."""
    while at < len(text) and text[at] in " \t":
        at += 1
    return text[at : at + 1]
