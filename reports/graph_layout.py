"""Deterministic geometry for drawing the conflict graph as inline SVG.

Rows: chosen strategies, then candidates left out, then the rules that vetoed some; each row
sorted by name. Only geometry lives here; the template draws it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kbopt.engine.advice.model import Advice

CHAR_WIDTH, PADDING, BOX_HEIGHT, ROW_GAP, COLUMN_GAP, MARGIN, ARC_ROOM = 7.2, 18, 30, 80, 22, 16, 40


@dataclass(frozen=True)
class NodeBox:
    key: str
    status: str           # chosen | rejected | veto | absent
    x: float
    y: float
    width: float
    height: float = BOX_HEIGHT

    @property
    def cx(self) -> float:
        return self.x + self.width / 2

    @property
    def cy(self) -> float:
        return self.y + self.height / 2


@dataclass(frozen=True)
class EdgeLine:
    kind: str
    path: str             # SVG path data: a straight line between rows, an arc above a row
    title: str


@dataclass(frozen=True)
class GraphPicture:
    width: float
    height: float
    nodes: tuple[NodeBox, ...]
    edges: tuple[EdgeLine, ...]


def _clip(box: NodeBox, toward_x: float, toward_y: float) -> tuple[float, float]:
    """Where the line from the box centre toward a point leaves the box."""
    dx, dy = toward_x - box.cx, toward_y - box.cy
    if dx == 0 and dy == 0:
        return box.cx, box.cy
    scale = min(box.width / 2 / abs(dx) if dx else math.inf, box.height / 2 / abs(dy) if dy else math.inf)
    return box.cx + dx * scale, box.cy + dy * scale


def layout(advice: Advice) -> GraphPicture:
    status: dict[str, str] = {s.key: "chosen" for s in advice.strategies}
    status.update({r.key: "rejected" for r in advice.rejected})
    for edge in advice.graph:
        for node in (edge.source, edge.target):
            status.setdefault(node, "veto" if node.startswith("veto:") else "absent")
    rows = [sorted(k for k, s in status.items() if s == "chosen"),
            sorted(k for k, s in status.items() if s in ("rejected", "absent")),
            sorted(k for k, s in status.items() if s == "veto")]
    rows = [row for row in rows if row]
    widths = {key: len(key) * CHAR_WIDTH + 2 * PADDING for key in status}
    row_widths = [sum(widths[k] for k in row) + COLUMN_GAP * (len(row) - 1) for row in rows]
    canvas = max(row_widths, default=0) + 2 * MARGIN
    top = MARGIN + ARC_ROOM        # room for arcs between boxes of the first row
    boxes: dict[str, NodeBox] = {}
    for index, row in enumerate(rows):
        x = (canvas - row_widths[index]) / 2
        y = top + index * (BOX_HEIGHT + ROW_GAP)
        for key in row:
            boxes[key] = NodeBox(key, status[key], round(x, 1), y, round(widths[key], 1))
            x += widths[key] + COLUMN_GAP
    edges = tuple(EdgeLine(edge.kind, _path(boxes[edge.source], boxes[edge.target]),
                           f"{edge.source} {edge.kind} {edge.target} ({', '.join(edge.because)})")
                  for edge in advice.graph)
    height = top + MARGIN + len(rows) * BOX_HEIGHT + max(0, len(rows) - 1) * ROW_GAP
    return GraphPicture(round(canvas, 1), height, tuple(boxes[k] for row in rows for k in row), edges)


def _path(a: NodeBox, b: NodeBox) -> str:
    if a.y == b.y:
        # Same row: arc over the boxes in between, so the edge never seems to pass through them.
        rise = min(ARC_ROOM, 14 + 0.12 * abs(b.cx - a.cx))
        return f"M{a.cx:.1f},{a.y:.1f} Q{(a.cx + b.cx) / 2:.1f},{a.y - 2 * rise:.1f} {b.cx:.1f},{b.y:.1f}"
    x1, y1 = _clip(a, b.cx, b.cy)
    x2, y2 = _clip(b, a.cx, a.cy)
    return f"M{x1:.1f},{y1:.1f} L{x2:.1f},{y2:.1f}"
