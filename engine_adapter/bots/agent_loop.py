"""The durable agent loop of one dispatch_task step: call the model, run the tools it asks for,
call it again, until it answers without tool calls, calls `finish`, or uses up max_turns.

The run's thread is the journal. Each assistant message and each tool result is appended as a
bot entry with a dedupe key of its step key, turn and call, the moment it completes. A new
attempt (after the bot was killed) rebuilds the conversation from those entries and carries on
where they stop: no finished model call is made again and no finished tool call runs again.

People steer a running agent by writing in the thread: their messages since the step's
instruction reach the model as user messages at its next turn. Each assistant entry records the
last message its call had seen, so a rebuilt conversation puts them exactly where they were.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from engine_adapter.bots.agent_tools import (
    FINISH,
    Call,
    ToolError,
    check_start,
    declarations,
    parse_arguments,
)
from engine_adapter.catalog.bot_config import BotConfig
from engine_adapter.model.domain import (
    ASK_HUMAN,
    COMPLETED,
    FAILED,
    PAUSED,
    PAUSING_TOOLS,
    PROPOSE_CHANGE,
)
from engine_adapter.model.vocab import EntryKind
from engine_adapter.read import step_report
from engine_adapter.store.workers import crash_point

ASSISTANT, TOOL = EntryKind.AGENT_ASSISTANT, EntryKind.AGENT_TOOL  # the journal's entry kinds
_SUMMARY_CHARS = 1000  # a tool result in the thread (the console folds it to a few lines)
MODEL_RETRIES = 6  # transient model errors, retried with backoff (about a minute in all)

if TYPE_CHECKING:
    import openai

# openai is imported on an agent's first model call, not with the bots process: it takes a second
# or more to import, which every bots start paid though most steps are commands.


class Stopped(Exception):
    """The attempt is no longer current (run cancelled, attempt superseded, bot stopping)."""


@dataclass(frozen=True)
class Outcome:
    status: str  # completed | failed | paused
    output: Any  # the final text, or finish's JSON; why it failed; a paused call's request
    reason: str | None = None
    tokens: dict[str, Any] | None = None  # this step's, over all its turns: in, out, cost_usd
    # Whether the step's retries may try again: not for a failure the same conversation meets
    # again (max_turns, the budget, a refusal); a model still unreachable after the client's
    # retries may answer later.
    retryable: bool = False


class Journal(Protocol):
    def load(self) -> list[dict[str, Any]]:
        """The step's journal entries' data, in thread order."""
        ...

    def append(self, kind: EntryKind, text: str, dedupe_key: str, data: dict[str, Any]) -> bool:
        """Append one entry; False when its dedupe key was written before (another attempt)."""
        ...

    def human_messages(self, after: int) -> list[dict[str, Any]]:
        """People's messages in the thread since the step began, after a seq: seq, author, text."""
        ...

    def run_tokens(self) -> int:
        """Tokens (in and out) the run's agent turns have used so far, every step's."""
        ...


@dataclass(frozen=True)
class Step:
    key: str  # the step key: dedupe keys are unique per step and try
    instruction: str
    tools: tuple[str, ...]
    timeout_s: float
    workflows: tuple[str, ...] = ()  # what start_workflow may start
    answers: dict[str, str] = field(default_factory=dict)  # paused calls' answers, by call_ref


def _client(config: BotConfig, timeout_s: float) -> openai.OpenAI:
    import openai

    key = "unused"  # local servers want none, but the client insists on one
    if config.api_key_env:
        key = os.environ.get(config.api_key_env, "")
        if not key:
            raise AgentFailed(
                f"bot {config.name!r}: environment variable {config.api_key_env} (its api_key) "
                "is not set in the bot process"
            )
    # Rate limits, 5xx, timeouts and dropped connections are retried by the client, with
    # exponential backoff and jitter, honouring Retry-After, inside this one attempt (they burn
    # none of the step's retries); anything else fails the step at once (see model_turn).
    return openai.OpenAI(
        base_url=config.base_url, api_key=key, timeout=timeout_s, max_retries=MODEL_RETRIES
    )


class AgentFailed(Exception):
    """The step fails with this reason (a model error, a missing key)."""

    def __init__(self, why: str, retryable: bool = False) -> None:
        super().__init__(why)
        self.retryable = retryable


def _assistant_message(msg: Any) -> dict[str, Any]:
    """The assistant message as the conversation (and the journal) keep it: plain JSON."""
    out: dict[str, Any] = {"role": "assistant", "content": msg.content or ""}
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": tc.id,
                "type": "function",
                "function": {"name": tc.function.name, "arguments": tc.function.arguments},
            }
            for tc in msg.tool_calls
        ]
    return out


def _calls(message: dict[str, Any]) -> list[Call]:
    return [
        Call(str(tc.get("id") or i), tc["function"]["name"], tc["function"].get("arguments", ""))
        for i, tc in enumerate(message.get("tool_calls") or [])
    ]


