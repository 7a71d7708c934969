"""Charts drawn on the server as inline SVG (the dashboard): no script, no library, nothing
fetched. Every text that came from production (a version, a metric, a slice value) is escaped
here, and every link is a path of this workspace or of the configured Dagster webserver."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta

from markupsafe import Markup, escape

from rag_loop.workspace.security import shown

COLOURS = ("#1f6fb2", "#c2412d", "#2e8b57", "#7b4fb0", "#d08a00", "#6b6b6b")
STATE_COLOURS = {"met": "#2e8b57", "WARN": "#d08a00", "ERROR": "#c2412d", "not evaluated": "#c9c9c9"}
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 210, 52, 12, 30, 26


@dataclass
class Series:
    name: str
    values: Mapping[str, float | None]  # by ISO day
    band: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)  # interval by day
    bars: bool = False
    links: Mapping[str, str] = field(default_factory=dict)  # a point's link, by day


def _text(value: object) -> Markup:
    """A text in the SVG: bidi controls made visible (`shown`), at most 200 characters, escaped."""
    return escape(shown(value, 200))


def days_between(first: str, last: str) -> list[str]:
    start, end = date.fromisoformat(first), date.fromisoformat(last)
    return [(start + timedelta(days=i)).isoformat() for i in range((end - start).days + 1)]


def _x(days: Sequence[str], day: str) -> float:
    """The middle of the day's slot: a bar of the first or last day stays inside the plot."""
    slot = (WIDTH - LEFT - RIGHT) / max(len(days), 1)
    return LEFT + slot * (days.index(day) + 0.5)


def _y(value: float, scale: tuple[float, float]) -> float:
    low, high = scale
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - (value - low) / (high - low)) if high > low else HEIGHT - BOTTOM


def _number(value: float, percent: bool) -> str:
    if percent:
        return f"{value * 100:.1f}%".replace(".0%", "%")
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _scale(series: Sequence[Series], percent: bool, floor: Sequence[float] = ()) -> tuple[float, float]:
    """The value axis: 0 to a round top; a rate from 0 to 100%, or for lines only (`floor`: the
    other values shown, such as targets) from the 10% step below the lowest value, so a pass
    rate between 80% and 95% is not drawn flat."""
    values = [v for s in series for v in s.values.values() if v is not None] + \
        [lo for s in series for lo, _ in s.band.values() if lo is not None] + list(floor)
    if percent:
        lowest = min(values, default=0.0)
        if any(s.bars for s in series):
            return 0.0, 1.0
        return max([low for low in (0.0, 0.2, 0.6, 0.8) if low <= lowest - 0.02], default=0.0), 1.0
    highest = max([v for s in series for v in s.values.values() if v is not None]
                  + [hi for s in series for _, hi in s.band.values() if hi is not None] + [0.0])
    return 0.0, nice_top(highest)


def nice_top(highest: float) -> float:
    """The smallest round number (1, 2, 4 or 5 times a power of ten, times 4 for the ticks at
    quarters) at or above `highest`: axes read 0, 25, 50, 75, 100, not 0, 21.7, 43.5."""
    if highest <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(highest / 4))
    for step in (1, 2, 2.5, 5, 10):
        if 4 * step * power >= highest:
            return 4 * step * power
    return 40 * power


def _ticks(days: Sequence[str]) -> list[tuple[int, str]]:
    """The days labelled on an axis: about seven, evenly, and the last one when it has room."""
    every = max(1, math.ceil(len(days) / 8))
    shown = [(i, d) for i, d in enumerate(days) if i % every == 0]
    if days and shown[-1][0] != len(days) - 1 and len(days) - 1 - shown[-1][0] >= max(2, every / 2):
        shown.append((len(days) - 1, days[-1]))
    return shown


