"""The recipe page's graph of a workflow: its steps top to bottom, an if/else as a decision with
its two branches side by side, a parallel group as a fork into its branches and a join, a
foreach or repeat as a frame around its body with a loop-back arrow, a sub-workflow linked to its
own recipe, and gates, sleeps and event waits each in a shape of their own.

`layout` places the shapes (pure: a canonical recipe's steps in, boxes and lines out); `svg` draws
them. Drawn on the server as SVG: nothing is fetched, no script runs.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from engine_adapter.model import domain
from engine_adapter.read.step_tree import kind_of
from engine_adapter.recipes.recipes import branches_of

from .state import recipe_url

NODE_W, NODE_H = 190, 42
GAP_Y, GAP_X = 26, 22  # between steps one after another; between branches side by side
PAD, HEAD = 12, 24  # inside a loop's frame; its header line
LOOP_LANE = 18  # right of a loop's body, where the arrow goes back up
JOIN_H = 8  # the bar a parallel group's branches join on
TERMINAL = 14  # the start and end dots
LABEL_CHARS = 28

KIND_WORDS: dict[str, str] = {
    domain.RUN_COMMAND: "command",
    domain.DISPATCH_TASK: "agent",
    domain.SLEEP: "sleep",
    domain.SLEEP_UNTIL: "sleep until",
    domain.HUMAN_GATE: "human gate",
    domain.WAIT_FOR_EVENT: "wait for event",
    domain.WORKFLOW: "workflow",
    domain.CONDITIONAL: "if",
    domain.PARALLEL: "parallel",
    domain.FOREACH: "foreach",
    domain.REPEAT: "repeat",
}
FILLS: dict[str, str] = {
    domain.RUN_COMMAND: "#ddf4ff",
    domain.DISPATCH_TASK: "#fbefff",
    domain.SLEEP: "#eaf5ff",
    domain.SLEEP_UNTIL: "#eaf5ff",
    domain.HUMAN_GATE: "#fff8c5",
    domain.WAIT_FOR_EVENT: "#fff1e5",
    domain.WORKFLOW: "#dafbe1",
    domain.CONDITIONAL: "#f6f8fa",
    domain.PARALLEL: "#f6f8fa",
}


@dataclass
class Shape:
    """A step's place: x, y its top left corner."""

    step: str
    kind: str
    x: float
    y: float
    w: float
    h: float


@dataclass
class Node(Shape):
    title: str  # the step id
    sub: str  # what it does, cut
    tip: str  # the same in full, with its condition
    href: str | None = None


@dataclass
class Frame(Shape):
    """A loop around its body; the arrow back up runs down its right side."""

    label: str
    tip: str


@dataclass
class Line:
    points: list[tuple[float, float]]
    label: str = ""
    arrow: bool = True
    css: str = "tl-gedge"


@dataclass
class Box:
    """A laid-out part of the graph, from its own origin; entered at the top and left at the
    bottom, both at its centre."""

    w: float
    h: float
    nodes: list[Node] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    bars: list[tuple[float, float, float, float]] = field(default_factory=list)  # joins, dots

    def place(self, into: Box, dx: float, dy: float) -> None:
        """Copy this box's shapes into another, moved by (dx, dy)."""
        for n in self.nodes:
            into.nodes.append(Node(**{**n.__dict__, "x": n.x + dx, "y": n.y + dy}))
        for f in self.frames:
            into.frames.append(Frame(**{**f.__dict__, "x": f.x + dx, "y": f.y + dy}))
        for ln in self.lines:
            moved = [(x + dx, y + dy) for x, y in ln.points]
            into.lines.append(Line(moved, ln.label, ln.arrow, ln.css))
        into.bars.extend((x + dx, y + dy, w, h) for x, y, w, h in self.bars)