def _summary(text: str) -> str:
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 3] + "..."


class AgentLoop:
    def __init__(
        self,
        config: BotConfig,
        step: Step,
        journal: Journal,
        run_tool: Callable[[Call], str],
        still_current: Callable[[], bool],
        lease_held: Callable[[], AbstractContextManager[None]] = nullcontext,
        turned: Callable[[int, int, dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config
        self.turned = turned  # hears of each model turn: its number, start (ns) and tokens
        self.step = step
        self.journal = journal
        self.run_tool = run_tool
        self.still_current = still_current
        self.lease_held = lease_held
        self.client: openai.OpenAI | None = None

    def run(self) -> Outcome:
        messages: list[dict[str, Any]] = [{"role": "user", "content": self.step.instruction}]
        turn, last, answered = 0, None, 0
        self.seen = 0  # the last person's message delivered to the model (its thread seq)
        people = self.journal.human_messages(0)
        self.tokens: dict[str, Any] = {"in": 0, "out": 0}
        for data in self.journal.load():  # resume where the last attempt's journal stops
            self.add_usage(data.get("usage") or {})
            if data["message"]["role"] == "assistant":
                messages += [_from_person(m) for m in people if m["seq"] <= data.get("seen", 0)]
                people = [m for m in people if m["seq"] > data.get("seen", 0)]
                self.seen = max(self.seen, data.get("seen", 0))
            messages.append(data["message"])
            if data["message"]["role"] == "assistant":
                turn, last, answered = data["turn"], data["message"], 0
            else:
                answered += 1
        try:
            return self.with_tokens(self.loop(messages, turn, last, answered))
        except AgentFailed as err:
            return self.with_tokens(Outcome(FAILED, str(err), str(err), retryable=err.retryable))
        finally:
            if self.client is not None:
                self.client.close()

    def add_usage(self, usage: dict[str, Any]) -> None:
        """A turn's tokens (and cost, where priced) into the step's totals."""
        for k in ("in", "out"):
            self.tokens[k] += usage.get(k, 0)
        if usage.get("cost_usd") is not None:
            self.tokens["cost_usd"] = round(self.tokens.get("cost_usd", 0) + usage["cost_usd"], 8)

    def with_tokens(self, outcome: Outcome) -> Outcome:
        return replace(outcome, tokens=dict(self.tokens))

    def loop(
        self, messages: list[dict[str, Any]], turn: int, last: dict[str, Any] | None, answered: int
    ) -> Outcome:
        """Answer the last turn's calls, then call the model again, until an answer ends it."""
        while True:
            if last is not None:
                calls = _calls(last)
                if not calls:
                    return Outcome(COMPLETED, last.get("content") or "")
                result = self.answer_calls(turn, calls[answered:], answered, messages)
                if result is not None:
                    return result
                if turn >= self.config.max_turns:
                    why = (
                        f"the agent used all {self.config.max_turns} turns (max_turns) "
                        "without finishing"
                    )
                    return Outcome(FAILED, why, why)
            self.check_budget()
            turn += 1
            last, answered = self.model_turn(turn, messages), 0

    def check_budget(self) -> None:
        """Before a model call: the run's tokens so far against its bot's budget."""
        budget = self.config.max_tokens_per_run
        if budget is not None:
            used = self.journal.run_tokens()
            if used >= budget:
                raise AgentFailed(
                    f"the run used {used} tokens; its bot's budget (max_tokens_per_run) is {budget}"
                )

    def model_turn(self, turn: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.still_current():
            raise Stopped
        import openai  # loaded by _client's first call; the except clauses below name it

        for person in self.journal.human_messages(self.seen):  # steering, since the last turn
            messages.append(_from_person(person))
            self.seen = person["seq"]
        started_ns = time.time_ns()
        try:
            if self.client is None:  # one client (and its connection pool) for the attempt
                self.client = _client(self.config, self.step.timeout_s)
            with self.lease_held():
                # The ignores: messages and tools are plain JSON dicts (read back from the
                # journal), which openai's hints, naming its own TypedDicts, do not accept.
                response = self.client.chat.completions.create(
                    model=self.config.model,
                    messages=messages,  # type: ignore[arg-type]
                    tools=declarations(self.step.tools),  # type: ignore[arg-type]
                    temperature=self.config.temperature,
                    max_tokens=self.config.max_tokens,
                )
        except openai.APIStatusError as err:  # refused: auth, a bad request, the context length
            raise AgentFailed(
                f"the model refused turn {turn} ({err.status_code}): {_error_message(err)}"
            ) from None
        except openai.APIConnectionError as err:  # unreachable or silent, after the retries
            raise AgentFailed(
                f"bot {self.config.name!r} could not reach its model at {self.config.base_url} "
                f"(turn {turn}): {err} Check the URL (`threadline bot list`), fix it with "
                "`threadline bot apply`, then `threadline retry` (a retry takes the bot's "
                "settings as they are then)",
                True,
            ) from None
        except openai.OpenAIError as err:  # still failing after the client's retries
            raise AgentFailed(
                f"the model call of turn {turn} (bot {self.config.name!r}, "
                f"{self.config.base_url}) failed: {err}",
                True,
            ) from None
        if not self.still_current():  # cancelled, or superseded while the model thought
            raise Stopped
        if not response.choices:
            raise AgentFailed(f"the model answered turn {turn} with no choices")
        message = _assistant_message(response.choices[0].message)
        usage: dict[str, Any] = {
            "in": getattr(response.usage, "prompt_tokens", 0) or 0,
            "out": getattr(response.usage, "completion_tokens", 0) or 0,
        }
        cost = self.config.cost_usd(usage["in"], usage["out"])
        if cost is not None:
            usage["cost_usd"] = cost
        self.add_usage(usage)
        if self.turned is not None:
            self.turned(turn, started_ns, usage)
        text = message["content"] or ""
        if message.get("tool_calls"):  # each call with its arguments (cut when long)
            text = (text + "\n" if text else "") + step_report.calls_line(message["tool_calls"])
        text += f"\n[tokens: {usage['in']} in, {usage['out']} out"
        text += f" · ${cost:.6f}]" if cost is not None else "]"
        self.record(ASSISTANT, text, f"{turn}:assistant", turn, message, self.seen, usage)
        messages.append(message)
        crash_point("agent_after_model")
        return message

    def answer_calls(
        self, turn: int, calls: list[Call], first: int, messages: list[dict[str, Any]]
    ) -> Outcome | None:
        """Answer the calls not yet answered, in order; an Outcome when one of them is a valid
        finish."""
        for i, call in enumerate(calls, start=first):
            if call.name == FINISH:
                try:
                    return Outcome(COMPLETED, parse_arguments(call, self.step.tools)["result"])
                except ToolError as err:
                    content = f"error: {err}"
            elif call.name in PAUSING_TOOLS and call.name in self.step.tools:
                answer = self.step.answers.get(call_ref(turn, i))
                if answer is None:
                    try:
                        return Outcome(PAUSED, self.pause_request(call, turn, i))
                    except ToolError as err:
                        content = f"error: {err}"
                else:
                    content = answer
            else:
                content = self.run_tool(call)
            message = {"role": "tool", "tool_call_id": call.id, "content": content}
            self.record(
                TOOL, f"{call.name}: {_summary(content)}", f"{turn}:tool:{i}", turn, message
            )
            messages.append(message)
            crash_point("agent_after_tool")
        return None

    def pause_request(self, call: Call, turn: int, i: int) -> dict[str, Any]:
        """What the conductor does for a pausing call while the loop holds no process: ask a
        person (a gate), or start runs and wait for them."""
        args = parse_arguments(call, self.step.tools)
        request: dict[str, Any] = {"call": call_ref(turn, i), "tool": call.name}
        if call.name == ASK_HUMAN:
            if not args["question"].strip():
                raise ToolError("ask_human: question is empty")
            return {**request, "question": args["question"]}
        if call.name == PROPOSE_CHANGE:
            if not args["recipe"].strip() or not args["summary"].strip():
                raise ToolError("propose_change: recipe and summary must not be empty")
            return {**request, "recipe": args["recipe"], "summary": args["summary"]}
        return {
            **request,
            "runs": check_start(args, self.step.workflows),
            "wait": args.get("wait", "all"),
        }

    def record(
        self,
        kind: EntryKind,
        text: str,
        suffix: str,
        turn: int,
        message: dict,
        seen: int | None = None,
        usage: dict[str, int] | None = None,
    ) -> None:
        key = f"agent:{self.step.key}:{suffix}"
        data: dict[str, Any] = {"turn": turn, "message": message}
        if seen is not None:
            data["seen"] = seen  # the people's messages this call had read
        if usage is not None:
            data["usage"] = usage
        if not self.journal.append(kind, text, key, data):
            raise Stopped  # another attempt wrote this turn: this one is a zombie


def call_ref(turn: int, i: int) -> str:
    """A tool call's place in the journal (turn and index): what a paused call's answer is keyed
    by (models need not give calls ids, nor unique ones)."""
    return f"{turn}:{i}"


def _error_message(err: openai.APIStatusError) -> str:
    """The model server's own words for a refusal."""
    body = err.body if isinstance(err.body, dict) else {}
    return str(body.get("message") or (body.get("error") or {}).get("message") or err.message)


def _from_person(entry: dict[str, Any]) -> dict[str, Any]:
    """A person's message in the thread, as the model reads it."""
    return {"role": "user", "content": f"{entry['author']}: {entry['text']}"}


def finish_text(output: Any) -> str:
    """The step's result as the thread's reply shows it."""
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
