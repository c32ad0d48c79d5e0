"""A run's steps as a tree, read back from the handler's checkpoints: each node's status, tries,
attempts, output and times, and what it nests (the branch a condition took, each iteration of a
loop, each child run of a parallel group, foreach or sub-workflow, with that child's own steps).

The stepper, `show --json` and the notebooks all draw this tree; `read_model.show_run` builds it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict, cast

from engine_adapter.model import domain, names
from engine_adapter.model.vocab import AwaitKind, EntryKind
from engine_adapter.read import step_report
from engine_adapter.recipes.recipes import branches_of

MAX_DEPTH = 4  # child runs of child runs...: deeper ones are linked, not drawn
# A fan-out's first children are drawn with their steps; the rest by their status alone, so a
# run page over a foreach of 1,000 items stays a few queries (each drawn child costs five).
MAX_CHILDREN_DRAWN = 25


@dataclass
class RunFacts:
    """What the tree is computed from, for one run."""

    run: dict[str, Any]
    state: str
    checkpoints: dict[str, Any]
    written_at: dict[str, datetime]
    claims: list[dict[str, Any]]
    # Runs started by this run's steps: run_id -> facts, loaded on demand (None: not loaded).
    child: Callable[[str], RunFacts | None] = field(default=lambda _: None)
    # The bots' reports and agents' journals (sql step_reports): each attempt's exit code, each
    # tool call.
    reports: list[dict[str, Any]] = field(default_factory=list)
    tries: dict[str, int] = field(init=False)
    iterations: dict[str, int] = field(init=False)
    exits: dict[tuple[str, int], int | None] = field(init=False)
    whys: dict[tuple[str, int], str] = field(init=False)  # a retried attempt's, from its note

    def __post_init__(self) -> None:
        self.tries, self.iterations = {}, {}
        self.exits = {
            (r["step_key"], r["data"]["attempt"]): r["data"].get("exit_code")
            for r in self.reports
            if r["kind"] in (EntryKind.PROGRESS, EntryKind.MESSAGE)
            and r["data"].get("attempt") is not None
        }
        self.whys = {
            (r["step_key"], r["data"]["attempt"]): why
            for r in self.reports
            if r["kind"] == EntryKind.PROGRESS and (why := step_report.note_why(r.get("line")))
        }
        for name in self.checkpoints:
            parsed = names.parse_checkpoint(name)
            if parsed is None:
                continue
            _, path, try_no, _ = parsed
            self.tries[path] = max(self.tries.get(path, 0), try_no or 0)
            # Every `<loop>[<n>]` prefix of a path is an iteration that started.
            for i, ch in enumerate(path):
                if ch == "]":
                    loop, _, n = path[: i + 1].rpartition("[")
                    if n[:-1].isdigit():
                        self.iterations[loop] = max(self.iterations.get(loop, 0), int(n[:-1]))

    def started_within(self, path: str) -> datetime | None:
        """When a block started: its first checkpoint, or its iterations' first."""
        times = [
            at
            for name, at in self.written_at.items()
            if (parsed := names.parse_checkpoint(name))
            and (parsed[1] == path or parsed[1].startswith(path + "["))
        ]
        return min(times, default=None)

    def cp(self, kind: str, path: str, try_no: int | None, branch: str | None = None) -> Any:
        return self.checkpoints.get(names.checkpoint(kind, path, try_no, branch))

    def at(self, kind: str, path: str, try_no: int | None, branch: str | None = None) -> Any:
        return self.written_at.get(names.checkpoint(kind, path, try_no, branch))


