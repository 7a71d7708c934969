"""Charts as PNG bytes (matplotlib, no display), for materialization metadata and reports.

Laid out once, by margins computed from the labels' lengths (no tight_layout, which costs a
third of a chart's CPU by measuring every text on a draw of its own), with few ticks: a chart
is drawn once, when saved. The same chart asked twice in a process (an eval's report and its
asset's metadata) is drawn once."""

from __future__ import annotations

import base64
import hashlib
import io
import pickle
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import cache, wraps
from typing import Any

import numpy as np
import pandas as pd

MARKER_COLORS = {"rag_version": "tab:red", "prompt_version": "tab:purple",
                 "index_version": "tab:brown", "document": "tab:gray"}
DPI = 90
# titles at a fixed height over their axes (none has ticks on top): matplotlib's automatic
# placement measures every tick label of the axes on each draw
TITLE_Y = 1.0
_CHAR = 0.56 / 72  # a character's width in inches per point of font size (DejaVu Sans, wide side)


@cache
def _pyplot():
    """matplotlib's pyplot without a display, imported on the first chart (it takes a third of a
    second, which every Dagster process loading the definitions would otherwise pay)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot
    return matplotlib.pyplot


def _subplots(width: float, height: float, columns: int = 1):
    """A figure of `columns` axes side by side, outside pyplot's registry (nothing to close)."""
    _pyplot()  # the Agg backend, once
    from matplotlib.figure import Figure
    figure = Figure(figsize=(width, height), dpi=DPI)
    axes = figure.subplots(1, columns, squeeze=False)[0]
    return figure, axes


def _margins(figure, left: float, bottom: float, right: float = 0.2, top: float = 0.4,
             between: float = 0.0) -> None:
    """Fixed margins in inches (and `between` side-by-side axes), as fractions of the figure."""
    width, height = figure.get_size_inches()
    columns = len(figure.axes) if between else 1
    panel = (width - left - right - between * (columns - 1)) / columns
    figure.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                           top=1 - top / height, wspace=between / panel if between else 0.2)


def _text_width(labels: Sequence[str], points: float) -> float:
    """The widest label's width in inches, by its length (a bound, not a measurement)."""
    return max((len(str(label)) for label in labels), default=0) * points * _CHAR


def _ticks(count: int, integer: bool = False):
    """At most `count` ticks on an axis (each tick is texts to lay out and draw)."""
    from matplotlib.ticker import MaxNLocator
    return MaxNLocator(count, integer=integer, steps=[1, 2, 2.5, 5, 10])  # round steps, as the default


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)  # nothing to close: not in pyplot's registry
    return buffer.getvalue()


_DRAWN: OrderedDict[tuple, bytes] = OrderedDict()


def _fingerprint(value: Any) -> str:
    """Equal pickles are equal inputs (unequal pickles of equal inputs only miss the cache)."""
    return hashlib.sha1(pickle.dumps(value)).hexdigest()


def _once(chart: Callable[..., bytes]) -> Callable[..., bytes]:
    """The chart's bytes reused when asked again with equal inputs (the last 16 charts)."""
    @wraps(chart)
    def drawn(*args, **kwargs) -> bytes:
        try:
            key = (chart.__name__, _fingerprint((args, sorted(kwargs.items()))))
        except (pickle.PicklingError, TypeError, AttributeError):  # inputs we cannot fingerprint
            return chart(*args, **kwargs)
        png = _DRAWN.get(key)
        if png is None:
            png = _DRAWN[key] = chart(*args, **kwargs)
            while len(_DRAWN) > 16:
                _DRAWN.popitem(last=False)
        return png
    return drawn