def cut(text: str, limit: int = LABEL_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def layout(steps: list[dict[str, Any]]) -> Box:
    """The whole graph: a start dot, the steps, an end dot."""
    body = _sequence(steps)
    w = max(body.w, TERMINAL)
    box = Box(w=w, h=TERMINAL + GAP_Y + body.h + GAP_Y + TERMINAL)
    cx = w / 2
    box.bars.append((cx - TERMINAL / 2, 0, TERMINAL, TERMINAL))
    body.place(box, (w - body.w) / 2, TERMINAL + GAP_Y)
    end_y = TERMINAL + GAP_Y + body.h + GAP_Y
    box.bars.append((cx - TERMINAL / 2, end_y, TERMINAL, TERMINAL))
    if body.h:
        box.lines.append(Line([(cx, TERMINAL), (cx, TERMINAL + GAP_Y)]))
        box.lines.append(Line([(cx, end_y - GAP_Y), (cx, end_y)]))
    else:
        box.lines.append(Line([(cx, TERMINAL), (cx, end_y)]))
    return box


def _sequence(steps: list[dict[str, Any]]) -> Box:
    """Steps one after another, centred on one axis, an arrow between each two."""
    parts = [_step(s) for s in steps]
    if not parts:
        return Box(w=0, h=0)
    w = max(p.w for p in parts)
    box = Box(w=w, h=sum(p.h for p in parts) + GAP_Y * (len(parts) - 1))
    y = 0.0
    for i, part in enumerate(parts):
        if i:
            box.lines.append(Line([(w / 2, y - GAP_Y), (w / 2, y)]))
        part.place(box, (w - part.w) / 2, y)
        y += part.h + GAP_Y
    return box


def _step(step: dict[str, Any]) -> Box:
    kind = kind_of(step)
    if kind == domain.CONDITIONAL:
        columns = [(name, _sequence(step.get(name) or [])) for name in ("then", "else")]
        return _fan(step, kind, columns, join=False)
    if kind == domain.PARALLEL:
        columns = [(str(name), _sequence(branch)) for name, branch in branches_of(step)]
        return _fan(step, kind, columns, join=True)
    if kind in (domain.FOREACH, domain.REPEAT):
        return _loop(step, kind)
    return _leaf(step, kind)


def _what(step: dict[str, Any], kind: str) -> str:
    """What a step does, in a few words."""
    if kind == domain.CONDITIONAL:
        return f"if {step.get('if', '')}"
    if kind == domain.PARALLEL:
        return f"parallel · {step.get('completion') or 'all'}"
    if kind == domain.WAIT_FOR_EVENT:
        value = step.get(kind)
        return "event " + (", ".join(value) if isinstance(value, list) else str(value))
    if kind == domain.WORKFLOW:
        return f"workflow {step.get('workflow')}"
    return f"{KIND_WORDS.get(kind, kind)}: {step.get(kind, '')}"


def _node(step: dict[str, Any], kind: str, x: float = 0, y: float = 0) -> Node:
    what = _what(step, kind)
    condition = step.get("if") if kind != domain.CONDITIONAL else None
    tip = f"{step['id']} · {what}" + (f" · only if {condition}" if condition else "")
    sub = ("if … · " if condition else "") + what
    href = recipe_url(step["workflow"]) if kind == domain.WORKFLOW else None
    return Node(step["id"], kind, x, y, NODE_W, NODE_H, step["id"], cut(sub), tip, href)


def _leaf(step: dict[str, Any], kind: str) -> Box:
    return Box(w=NODE_W, h=NODE_H, nodes=[_node(step, kind)])


def _fan(step: dict[str, Any], kind: str, columns: list[tuple[str, Box]], join: bool) -> Box:
    """A step that splits into columns side by side (if/else, parallel) and meets again below."""
    widths = [max(c.w, NODE_W * 0.5) for _, c in columns]
    inner_w = sum(widths) + GAP_X * (len(columns) - 1)
    w = max(NODE_W, inner_w)
    rows_h = max((c.h for _, c in columns), default=0)
    top = NODE_H + GAP_Y + 10  # room for the branch's name above its first step
    meet_y = top + rows_h + GAP_Y
    box = Box(w=w, h=meet_y + JOIN_H)
    box.nodes.append(_node(step, kind, (w - NODE_W) / 2, 0))
    fork_y = NODE_H + GAP_Y / 2
    x = (w - inner_w) / 2
    cx = w / 2
    box.lines.append(Line([(cx, NODE_H), (cx, fork_y)], arrow=False))
    for (name, column), width in zip(columns, widths, strict=True):
        mid = x + width / 2
        column.place(box, x + (width - column.w) / 2, top)
        if column.h:
            box.lines.append(Line([(cx, fork_y), (mid, fork_y), (mid, top)], label=name))
            box.lines.append(Line([(mid, top + column.h), (mid, meet_y)], arrow=False))
        else:  # an if without else, or an empty branch: straight past
            box.lines.append(Line([(cx, fork_y), (mid, fork_y), (mid, meet_y)], label=name))
        x += width + GAP_X
    mids = _mids(w, inner_w, widths)
    if join:
        box.bars.append((mids[0] - 6, meet_y, mids[-1] - mids[0] + 12, JOIN_H))
    else:
        box.lines.append(Line([(mids[0], meet_y), (mids[-1], meet_y)], arrow=False))
        box.bars.append((cx - JOIN_H / 2, meet_y, JOIN_H, JOIN_H))
    return box


def _mids(w: float, inner_w: float, widths: list[float]) -> list[float]:
    out, x = [], (w - inner_w) / 2
    for width in widths:
        out.append(x + width / 2)
        x += width + GAP_X
    return out


def _loop(step: dict[str, Any], kind: str) -> Box:
    """A frame around the loop's body, its header saying what it loops over; an arrow from the
    body's end back to its start."""
    body = _sequence((step.get("steps") if kind == domain.FOREACH else step.get("repeat")) or [])
    inner_w = max(body.w, NODE_W)
    w = inner_w + 2 * PAD + LOOP_LANE
    h = HEAD + PAD + body.h + PAD
    if kind == domain.FOREACH:
        label = f"{step['id']} · foreach {step.get('foreach', '')}"
        at_once = step.get("max_parallel") or 1
        tip = label + (f" · {at_once} items at once" if at_once > 1 else " · one item at a time")
        back = "next item"
    else:
        label = f"{step['id']} · repeat until {step.get('until', '')}"
        tip = label + f" · at most {step.get('max_iterations')} times"
        back = "again"
    box = Box(w=w, h=h)
    box.frames.append(Frame(step["id"], kind, 0, 0, w, h, cut(label, 40), tip))
    x0 = PAD + (inner_w - body.w) / 2
    body.place(box, x0, HEAD + PAD)
    if body.h:
        cx, lane = PAD + inner_w / 2, w - LOOP_LANE / 2
        bottom, top = HEAD + PAD + body.h, HEAD + PAD
        box.lines.append(
            Line(
                [
                    (cx, bottom),
                    (cx, bottom + PAD / 2),
                    (lane, bottom + PAD / 2),
                    (lane, top - 6),
                    (cx, top - 6),
                ],
                label=back,
                css="tl-gedge tl-gloop",
            )
        )
    return box


# -- drawing -------------------------------------------------------------------------------------
STYLE = """<style>
.tl-graph-wrap { overflow: auto; max-height: 720px; }
.tl-graph text { font-family: system-ui, sans-serif; }
.tl-gnode rect, .tl-gnode polygon { stroke: #57606a; stroke-width: 1; }
.tl-gnode .tl-gtitle { font-size: 12px; font-weight: 600; fill: #1f2328; }
.tl-gnode .tl-gsub { font-size: 10px; fill: #57606a; }
.tl-gedge { fill: none; stroke: #8c959f; stroke-width: 1.2; }
.tl-gloop { stroke-dasharray: 4 3; }
.tl-glabel { font-size: 10px; fill: #57606a; }
.tl-gframe { fill: none; stroke: #8250df; stroke-dasharray: 5 3; rx: 8; }
.tl-gframe-label { font-size: 11px; fill: #8250df; font-weight: 600; }
.tl-gbar { fill: #57606a; }
</style>"""


def _shape(n: Node) -> str:
    """A step's outline: a gate a hexagon, a condition a diamond-ended box, others rounded."""
    x, y, w, h = n.x, n.y, n.w, n.h
    fill = FILLS.get(n.kind, "#ffffff")
    if n.kind == domain.HUMAN_GATE:
        d = 10
        pts = [(x + d, y), (x + w - d, y), (x + w, y + h / 2), (x + w - d, y + h)]
        pts += [(x + d, y + h), (x, y + h / 2)]
        return f'<polygon points="{_pts(pts)}" fill="{fill}"/>'
    if n.kind == domain.CONDITIONAL:
        d = 16
        pts = [(x + d, y), (x + w - d, y), (x + w, y + h / 2), (x + w - d, y + h)]
        pts += [(x + d, y + h), (x, y + h / 2)]
        return f'<polygon points="{_pts(pts)}" fill="{fill}" stroke-dasharray="3 2"/>'
    radius = 12 if n.kind in domain.SLEEP_KINDS else 5
    double = ""
    if n.kind == domain.WORKFLOW:  # a workflow of its own inside: a second outline
        double = (
            f'<rect x="{x + 3:.1f}" y="{y + 3:.1f}" width="{w - 6:.1f}" height="{h - 6:.1f}" '
            f'rx="3" fill="none"/>'
        )
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{radius}" '
        f'fill="{fill}"/>' + double
    )


