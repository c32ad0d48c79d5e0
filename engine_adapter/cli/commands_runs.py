"""`threadline spawn | emit | schedule | runs | show | reply | approve | deny | cancel | retry
| rerun`: starting runs, reading them and acting on them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from engine_adapter.cli.common import AS_HELP, _actor, _conn, _print, add_command, add_sub
from engine_adapter.model.errors import Invalid
from engine_adapter.model.vocab import AuthorKind, TriggerKind


def _run_id(conn: Any, args: argparse.Namespace) -> str:
    """The full id of the run args.run_id names: the id, or a unique prefix of 8+ characters."""
    from engine_adapter.runs.run_ids import resolve_run_id

    return resolve_run_id(conn, args.run_id)


def _caller(args: argparse.Namespace) -> dict[str, str]:
    """A manual run's initiator as its trigger records it (its gates refuse the initiator)."""
    return _actor(args).as_caller()


def _payload(args: argparse.Namespace) -> Any:
    try:
        return json.loads(args.payload) if args.payload else {}
    except json.JSONDecodeError as err:
        raise Invalid(f"--payload: not valid JSON: {err}") from None


def cmd_spawn(args: argparse.Namespace) -> int:
    import uuid

    from engine_adapter.runs.spawn import manual_key, spawn

    payload = _payload(args)
    # A client request id makes a retried command (or a double-click) one run of this workflow.
    request_id = args.request_id or str(uuid.uuid4())
    with _conn() as conn:
        result = spawn(
            conn,
            args.slug,
            payload,
            idempotency_key=manual_key(args.slug, request_id),
            trigger={"kind": TriggerKind.MANUAL, **_caller(args), "request_id": request_id},
            actor=_actor(args),
        )
    value: dict[str, Any] = {"run_id": result.run_id, "created": result.created}
    if not args.request_id:
        value["request_id"] = request_id
        if not args.json:
            print(
                f"request id {request_id} (repeat with --request-id {request_id} to retry safely)",
                file=sys.stderr,
            )
    _print(
        args,
        value,
        lambda v: v["run_id"] + ("" if v["created"] else "  (existing run for this request id)"),
    )
    return 0


def cmd_emit(args: argparse.Namespace) -> int:
    from engine_adapter.runs.events import emit

    payload = _payload(args)
    with _conn() as conn:
        actor = _actor(args)
        emitted = emit(
            conn,
            args.name,
            payload,
            event_id=args.id,
            caller=actor.label,
            key=args.key,
            actor=actor,
        )
    value = {
        "event": emitted.name,
        "event_id": emitted.event_id,
        "key": emitted.key,
        "runs": [r.__dict__ for r in emitted.runs],
        "released": emitted.released,
        "paused": emitted.paused,
    }

    def text(v: dict[str, Any]) -> str:
        lines = [f"event {v['event']} id {v['event_id']}"]
        lines += [
            f"{r['run_id']}  {r['workflow']}"
            + ("" if r["created"] else "  (existing run for this event id)")
            for r in v["runs"]
        ]
        if v["paused"]:
            lines.append(f"no run started: {v['paused']}")
        elif not v["runs"]:
            lines.append(f"no enabled workflow has on_event: {v['event']}")
        n = len(v["released"])
        lines.append(
            f"{n} waiting step{'s' if n != 1 else ''} released"
            + ("" if n else " (a run that reaches a wait for it later will find it)")
        )
        return "\n".join(lines)

    _print(args, value, text)
    return 0


def cmd_schedule_list(args: argparse.Namespace) -> int:
    from engine_adapter.runs.schedules import schedule_list

    with _conn() as conn:
        rows = schedule_list(conn)

    def text(rs: list[dict[str, Any]]) -> str:
        lines = []
        for r in rs:
            state = "" if r["enabled"] else "  (disabled)"
            lines.append(
                f"{r['workflow']}  {r['schedule']}  {r['description']}"
                f"  catch_up {r['catch_up']}{state}"
            )
            lines += [f"    next {t}" for t in r["next_local"]]
        return "\n".join(lines) or "no schedules: add `schedule:` to a recipe"

    _print(args, rows, text)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from engine_adapter.read.read_model import health
    from engine_adapter.read.run_list import RunFilters, runs_page

    filters = RunFilters(workflow=args.workflow, state=args.state)
    filters.check()
    with _conn() as conn:
        h = health(conn)
        rows = runs_page(conn, filters, limit=args.limit).rows
    value = {"health": h["status"], "runs": [r.to_json() for r in rows]}

    def text(v: dict[str, Any]) -> str:
        lines = [f"health: {v['health']}"]
        lines += [
            f"{r.run_id}  {r.workflow:<20} {r.state:<10} {r.current_step or '':<14} "
            f"{r.created_at:%Y-%m-%d %H:%M:%S}"
            for r in rows
        ]
        if rows:
            return "\n".join(lines)
        if filters.state or filters.workflow:  # runs there may be, none of them matches
            wanted = ", ".join(
                f"{k} {v}" for k, v in (("workflow", args.workflow), ("state", args.state)) if v
            )
            return "\n".join([*lines, f"no run matches the filter ({wanted})"])
        return "\n".join([*lines, "no runs yet: `threadline spawn SLUG`"])

    _print(args, value, text)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from engine_adapter.read import step_report, step_tree
    from engine_adapter.read.read_model import show_run

    with _conn() as conn:
        run = show_run(conn, _run_id(conn, args))

    def text(r: dict[str, Any]) -> str:
        lines = [f"run {r['run_id']} · {r['workflow']} v{r['workflow_version']} · {r['state']}", ""]
        for depth, s in step_tree.flatten(r["steps"]):
            name = "  " * depth + s["id"]
            line = f"  {s['status']:<10} {name:<16} {s['kind']:<13}"
            if s["kind"] not in ("branch", "iteration"):
                line += f" attempts {s.get('attempts', 0)}"
            if s.get("reason"):
                line += f" ({s['reason']})"
            lines.append(line.rstrip())
            lines += step_report.detail_lines(s, " " * (13 + 2 * depth))
        if r.get("outputs"):
            lines += ["", "outputs:"] + [
                f"  {k}: {json.dumps(v, ensure_ascii=False)}" for k, v in r["outputs"].items()
            ]
        lines.append("")
        for e in r["thread"]:
            who = e["author"] if e["author_kind"] != AuthorKind.SYSTEM else "System"
            lines.append(f"#{e['seq']:<3} {who} [{e['kind']}] {e['text'].rstrip()}")
        return "\n".join(lines)

    _print(args, run, text)
    return 0


