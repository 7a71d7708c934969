"""The intents map, readable without hovering: a titled panel per language, one circle per
cluster (position from PCA of the centroids, area by production volume, colour by failure
rate), the biggest and the worst clusters named on the map by their typical query, and a
legend for colour and size. The template escapes every text; this module only lays out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

WIDTH, HEIGHT = 900, 460
TOP, LEGEND = 34, 46  # the panels' titles above, the legend below
NAMED_BIGGEST, NAMED_WORST = 4, 3  # clusters named on each panel
NAME_CHARS = 38
MIN_RADIUS, MAX_RADIUS = 4.0, 20.0


@dataclass
class Point:
    cx: float
    cy: float
    r: float
    fill: str
    cluster_id: str
    label: str
    typical_query: str
    language: str
    failure_rate: float
    volume: float
    name: str | None = None  # the typical query, cut, when the map names this cluster
    name_anchor: str = "start"
    name_x: float = 0.0


@dataclass
class Panel:
    language: str
    x: float
    width: float
    title: str


@dataclass
class IntentMap:
    width: int = WIDTH
    height: int = HEIGHT
    panels: list[Panel] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    legend_y: float = HEIGHT - LEGEND + 14
    size_examples: list[tuple[float, float]] = field(default_factory=list)  # (radius, volume)


def failure_colour(rate: float) -> str:
    """Green (no trace with a bad signal) to red (every trace)."""
    return f"rgb({int(60 + 190 * rate)},{int(170 - 120 * rate)},80)"


def _cut(text: str | None) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS - 1].rstrip() + "…"


def _finite(value: object) -> bool:
    try:
        return math.isfinite(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def _number(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def intent_map(clusters: Sequence[dict]) -> IntentMap:
    """Lay out the clusters that have a position (`x`, `y`); the rest are in the table only."""
    placed = [c for c in clusters if _finite(c.get("x")) and _finite(c.get("y"))]
    languages = sorted({str(c["language"]) for c in placed})
    biggest = max((_number(c.get("volume")) for c in placed), default=0.0) or 1.0
    chart = IntentMap()
    bottom = HEIGHT - LEGEND
    for index, language in enumerate(languages):
        mine = [c for c in placed if str(c["language"]) == language]
        width = WIDTH / len(languages)
        left = index * width
        chart.panels.append(Panel(language, left, width,
                                  f"{language}: {len(mine)} intent cluster{'s' if len(mine) != 1 else ''}"))
        xs, ys = [_number(c["x"]) for c in mine], [_number(c["y"]) for c in mine]
        span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
        points = []
        for c, x, y in zip(mine, xs, ys, strict=True):
            failure = min(max(_number(c.get("failure_rate")), 0.0), 1.0)
            volume = _number(c.get("volume"))
            points.append(Point(
                cx=round(left + 40 + (x - min(xs)) / span_x * (width - 80), 1),
                cy=round(TOP + 24 + (y - min(ys)) / span_y * (bottom - TOP - 48), 1),
                r=round(_radius(volume, biggest), 1), fill=failure_colour(failure),
                cluster_id=str(c["cluster_id"]), label=str(c.get("label") or ""),
                typical_query=str(c.get("medoid_query") or ""), language=language,
                failure_rate=failure, volume=volume))
        _name(points, left, width)
        chart.points.extend(points)
    chart.size_examples = [(round(_radius(v, biggest), 1), v) for v in (biggest / 100, biggest / 10, biggest)]
    return chart


def _radius(volume: float, biggest: float) -> float:
    return MIN_RADIUS + (MAX_RADIUS - MIN_RADIUS) * math.sqrt(max(volume, 0.0) / biggest)


def _name(points: list[Point], left: float, width: float) -> None:
    """Name the panel's biggest clusters and its worst (highest failure rate among those with
    at least a tenth of the panel's median volume, so a one-trace cluster does not win), each
    beside its circle toward the panel's middle, or on the other side, or not at all where it
    would cover a name already placed."""
    by_volume = sorted(points, key=lambda p: (-p.volume, p.cluster_id))
    volumes = sorted(p.volume for p in points)
    floor = volumes[len(volumes) // 2] / 10 if volumes else 0.0
    worst = sorted((p for p in points if p.volume >= floor and p.failure_rate > 0),
                   key=lambda p: (-p.failure_rate, -p.volume, p.cluster_id))
    boxes: list[tuple[float, float, float, float]] = []
    for wanted, candidates in ((NAMED_BIGGEST, by_volume), (NAMED_WORST, worst)):
        placed = 0
        for point in candidates:
            if placed == wanted:
                break
            if point.name is not None:
                continue
            name = _cut(point.typical_query or point.label or point.cluster_id)
            toward_middle = "end" if point.cx > left + width / 2 else "start"
            for anchor in (toward_middle, "start" if toward_middle == "end" else "end"):
                x = point.cx - point.r - 3 if anchor == "end" else point.cx + point.r + 3
                box = _box(x, point.cy, anchor, name)
                if box[0] >= left and box[2] <= left + width and not any(_overlap(box, b) for b in boxes):
                    point.name, point.name_anchor, point.name_x = name, anchor, round(x, 1)
                    boxes.append(box)
                    placed += 1
                    break


def _box(x: float, y: float, anchor: str, name: str) -> tuple[float, float, float, float]:
    """The name's box (left, top, right, bottom) at 11 px: about 6 px a character."""
    length = 6.2 * len(name)
    return (x - length, y - 8, x, y + 6) if anchor == "end" else (x, y - 8, x + length, y + 6)


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