class StepNode(TypedDict, total=False):
    """A step as the read model shows it (`threadline show --json`'s `steps`): where it is,
    how it stands, what it said; a block's nested steps, a fan-out's branches, items or
    iterations, an attempt list for a bot step."""

    id: str
    path: str
    kind: str
    status: str
    attempts: int
    tries: int
    output: Any
    reason: str | None
    exit_code: int | None
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    why: Any
    tail: Any
    tokens: Any
    tool_calls: Any
    attempt_list: list[dict[str, Any]]
    blocks: list[dict[str, Any]]
    branches: list[dict[str, Any]]
    items: int  # how many items a foreach listed
    iterations: list[dict[str, Any]]
    child_run: Any


def steps_tree(facts: RunFacts, depth: int = 0) -> list[StepNode]:
    return _nodes(facts, facts.run["recipe"]["steps"], "", depth)


def _nodes(facts: RunFacts, steps: list[dict[str, Any]], scope: str, depth: int) -> list[StepNode]:
    return [_node(facts, s, names.child_path(scope, s["id"]), scope, depth) for s in steps]


def kind_of(step: dict[str, Any]) -> str:
    return next((k for k in domain.KEYED_KINDS if k in step), domain.CONDITIONAL)


def _node(facts: RunFacts, step: dict[str, Any], path: str, scope: str, depth: int) -> StepNode:
    kind = kind_of(step)
    last = facts.tries.get(path, 0)
    node: StepNode = {
        "id": step["id"],
        "path": path,
        "kind": kind,
        "status": domain.PENDING,
        "attempts": _attempts(facts, path),
        "tries": last,
        "output": None,
        "reason": None,
        "exit_code": None,
        "started_at": None,
        "finished_at": None,
    }
    decided = facts.cp(names.DECIDE, path, last) if last else None
    carried = facts.cp(names.CARRIED, path, None)
    if carried is not None:
        node.update(
            {
                "status": domain.CARRIED_OVER,
                "output": carried.get("output"),
                "reason": f"carried over from run {carried.get('from')}",
            }
        )
        return node
    if decided and "error" in decided:
        node.update(
            {"status": domain.FAILED, "output": decided["error"], "reason": decided["error"]}
        )
    elif decided and not decided.get("value") and kind != domain.CONDITIONAL:
        node.update({"status": domain.SKIPPED, "reason": decided.get("why")})
    elif kind in domain.BLOCK_KINDS or kind == domain.WORKFLOW:
        _block(facts, step, node, kind, path, scope, last, depth)
    else:
        _leaf(facts, step, node, kind, path, last)
    if node["status"] in (domain.PENDING, domain.ACTIVE) and facts.state == domain.CANCELLED:
        # Cancelled while it ran (its command stopped), or never reached.
        node["status"] = (
            domain.CANCELLED if last and kind not in domain.BLOCK_KINDS else (domain.SKIPPED)
        )
    first = facts.at(names.SEND, path, 1) or facts.at(names.DECIDE, path, 1)
    if kind in domain.BLOCK_KINDS or kind == domain.WORKFLOW:
        first = facts.started_within(path) or first
        done = facts.at(names.DONE, path, last) if last else None
        if done and node["status"] in (domain.COMPLETED, domain.FAILED):
            node["finished_at"] = done.isoformat()
    if node["status"] != domain.SKIPPED:  # a skipped step never started
        node["started_at"] = first.isoformat() if first else node["started_at"]
    return node


def _attempts(facts: RunFacts, path: str) -> int:
    """The step's attempts over its tries; an agent step's later rounds count only their
    retries (each round's first attempt carries on the same attempt)."""
    keys = [c["step_key"] for c in facts.claims if names.split_step_key(c["step_key"])[1] == path]
    return len(keys) - len({k for k in keys if names.ROUND_MARK in k})


def _current(facts: RunFacts, path: str) -> str | None:
    """The step's status if it is the run's current step and the run is not finished."""
    if facts.run["current_step"] != path or facts.state in (domain.COMPLETED, domain.CANCELLED):
        return None
    if facts.state == domain.WAITING and facts.run.get("await_kind") == AwaitKind.EVENT:
        return domain.WAITING  # for an outside event, not a person
    return domain.CURRENT_STEP_STATUS.get(facts.state, domain.ACTIVE)