def markdown_image(png: bytes, alt: str) -> str:
    """A PNG inlined in markdown (Dagster renders it in the metadata panel)."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


@_once
def bars(values: Mapping[str, float], title: str, xlabel: str = "", top: int = 20) -> bytes:
    """Horizontal bars, largest first."""
    items = sorted(values.items(), key=lambda kv: kv[1], reverse=True)[:top][::-1]
    labels = [str(k)[:45] for k, _ in items]
    figure, (axis,) = _subplots(7, 0.3 * len(items) + 1.2)
    axis.barh(labels, [v for _, v in items], color="tab:blue")
    axis.set_title(title, y=TITLE_Y)
    axis.set_xlabel(xlabel)
    axis.xaxis.set_major_locator(_ticks(5))
    _margins(figure, left=_text_width(labels, 10) + 0.2, bottom=0.75 if xlabel else 0.45, right=0.35)
    return _png(figure)


@_once
def grouped_counts(groups: Mapping[str, Mapping[str, float]], title: str) -> bytes:
    """One bar panel per group (e.g. counts by origin, failure_type, tag)."""
    figure, axes = _subplots(4 * len(groups), 3.2, len(groups))
    longest = 0.0
    for axis, (name, counts) in zip(axes, groups.items()):
        items = sorted(counts.items(), key=lambda kv: -kv[1])[:10]
        labels = [str(k)[:14] for k, _ in items]
        axis.bar(labels, [v for _, v in items], color="tab:green")
        axis.set_title(name, y=TITLE_Y)
        axis.tick_params(axis="x", rotation=45, labelsize=8)
        axis.yaxis.set_major_locator(_ticks(5, integer=True))
        longest = max(longest, _text_width(labels, 8))
    figure.suptitle(title)
    # a label rotated by 45° reaches down by its width / √2 (plus a line's height)
    _margins(figure, left=0.45, bottom=longest / np.sqrt(2) + 0.3, top=0.65, between=0.55)
    return _png(figure)


@_once
def quality_heatmap(table: pd.DataFrame, slice_name: str, value: str = "mean") -> bytes:
    """Metric × slice value heat map (the quality vector per slice), baseline delta in the cell."""
    part = table[table["slice"].isin(["all", slice_name])]
    grid = part.pivot_table(index="metric", columns="slice_value", values=value)
    delta = part.pivot_table(index="metric", columns="slice_value", values="delta_mean")
    if grid.empty:  # no score in this slice: say so, rather than draw an empty image
        figure, (axis,) = _subplots(5, 1.2)
        axis.axis("off")
        axis.text(0.5, 0.5, f"no {value} per metric and {slice_name}", ha="center", va="center")
        return _png(figure)
    title = f"{value} per metric and {slice_name} (second line: vs baseline)"
    columns, rows = [str(c) for c in grid.columns], [str(m) for m in grid.index]
    left = _text_width(rows, 8) + 0.2
    width = max(1.3 * len(columns) + 3, left + 0.9 + _text_width([title], 12))  # the title is over the axes
    figure, (axis,) = _subplots(width, 0.5 * len(grid) + 1.5)
    image = axis.imshow(grid.to_numpy(float), cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    axis.set_xticks(range(len(columns)), columns, rotation=30, ha="right", fontsize=8)
    axis.set_yticks(range(len(rows)), rows, fontsize=8)
    for i, metric in enumerate(grid.index):
        for j, column in enumerate(grid.columns):
            score = grid.loc[metric, column]
            change = delta.loc[metric, column] if metric in delta.index and column in delta.columns else np.nan
            if not np.isnan(score):
                label = f"{score:.2f}" + (f"\n{change:+.2f}" if not np.isnan(change) else "")
                axis.text(j, i, label, ha="center", va="center", fontsize=7)
    axis.set_title(title, y=TITLE_Y)
    # a column label rotated by 30° reaches down by half its width (plus a line's height)
    _margins(figure, left=left, bottom=_text_width(columns, 8) / 2 + 0.3, right=0.7)  # the colour bar
    figure.colorbar(image, ax=axis, fraction=0.03)
    return _png(figure)


@_once
def score_histograms(results: pd.DataFrame, baseline: pd.DataFrame | None) -> bytes:
    """Per metric, the run's score histogram over the baseline's."""
    metrics = sorted(results["metric"].unique())
    figure, axes = _subplots(3 * len(metrics), 2.6, len(metrics))
    bins = np.linspace(0, 1, 11)
    for axis, metric in zip(axes, metrics):
        now = results[(results["metric"] == metric) & ~results["errored"]]["score"].astype(float)
        # one step patch per histogram, not a rectangle per bin (hist's bars: a third of the chart)
        axis.stairs(np.histogram(now, bins)[0], bins, fill=True, alpha=0.7, label="run", color="tab:blue")
        if baseline is not None and len(baseline):
            before = baseline[(baseline["metric"] == metric) & ~baseline["errored"]]["score"].astype(float)
            axis.stairs(np.histogram(before, bins)[0], bins, linewidth=2, label="baseline", color="black")
        axis.set_title(metric, fontsize=8, y=TITLE_Y)
        axis.set_xticks([0, 0.5, 1], ["0", "0.5", "1"])
        axis.yaxis.set_major_locator(_ticks(4, integer=True))
    from matplotlib.legend_handler import HandlerPatch
    from matplotlib.patches import StepPatch
    axes[0].legend(fontsize=7, handler_map={StepPatch: HandlerPatch()})  # boxes, as hist's were
    _margins(figure, left=0.4, bottom=0.35, top=0.3, right=0.15, between=0.45)
    return _png(figure)


@_once
def time_series(frame: pd.DataFrame, columns: Sequence[str], title: str,
                markers: pd.DataFrame | None = None, ylabel: str = "") -> bytes:
    """Daily lines with change markers (deploys, prompts, index builds, document updates)."""
    figure, (axis,) = _subplots(8, 3.2)
    for column in columns:
        axis.plot(pd.to_datetime(frame["day"]), frame[column], marker="o", markersize=3, label=column)
    if markers is not None:
        for row in markers.itertuples():
            axis.axvline(pd.to_datetime(row.day), color=MARKER_COLORS.get(row.kind, "gray"),
                         linestyle="--", linewidth=1)
            axis.text(pd.to_datetime(row.day), axis.get_ylim()[1], f" {row.label}", rotation=90,
                      va="top", fontsize=6, color=MARKER_COLORS.get(row.kind, "gray"))
    axis.set_title(title, y=TITLE_Y)
    axis.set_ylabel(ylabel)
    axis.legend(fontsize=7, loc="lower left")
    axis.yaxis.set_major_locator(_ticks(6))
    for label in axis.get_xticklabels():
        label.set(rotation=30, ha="right")
    # tick labels up to 7 characters (0.00012, 12500.0), and the y label
    _margins(figure, left=1.0 if ylabel else 0.75, bottom=0.85, right=0.2)
    return _png(figure)
