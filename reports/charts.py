"""Geometry of the HTML report's model charts (a roofline, a memory bar), from an Advice alone.

A chart is drawn only from what the advice holds: the GPU's roofs from its facts, the operating
point and the memory split from the estimates, each strategy's point from its expected gains
(an estimate a strategy does not move stays where it is). What is missing is named instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kbopt.engine.advice.model import Advice, StrategyAdvice
from kbopt.engine.advice.whatif import number

WIDTH, HEIGHT = 560, 320
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 40       # plot margins, px


@dataclass(frozen=True)
class Point:
    label: str
    intensity: float               # FLOP/byte
    flops: float                   # achieved FLOP/s
    x: float
    y: float
    label_x: float = 0.0           # where its label's text starts (or ends, anchor "end"), px
    label_y: float = 0.0
    anchor: str = "start"
    leader: bool = False           # the label sits a line or more away: a thin line joins it to the point


CHAR_PX, LINE_PX = 6.4, 13         # an 11 px sans-serif label: average glyph width, line height


def _placed(points: list[Point]) -> list[Point]:
    """Each point with a label that overlaps no other label and no point (a newcomer found
    `kv_cache_quantization[fp8]` over `quantization[fp8]`): beside the point, to the right unless
    it would leave the plot, then moved a line up or down, nearest first, until it is clear."""
    boxes: list[tuple[float, float, float, float]] = [(p.x - 6, p.y - 6, p.x + 6, p.y + 6) for p in points]
    out: list[Point] = []
    for point in points:
        width = CHAR_PX * len(point.label)
        right = point.x + 8 + width <= WIDTH - RIGHT
        left_edge = point.x + 8 if right else point.x - 8 - width
        base = point.y + 14 if point.label == "today" else point.y - 6
        for step in sorted(range(-12, 13), key=lambda k: (abs(k), k)):
            y = base + step * LINE_PX
            box = (left_edge, y - LINE_PX + 3, left_edge + width, y + 3)
            if TOP + LINE_PX <= y <= HEIGHT - BOTTOM and not any(
                    box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in boxes):
                break
        else:
            y = base
        boxes.append((left_edge, y - LINE_PX + 3, left_edge + width, y + 3))
        out.append(replace(point, label_x=point.x + 8 if right else point.x - 8, label_y=y,
                           anchor="start" if right else "end", leader=abs(y - base) >= LINE_PX))
    return out


@dataclass(frozen=True)
class Tick:
    text: str
    at: float                      # px along its axis


@dataclass(frozen=True)
class Roofline:
    roof: str                      # SVG path of min(intensity x bandwidth, peak)
    ridge: float                   # FLOP/byte where the roofs meet
    bandwidth_gbps: float
    peak_tflops: float
    now: Point | None
    moves: tuple[Point, ...]       # where each recommended strategy moves the point
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    missing: tuple[str, ...]       # what the operating point needs and the advice lacks


@dataclass(frozen=True)
class Segment:
    label: str
    gib: float
    x: float                       # px
    width: float


@dataclass(frozen=True)
class MemoryBar:
    total_gib: float
    segments: tuple[Segment, ...]
    overflow_gib: float | None
    missing: tuple[str, ...]


def _number_of(advice: Advice, path: str) -> float | None:
    value = advice.facts.get(path, advice.derived.get(path))
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _after(advice: Advice, strategy: StrategyAdvice | None, name: str) -> float | None:
    """An estimate today, or once `strategy` is applied (its gain where it moves it)."""
    if strategy is not None:
        for gain in strategy.expected:
            if gain.metric == name:
                return float(gain.after)
    estimate = advice.estimates.get(name)
    return float(estimate.value) if estimate is not None else None


def _achieved(advice: Advice, strategy: StrategyAdvice | None, bandwidth: float, peak: float) -> tuple[float, float] | None:
    """(intensity, achieved FLOP/s): the roof at that intensity scaled by floor / expected step."""
    intensity = _after(advice, strategy, "arithmetic_intensity")
    floor = _after(advice, strategy, "decode_step_floor_ms")
    expected = _after(advice, strategy, "decode_step_expected_ms")
    if intensity is None or floor is None or not expected or intensity <= 0:
        return None
    return intensity, min(intensity * bandwidth, peak) * floor / expected


def roofline(advice: Advice) -> Roofline | tuple[str, ...] | None:
    """The chart, or the facts and estimates it lacks (a tuple), or None without any model."""
    bandwidth_gbps = _number_of(advice, "hardware.bandwidth_gbps")
    peak_tflops = _number_of(advice, "hardware.fp16_tflops")
    roofs = [p for p, v in (("hardware.bandwidth_gbps", bandwidth_gbps), ("hardware.fp16_tflops", peak_tflops)) if not v]
    if not advice.estimates:
        return None
    if bandwidth_gbps is None or peak_tflops is None or roofs:
        return tuple(roofs)
    bandwidth, peak = bandwidth_gbps * 1e9, peak_tflops * 1e12
    ridge = peak / bandwidth
    now = _achieved(advice, None, bandwidth, peak)
    moved = [(s.key, _achieved(advice, s, bandwidth, peak)) for s in advice.strategies if s.expected]
    points = [p for p in [now, *(m for _, m in moved)] if p is not None]
    low_x = 10 ** math.floor(math.log10(min([ridge] + [p[0] for p in points]) / 4))
    high_x = 10 ** math.ceil(math.log10(max([ridge] + [p[0] for p in points]) * 4))
    low_y = 10 ** math.floor(math.log10(min([low_x * bandwidth] + [p[1] for p in points if p[1] > 0])))
    high_y = 10 ** math.ceil(math.log10(peak * 2))

    def x(value: float) -> float:
        return round(LEFT + (WIDTH - LEFT - RIGHT) * math.log10(value / low_x) / math.log10(high_x / low_x), 1)

    def y(value: float) -> float:
        return round(HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * math.log10(value / low_y) / math.log10(high_y / low_y), 1)

    def point(label: str, at: tuple[float, float]) -> Point:
        return Point(label, at[0], at[1], x(at[0]), y(max(at[1], low_y)))

    roof = f"M{x(low_x)},{y(low_x * bandwidth)} L{x(ridge)},{y(peak)} L{x(high_x)},{y(peak)}"
    missing = () if now else tuple(name for name in ("arithmetic_intensity", "decode_step_floor_ms", "decode_step_expected_ms")
                                   if name not in advice.estimates)
    placed = _placed(([point("today", now)] if now else []) + [point(key, at) for key, at in moved if at is not None])
    return Roofline(
        roof=roof, ridge=ridge, bandwidth_gbps=bandwidth_gbps, peak_tflops=peak_tflops,
        now=placed[0] if now else None,
        moves=tuple(placed[1:] if now else placed),
        x_ticks=tuple(Tick(number(10.0 ** e), x(10.0 ** e))
                      for e in range(round(math.log10(low_x)), round(math.log10(high_x)) + 1)),
        y_ticks=tuple(Tick(f"{number(10.0 ** e / 1e12)} T", y(10.0 ** e))
                      for e in range(round(math.log10(low_y)), round(math.log10(high_y)) + 1)),
        missing=missing)


def memory_bar(advice: Advice) -> MemoryBar | tuple[str, ...] | None:
    """Weights, KV pool and the rest of one GPU's memory; or what is missing; None without a model."""
    if not advice.estimates:
        return None
    total = _number_of(advice, "derived.gpu_memory_gib") or _number_of(advice, "hardware.memory_total_gib")
    weights = _after(advice, None, "weights_gib_per_gpu")
    kv = _after(advice, None, "kv_pool_gib_per_gpu")
    lacking = tuple(name for name, value in (("hardware.memory_total_gib", total), ("weights_gib_per_gpu", weights))
                    if value is None)
    if total is None or weights is None or total <= 0:
        return lacking
    parts = [("weights", weights)] + ([("KV pool", kv)] if kv is not None else [])
    parts.append(("other", max(total - sum(v for _, v in parts), 0.0)))
    scale = (WIDTH - LEFT - RIGHT) / max(total, sum(v for _, v in parts))
    segments, at = [], float(LEFT)
    for name, gib in parts:
        width = round(max(gib, 0.0) * scale, 1)
        segments.append(Segment(name, gib, round(at, 1), width))
        at += width
    return MemoryBar(total, tuple(segments), _after(advice, None, "weights_overflow_gib"),
                     () if kv is not None else ("kv_pool_gib_per_gpu",))