def _last_round(facts: RunFacts, path: str, last: int, result: Any) -> tuple[Any, str | None]:
    """An agent step that paused (ask_human, start_workflow) goes on in rounds: its result is
    the last round's, and its finish time that round's; (None, None) while one is under way."""
    part = None
    for round_no in itertools.count(2):
        if not (result and result.get("status") == domain.PAUSED):
            return result, part
        part = f"r{round_no}"
        result = facts.cp(names.DONE, path, last, part)
    return None, None


def _leaf(facts: RunFacts, step: dict, node: StepNode, kind: str, path: str, last: int) -> None:
    result = facts.cp(names.DONE, path, last) or facts.cp(names.DONE_LATE, path, last)
    result, part = _last_round(facts, path, last, result)
    if kind == domain.HUMAN_GATE and result:
        outcome = domain.gate_outcome(result, step.get("on_timeout"))
        node.update(
            {
                "status": domain.COMPLETED if outcome.passed else domain.FAILED,
                "output": result.get("text"),
                "reason": None if outcome.passed else outcome.why,
            }
        )
    elif result:
        node.update(
            {
                "status": result.get("status", domain.COMPLETED),
                "output": result.get("output"),
                "exit_code": result.get("exit_code"),
                "reason": result.get("reason"),
            }
        )
        if result.get("tokens"):
            node["tokens"] = result["tokens"]
    elif (
        kind in domain.SLEEP_KINDS
        and facts.cp(names.SLEEP, path, last) is not None
        and (_current(facts, path) != domain.SLEEPING)
    ):
        wake = (facts.cp(names.SEND, path, last) or {}).get("wake_at")
        node.update({"status": domain.COMPLETED, "output": wake})
    elif current := _current(facts, path):
        node["status"] = current
    if node["status"] == domain.FAILED and not node["output"]:
        node["output"] = (facts.cp(names.SEND, path, last) or {}).get("error")
    finished = facts.at(names.DONE, path, last, part) or facts.at(names.DONE_LATE, path, last)
    if kind in domain.SLEEP_KINDS and node["status"] == domain.COMPLETED and node["output"]:
        finished = datetime.fromisoformat(node["output"])  # a sleep ends at its wake time
    if finished and node["status"] in (domain.COMPLETED, domain.FAILED):
        node["finished_at"] = finished.isoformat()
    if kind in domain.BOT_KINDS:
        _why(facts, node, path, last)


def _why(facts: RunFacts, node: StepNode, path: str, last: int) -> None:
    """A bot step's own attempts (each with its own duration), why it failed in words with the
    last lines of its output, and an agent's tool calls."""
    attempts = step_report.attempts_of(facts.claims, facts.exits, path, facts.whys)
    node["attempt_list"] = attempts
    # The last attempt's own time: not the first try's start to the last one's end, which
    # counts retry waits and the time a failed run sat parked.
    node["duration_s"] = attempts[-1]["duration_s"] if attempts else None
    failed = node["status"] == domain.FAILED
    if failed:
        node["reason"] = step_report.said_why(node["reason"], node["exit_code"], node["output"])
    if failed and attempts and attempts[-1]["status"] == domain.FAILED:
        attempts[-1]["why"] = node["reason"] or attempts[-1]["why"]
    node["why"] = node["reason"] if failed else None
    node["tail"] = step_report.tail(node["output"]) if failed else ""
    if node["kind"] == domain.DISPATCH_TASK and last:
        key = names.step_key(str(facts.run["run_id"]), path, last)
        node["tool_calls"] = step_report.tool_calls(facts.reports, key)