def cmd_reply(args: argparse.Namespace) -> int:
    from engine_adapter.runs.gates import reply

    with _conn() as conn:
        outcome = reply(conn, _run_id(conn, args), args.text, _actor(args))
    _print(
        args,
        outcome.__dict__,
        lambda o: (
            f"entry #{o['seq']}"
            + (f" · gate {o['decision']}" if o["decision"] else "")
            + (f"\n{o['hint']}" if o["hint"] else "")
        ),
    )
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    from engine_adapter.runs.gates import decide

    with _conn() as conn:
        run_id = _run_id(conn, args)
        key = decide(conn, run_id, args.command, _actor(args), args.reason, gate_key=args.gate)
    print(f"{args.command}d gate {key}" if args.command == "approve" else f"denied gate {key}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from engine_adapter.runs.commands import cancel_run

    with _conn() as conn:
        run_id = _run_id(conn, args)
        cancel_run(conn, run_id, _actor(args), args.reason)
    print(f"cancelled {run_id}")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    from engine_adapter.runs.commands import retry_run

    with _conn() as conn:
        key = retry_run(conn, _run_id(conn, args), _actor(args))
    print(f"retrying {key}")
    return 0


def cmd_rerun(args: argparse.Namespace) -> int:
    from engine_adapter.conductor.reruns import rerun

    payload = _payload(args) if args.payload is not None else None
    with _conn() as conn:
        original = _run_id(conn, args)
        spawned = rerun(conn, original, args.from_step, _actor(args), payload)
    _print(
        args,
        {"run_id": spawned.run_id, "rerun_of": original, "from": args.from_step},
        lambda v: f"{v['run_id']}  (rerun of {v['rerun_of']} from step {v['from']})",
    )
    return 0


def register(sub: Any) -> None:
    sp = add_command(
        sub, "spawn", cmd_spawn, "start a run of workflow SLUG; prints the run id", json_flag=True
    )
    sp.add_argument("slug")
    sp.add_argument("--payload", help="JSON object")
    sp.add_argument(
        "--request-id",
        "--idempotency-key",
        dest="request_id",
        help="client request id: repeating it makes no second run (default: a fresh one, printed)",
    )
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    sp = add_command(
        sub,
        "emit",
        cmd_emit,
        "emit event NAME: one run of each workflow with on_event: NAME, and the end of every "
        "wait_for_event step waiting for it",
        json_flag=True,
    )
    sp.add_argument("name")
    sp.add_argument("--payload", help="JSON object")
    sp.add_argument(
        "--id", help="event id: emitting it again starts no second run (default: a fresh one)"
    )
    sp.add_argument(
        "--key", help="correlation key: ends the wait_for_event steps waiting with this key"
    )
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    scp = sub.add_parser("schedule", help="schedules").add_subparsers(
        dest="schedule_command", required=True
    )
    add_sub(
        scp, "list", cmd_schedule_list, "each schedule in words with its next fire times", json=None
    )
    sp = add_command(sub, "runs", cmd_runs, "list runs, leading with health", json_flag=True)
    sp.add_argument("--workflow")
    sp.add_argument("--state")
    sp.add_argument("--limit", type=int, default=50)
    sp = add_command(sub, "show", cmd_show, "a run: its steps and its thread", json_flag=True)
    sp.add_argument("run_id")
    sp = add_command(sub, "reply", cmd_reply, "reply in a run's thread as a human", json_flag=True)
    sp.add_argument("run_id")
    sp.add_argument("text")
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    for name in ("approve", "deny"):
        sp = add_command(sub, name, cmd_decide, f"{name} the gate a run waits at")
        sp.add_argument("run_id")
        sp.add_argument("--reason")
        sp.add_argument(
            "--gate", help="the gate's step key; refused if that gate is no longer open"
        )
        sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    sp = add_command(sub, "cancel", cmd_cancel, "cancel a run (stops a running command)")
    sp.add_argument("run_id")
    sp.add_argument("--reason")
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    sp = add_command(sub, "retry", cmd_retry, "resume a failed run at its failed step")
    sp.add_argument("run_id")
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
    sp = add_command(
        sub,
        "rerun",
        cmd_rerun,
        "a new run of the same recipe version from STEP on; the steps before it are carried "
        "over from the original run, never run again",
        json_flag=True,
    )
    sp.add_argument("run_id")
    sp.add_argument("--from", dest="from_step", required=True, metavar="STEP")
    sp.add_argument("--payload", help="JSON object (default: the original run's payload)")
    sp.add_argument("--as", dest="as_", metavar="NAME", help=AS_HELP)
