"""The fleet at a glance (index.html): deployments by bottleneck, the actions ranked across the
fleet, each deployment's replicas and where they disagree, links to the per-deployment reports.
Self-contained like report.html.j2: inline CSS and SVG, no script, every string escaped."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kbopt.engine.lang.text import fmt
from kbopt.reports.html import _environment

if TYPE_CHECKING:
    from kbopt.fleet import Fleet

BOTTLENECKS = ("memory_capacity", "memory_bandwidth", "compute_capacity", "unknown", "no advice")
COLOURS = {"memory_capacity": "#a3262a", "memory_bandwidth": "#8a5a00", "compute_capacity": "#2b5fb8",
           "unknown": "#5b6475", "no advice": "#b7bdc8"}
# advice/2 may give confidence as a word or a number; as a weight on an estimated gain:
CONFIDENCE = {"high": 1.0, "medium": 0.6, "low": 0.3}


@dataclass
class Action:
    """One strategy across the fleet: where it is advised and what it is expected to bring."""
    id: str
    title: str
    deployments: list[str] = field(default_factory=list)
    replicas: int = 0
    weight: float = 0.0             # sum of the strategy's weight times replicas (the fallback ranking)
    score: float = 0.0              # sum of the best relative estimated gain times confidence times replicas
    expected: list[str] = field(default_factory=list)   # "deployment: metric before -> after unit"


def _confidence(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0.0, min(1.0, float(value)))
    return CONFIDENCE.get(str(value).lower(), 0.5)


def _gain(item: dict[str, Any]) -> float:
    """Relative size of an expected change, |after - before| / |before|, weighted by confidence."""
    before, after = item.get("before"), item.get("after")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (before, after)) or not before:
        return 0.0
    return abs(after - before) / abs(before) * _confidence(item.get("confidence"))


def expected_text(item: dict[str, Any]) -> str:
    unit = f" {item['unit']}" if item.get("unit") else ""
    confidence = f" ({item['confidence']} confidence)" if item.get("confidence") is not None else ""
    return f"{item.get('metric', '?')} {fmt(item.get('before'))} → {fmt(item.get('after'))}{unit}{confidence}"


def ranked_actions(fleet: Fleet) -> tuple[list[Action], bool]:
    """Strategies across deployments, by estimated gain (advice/2's per-strategy `expected`) where
    any deployment has one, then by weight; the flag says whether any estimate was there."""
    actions: dict[str, Action] = {}
    for deployment in fleet.deployments:
        if deployment.advice is None:
            continue
        replicas = len(deployment.replicas)
        as_json = deployment.advice.to_dict()["strategies"]
        for strategy, raw in zip(deployment.advice.strategies, as_json, strict=True):
            action = actions.setdefault(strategy.id, Action(strategy.id, strategy.title))
            action.deployments.append(deployment.name)
            action.replicas += replicas
            action.weight += strategy.weight * replicas
            expected = [item for item in raw.get("expected") or () if isinstance(item, dict)]
            if expected:
                action.score += max(_gain(item) for item in expected) * replicas
                action.expected.extend(f"{deployment.name}: {expected_text(item)}" for item in expected)
    ordered = sorted(actions.values(), key=lambda a: (-a.score, -a.weight, a.id))
    return ordered, any(a.score > 0 for a in ordered)


@dataclass(frozen=True)
class Bar:
    label: str
    deployments: int
    replicas: int
    y: int
    width: float
    colour: str


def bottleneck_bars(fleet: Fleet, width: int = 420) -> list[Bar]:
    counts: dict[str, list[int]] = {}
    for deployment in fleet.deployments:
        key = deployment.advice.bottleneck if deployment.advice else "no advice"
        entry = counts.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += len(deployment.replicas)
    most = max((c[0] for c in counts.values()), default=1)
    keys = [k for k in BOTTLENECKS if k in counts] + sorted(k for k in counts if k not in BOTTLENECKS)
    return [Bar(key.replace("_", " "), counts[key][0], counts[key][1], 10 + 34 * index,
                round(max(4.0, width * counts[key][0] / most), 1), COLOURS.get(key, "#5b6475"))
            for index, key in enumerate(keys)]


def plain(value: Any) -> str:
    """An advice/2 `estimates` or `plan` entry of a shape this page does not know, as text."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {plain(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(plain(v) for v in value)
    return fmt(value) if not isinstance(value, str) else value


def render_index(fleet: Fleet) -> str:
    env = _environment()
    env.globals.update(plain=plain, expected_text=expected_text)
    actions, estimated = ranked_actions(fleet)
    bars = bottleneck_bars(fleet)
    return env.get_template("fleet.html.j2").render(
        fleet=fleet, summary=fleet.summary(), actions=actions, estimated=estimated, bars=bars,
        chart_height=20 + 34 * max(len(bars), 1),
        advice_json={d.name: d.advice.to_dict() for d in fleet.deployments if d.advice is not None})