def _block(
    facts: RunFacts,
    step: dict,
    node: StepNode,
    kind: str,
    path: str,
    scope: str,
    last: int,
    depth: int,
) -> None:
    if kind == domain.CONDITIONAL:
        decided = facts.cp(names.DECIDE, path, last) if last else None
        taken = None if decided is None else ("then" if decided.get("value") else "else")
        node["blocks"] = [
            {
                "name": name,
                "taken": name == taken,
                "steps": _nodes(facts, step.get(name) or [], scope, depth),
            }
            for name in ("then", "else")
            if name in step
        ]
        if decided is not None:  # the branch taken is known
            node["output"], node["reason"] = taken, decided.get("why")
            for block in node["blocks"]:
                if not block["taken"]:
                    _mark(block["steps"], domain.SKIPPED, f"the {taken} branch was taken")
        inner = [n for b in node["blocks"] if b["taken"] for n in b["steps"]]
        node["status"] = _aggregate(inner) if taken else domain.PENDING
        if taken and not inner:
            node["status"] = domain.COMPLETED
        return
    if kind in (domain.REPEAT, domain.FOREACH) and not _fans_out(step):
        body = step["repeat"] if kind == domain.REPEAT else step["steps"]
        count = facts.iterations.get(path, 0)
        node["iterations"] = [
            {"n": n, "steps": _nodes(facts, body, names.iteration_path(path, n), depth)}
            for n in range(1, count + 1)
        ]
        inner = [x for it in node["iterations"] for x in it["steps"]]
        status = _aggregate(inner) if inner else domain.PENDING
        if kind == domain.REPEAT and count:
            where = names.iteration_path(path, count)
            until = facts.cp(names.UNTIL, where, facts.tries.get(where, 0))
            if until and until.get("value"):
                status = domain.COMPLETED
            elif status == domain.COMPLETED:
                status = domain.ACTIVE  # between iterations
        if kind == domain.FOREACH:
            listed = facts.cp(names.ITEMS, path, last) or {}
            if "error" in listed:
                status, node["output"] = domain.FAILED, listed["error"]
            elif "items" in listed:
                node["items"] = len(listed["items"])
                done = count == len(listed["items"]) and status == domain.COMPLETED
                status = (
                    domain.COMPLETED
                    if done or not listed["items"]
                    else (
                        status
                        if status in (domain.FAILED, domain.GATE, domain.SLEEPING)
                        else domain.ACTIVE
                    )
                )
        node["status"] = status
    else:
        _children(facts, step, node, kind, path, last, depth)
    result = facts.cp(names.DONE, path, last) if last else None
    if result is not None:  # the block's own result, written when it finished
        node["status"] = result.get("status", node["status"])
        node["output"] = result.get("output")
        node["reason"] = result.get("reason") or node["reason"]
    if _current(facts, path) == domain.FAILED:
        node["status"] = domain.FAILED


def _mark(nodes: list[dict[str, Any]], status: str, reason: str) -> None:
    for n in nodes:
        n.update({"status": status, "reason": reason})
        for block in n.get("blocks") or []:
            _mark(block["steps"], status, reason)


def _fans_out(step: dict) -> bool:
    return (step.get("max_parallel") or 1) > 1