def _frame(days: Sequence[str], scale: tuple[float, float], percent: bool, label: str) -> list[str]:
    parts = [f'<title>{_text(label)}</title>',
             f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>']
    for step in range(5):
        value = scale[0] + (scale[1] - scale[0]) * step / 4
        y = _y(value, scale)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>')
        parts.append(f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
                     f'{_text(_number(value, percent))}</text>')
    for _, day in _ticks(days):
        parts.append(f'<text x="{_x(days, day):.1f}" y="{HEIGHT - 8}" text-anchor="middle" class="tick">'
                     f"{_text(day[5:])}</text>")
    return parts


def _legend(series: Sequence[Series]) -> list[str]:
    parts, x = [], LEFT
    for i, s in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        parts.append(f'<rect x="{x}" y="8" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{x + 14}" y="17" class="legend">{_text(s.name)}</text>')
        x += 24 + 7 * len(s.name)
    return parts


def _point(body: str, link: str | None) -> str:
    return f'<a href="{escape(link)}">{body}</a>' if link else body


def time_chart(days: Sequence[str], series: Sequence[Series], label: str, percent: bool = False,
               targets: Mapping[str, float] | None = None) -> Markup:
    """Lines (or bars) over `days`, one colour per series, intervals as shaded bands, each point
    with its value on hover; `targets`: a series' target (an SLO) as a dashed line in its colour."""
    targets = {name: t for name, t in (targets or {}).items() if any(s.name == name for s in series)}
    scale = _scale(series, percent, list(targets.values()))
    parts = _frame(days, scale, percent, label)
    bar_series = [s for s in series if s.bars]
    slot = (WIDTH - LEFT - RIGHT) / max(len(days), 1)
    for i, s in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        band = [(d, s.band[d]) for d in days if d in s.band and None not in s.band[d]]
        if band:
            upper = " ".join(f"{_x(days, d):.1f},{_y(hi, scale):.1f}" for d, (_, hi) in band)
            lower = " ".join(f"{_x(days, d):.1f},{_y(lo, scale):.1f}" for d, (lo, _) in reversed(band))
            parts.append(f'<polygon points="{upper} {lower}" fill="{colour}" fill-opacity="0.15" stroke="none"/>')
        known = [(d, s.values[d]) for d in days if s.values.get(d) is not None]
        if s.bars:
            width = max(2.0, slot * 0.8 / len(bar_series))
            offset = (bar_series.index(s) - (len(bar_series) - 1) / 2) * width
            for d, v in known:
                x, y = _x(days, d) + offset - width / 2, _y(v, scale)
                parts.append(_point(f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" '
                                    f'height="{HEIGHT - BOTTOM - y:.1f}" fill="{colour}">'
                                    f'<title>{_text(f"{d} · {s.name}: {_number(v, percent)}")}</title></rect>',
                                    s.links.get(d)))
            continue
        if len(known) > 1:
            line = " ".join(f"{_x(days, d):.1f},{_y(v, scale):.1f}" for d, v in known)
            parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for d, v in known:
            interval = s.band.get(d)
            extra = f" [{_number(interval[0], percent)}, {_number(interval[1], percent)}]" \
                if interval and None not in interval else ""
            parts.append(_point(f'<circle cx="{_x(days, d):.1f}" cy="{_y(v, scale):.1f}" r="3.5" fill="{colour}">'
                                f'<title>{_text(f"{d} · {s.name}: {_number(v, percent)}{extra}")}</title></circle>',
                                s.links.get(d)))
    for i, s in enumerate(series):
        if s.name in targets:
            y, tip = _y(targets[s.name], scale), f"{s.name} target {_number(targets[s.name], percent)}"
            parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                         f'stroke="{COLOURS[i % len(COLOURS)]}" stroke-dasharray="6 4" stroke-width="1.5">'
                         f'<title>{_text(tip)}</title></line>')
    parts += _legend(series)
    return _svg(parts, label)