def _pts(points: list[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def _line_label(ln: Line) -> str:
    """A branch's name beside the line into it; a loop's word up its way back, along the line."""
    text = html.escape(ln.label)
    if "tl-gloop" in ln.css:  # the lane's upward run: points 2 to 3
        (x, low), (_, high) = ln.points[2], ln.points[3]
        y = (low + high) / 2
        return (
            f'<text class="tl-glabel" x="{x - 6:.1f}" y="{y:.1f}" text-anchor="middle" '
            f'transform="rotate(-90 {x - 6:.1f} {y:.1f})">{text}</text>'
        )
    x, y = ln.points[-2] if len(ln.points) > 2 else ln.points[0]
    return f'<text class="tl-glabel" x="{x + 4:.1f}" y="{y + 12:.1f}">{text}</text>'


def svg(box: Box, margin: float = 16) -> str:
    """The laid-out graph as one SVG (in a scrolling frame when it is large)."""
    w, h = box.w + 2 * margin, box.h + 2 * margin
    out = [
        STYLE,
        '<div class="tl-graph-wrap">',
        f'<svg class="tl-graph" id="tl-graph" xmlns="http://www.w3.org/2000/svg" '
        f'width="{w:.0f}" height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}">',
        '<defs><marker id="tl-garrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#8c959f"/></marker></defs>',
        f'<g transform="translate({margin},{margin})">',
    ]
    for f in box.frames:
        out.append(
            f'<g class="tl-gloopframe" data-step="{html.escape(f.step, quote=True)}" '
            f'data-kind="{f.kind}"><title>{html.escape(f.tip)}</title>'
            f'<rect class="tl-gframe" x="{f.x:.1f}" y="{f.y:.1f}" width="{f.w:.1f}" '
            f'height="{f.h:.1f}"/><text class="tl-gframe-label" x="{f.x + 8:.1f}" '
            f'y="{f.y + 16:.1f}">{html.escape(f.label)}</text></g>'
        )
    for ln in box.lines:
        marker = ' marker-end="url(#tl-garrow)"' if ln.arrow else ""
        out.append(f'<polyline class="{ln.css}" points="{_pts(ln.points)}"{marker}/>')
        if ln.label:
            out.append(_line_label(ln))
    for x, y, bw, bh in box.bars:
        out.append(
            f'<rect class="tl-gbar" x="{x:.1f}" y="{y:.1f}" width="{bw:.1f}" height="{bh:.1f}" '
            f'rx="{min(bw, bh) / 2:.1f}"/>'
        )
    for n in box.nodes:
        body = (
            f"<title>{html.escape(n.tip)}</title>{_shape(n)}"
            f'<text class="tl-gtitle" x="{n.x + n.w / 2:.1f}" y="{n.y + 17:.1f}" '
            f'text-anchor="middle">{html.escape(cut(n.title, 26))}</text>'
            f'<text class="tl-gsub" x="{n.x + n.w / 2:.1f}" y="{n.y + 32:.1f}" '
            f'text-anchor="middle">{html.escape(n.sub)}</text>'
        )
        if n.href:
            body = f'<a href="{html.escape(n.href, quote=True)}">{body}</a>'
        out.append(
            f'<g class="tl-gnode" data-step="{html.escape(n.step, quote=True)}" '
            f'data-kind="{n.kind}">{body}</g>'
        )
    out.append("</g></svg></div>")
    return "".join(out)


def graph_html(steps: list[dict[str, Any]]) -> str:
    return svg(layout(steps))