def _children(
    facts: RunFacts, step: dict, node: StepNode, kind: str, path: str, last: int, depth: int
) -> None:
    """A parallel group, a parallel foreach or a sub-workflow: its child runs."""
    if kind == domain.PARALLEL:
        labels = [name for name, _ in branches_of(step)]
    elif kind == domain.WORKFLOW:
        labels = ["run"]
    else:
        listed = facts.cp(names.ITEMS, path, last) or {}
        if "error" in listed:
            node.update({"status": domain.FAILED, "output": listed["error"]})
            return
        labels = [str(i + 1) for i in range(len(listed.get("items") or []))]
    winner = facts.cp(names.WINNER, path, last)
    branches, statuses = [], []
    for i, label in enumerate(labels):
        spawned = _spawned(facts, path, last, label)
        done = facts.cp(names.DONE, path, last, label)
        branch: dict[str, Any] = {"name": label, "run_id": None, "status": domain.PENDING}
        if spawned:
            branch["run_id"] = spawned
            drawn = depth < MAX_DEPTH and i < MAX_CHILDREN_DRAWN
            child = facts.child(spawned) if drawn else None
            branch["status"] = child.state if child else domain.ACTIVE
            if child is not None:
                branch["steps"] = steps_tree(child, depth + 1)
        if done:
            branch["status"] = done["status"]
        if winner:
            branch["winner"] = winner.get("branch") == label
        branches.append(branch)
        statuses.append(branch["status"])
    node["branches"] = branches
    if kind == domain.WORKFLOW and branches[0]["run_id"]:
        node["child_run"] = branches[0]["run_id"]
    if winner:
        node["status"] = domain.COMPLETED if winner["status"] == domain.COMPLETED else domain.FAILED
        node["output"] = winner.get("branch")
    elif (
        statuses
        and all(s in domain.FINISHED for s in statuses)
        and all(facts.cp(names.DONE, path, last, label) for label in labels)
    ):
        ok = all(s == domain.COMPLETED for s in statuses)
        node["status"] = domain.COMPLETED if ok else domain.FAILED
    elif any(b["run_id"] for b in branches):
        node["status"] = domain.ACTIVE
    spawned_error = facts.cp(names.SPAWN, path, last, "run")
    if isinstance(spawned_error, dict) and "error" in spawned_error:
        node.update({"status": domain.FAILED, "output": spawned_error["error"]})


def _spawned(facts: RunFacts, path: str, last: int, label: str) -> str | None:
    """The child run of a branch: this try's, else the last earlier try's that completed."""
    for try_no in range(last, 0, -1):
        spawned = facts.cp(names.SPAWN, path, try_no, label)
        if spawned and spawned.get("run_id"):
            return spawned["run_id"]
    return None


def _aggregate(nodes: list[dict[str, Any]]) -> str:
    """A block's status from what it holds."""
    statuses = [n["status"] for n in nodes]
    for status in (domain.FAILED, domain.GATE, domain.SLEEPING, domain.ACTIVE):
        if status in statuses:
            return status
    if statuses and all(s in (domain.COMPLETED, domain.SKIPPED) for s in statuses):
        return domain.COMPLETED
    if any(s != domain.PENDING for s in statuses):
        return domain.ACTIVE
    return domain.PENDING


def flatten(
    nodes: Sequence[StepNode] | Sequence[dict[str, Any]], depth: int = 0
) -> list[tuple[int, dict[str, Any]]]:
    """(depth, node) in drawing order, for text and table views; branches and iterations become
    headed rows of their own (kind "branch" / "iteration"), so rows are plain dicts."""
    out: list[tuple[int, dict[str, Any]]] = []
    for node in nodes:
        out.append((depth, cast(dict[str, Any], node)))
        for block in node.get("blocks") or []:
            status = _aggregate(block["steps"]) if block["taken"] else domain.SKIPPED
            out.append(
                (
                    depth + 1,
                    {
                        "id": block["name"],
                        "kind": "branch",
                        "status": status,
                        "taken": block["taken"],
                    },
                )
            )
            out.extend(flatten(block["steps"], depth + 2))
        for it in node.get("iterations") or []:
            out.append(
                (
                    depth + 1,
                    {
                        "id": f"iteration {it['n']}",
                        "kind": "iteration",
                        "status": _aggregate(it["steps"]),
                    },
                )
            )
            out.extend(flatten(it["steps"], depth + 2))
        for branch in node.get("branches") or []:
            out.append(
                (
                    depth + 1,
                    {
                        "id": f"{branch['name']}",
                        "kind": "branch",
                        "status": branch["status"],
                        "run_id": branch["run_id"],
                        **({"winner": branch["winner"]} if "winner" in branch else {}),
                    },
                )
            )
            out.extend(flatten(branch.get("steps") or [], depth + 2))
    return out