def state_strip(days: Sequence[str], states: Mapping[str, Mapping[str, str]], label: str) -> Markup:
    """One cell per day coloured by the SLO's state (met, WARN, ERROR, not evaluated); a day
    without a verdict is blank."""
    height = 64
    slot = (WIDTH - LEFT - RIGHT) / max(len(days), 1)
    parts = [f'<title>{_text(label)}</title>', f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#fff"/>']
    for i, day in enumerate(days):
        x = LEFT + i * slot
        state = states.get(day)
        colour = STATE_COLOURS.get(state["state"], "#c9c9c9") if state else "#f4f4f4"
        tip = f"{day}: {state['state']} — {state['note']}" if state else f"{day}: no verdict"
        parts.append(f'<rect x="{x + 1:.1f}" y="8" width="{max(slot - 2, 1):.1f}" height="26" fill="{colour}">'
                     f'<title>{_text(tip)}</title></rect>')
    for i, day in _ticks(days):
        parts.append(f'<text x="{LEFT + (i + 0.5) * slot:.1f}" y="52" text-anchor="middle" class="tick">'
                     f"{_text(day[5:])}</text>")
    parts.append(f'<text x="{LEFT - 4}" y="26" text-anchor="end" class="tick">SLO</text>')
    return _svg(parts, label, height)


def slice_chart(rows: Sequence[Mapping], label: str, link: str | None = None) -> Markup:
    """Horizontal bars under a heading per metric: each slice value's pass rate (labelled by the
    value and n; the slice's columns on hover), its interval as a whisker and the metric's
    target as a dashed tick."""
    row_height, left = 22, 230
    metrics = list(dict.fromkeys(row["metric"] for row in rows))
    height = TOP + row_height * (len(rows) + len(metrics)) + 8
    span = WIDTH - left - RIGHT
    parts = [f'<title>{_text(label)}</title>', f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#fff"/>']
    for step in range(5):
        x = left + span * step / 4
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 6}" y2="{height - 8}" stroke="#e4e4e4"/>'
                     f'<text x="{x:.1f}" y="{TOP - 10}" text-anchor="middle" class="tick">{step * 25}%</text>')
    y = TOP
    for metric in metrics:
        parts.append(f'<text x="8" y="{y + 15}" class="legend heading">{_text(metric)}</text>')
        y += row_height
        for row in (r for r in rows if r["metric"] == metric):
            rate = row["pass_rate"] or 0.0
            value = str(row["slice_value"])
            label_text = (value if len(value) <= 28 else value[:27] + "…") + f" (n={row['n']})"
            tip = (f"{metric} · {row['slice']} = {value}: {_number(rate, True)} "
                   f"[{_number(row['ci_low'], True)}, {_number(row['ci_high'], True)}] n={row['n']}"
                   + (f", target {_number(row['target'], True)}" if row.get("target") is not None else ""))
            below = row.get("target") is not None and row["ci_high"] < row["target"]
            colour = "#c2412d" if below else COLOURS[0]
            body = (f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" class="legend">{_text(label_text)}'
                    f'<title>{_text(tip)}</title></text>'
                    f'<rect x="{left}" y="{y + 4}" width="{span * rate:.1f}" height="13" fill="{colour}" '
                    f'fill-opacity="0.8"><title>{_text(tip)}</title></rect>'
                    f'<line x1="{left + span * row["ci_low"]:.1f}" x2="{left + span * row["ci_high"]:.1f}" '
                    f'y1="{y + 10.5}" y2="{y + 10.5}" stroke="#222" stroke-width="1.5"/>')
            if row.get("target") is not None:
                tx = left + span * row["target"]
                body += (f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{y + 2}" y2="{y + 19}" stroke="#222" '
                         'stroke-dasharray="3 2"/>')
            parts.append(_point(body, link))
            y += row_height
    return _svg(parts, label, height)


def timeline(days: Sequence[str], lanes: Sequence[tuple[str, Sequence[Mapping]]], label: str) -> Markup:
    """One lane per kind of change; each event a marker on its day (`day`, `text`, `link`,
    `colour`), with what it is on hover."""
    lane_height = 28
    height = TOP + lane_height * len(lanes) + 24
    parts = [f'<title>{_text(label)}</title>', f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#fff"/>']
    left = 120
    span = WIDTH - left - RIGHT

    def x_of(day: str) -> float:
        return left + (span / 2 if len(days) == 1 else span * days.index(day) / (len(days) - 1))
    for i, (name, events) in enumerate(lanes):
        y = TOP + i * lane_height
        parts.append(f'<line x1="{left}" x2="{WIDTH - RIGHT}" y1="{y + 10}" y2="{y + 10}" stroke="#e4e4e4"/>'
                     f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" class="legend">{_text(name)}</text>')
        stacked: dict[str, int] = {}
        for event in events:
            if event["day"] not in days:
                continue
            k = stacked[event["day"]] = stacked.get(event["day"], -1) + 1
            x = x_of(event["day"]) + 4 * k
            parts.append(_point(f'<rect x="{x - 5:.1f}" y="{y + 4}" width="10" height="12" rx="2" '
                                f'fill="{event.get("colour", COLOURS[0])}" stroke="#fff">'
                                f'<title>{_text(event["day"] + " · " + event["text"])}</title></rect>',
                                event.get("link")))
    for _, day in _ticks(days):
        parts.append(f'<text x="{x_of(day):.1f}" y="{height - 8}" text-anchor="middle" class="tick">'
                     f"{_text(day[5:])}</text>")
    return _svg(parts, label, height)


def _svg(parts: Sequence[str], label: str, height: int = HEIGHT) -> Markup:
    return Markup(f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
                  f'role="img" aria-label="{_text(label)}" xmlns="http://www.w3.org/2000/svg">'
                  + "".join(parts) + "</svg>")
