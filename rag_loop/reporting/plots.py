"""Charts as PNG bytes (matplotlib, no display), for materialization metadata and reports."""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from functools import cache

import numpy as np
import pandas as pd

MARKER_COLORS = {"rag_version": "tab:red", "prompt_version": "tab:purple",
                 "index_version": "tab:brown", "document": "tab:gray"}


@cache
def _pyplot():
    """matplotlib's pyplot without a display, imported on the first chart (it takes a third of a
    second, which every Dagster process loading the definitions would otherwise pay)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot
    return matplotlib.pyplot


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    _pyplot().close(figure)
    return buffer.getvalue()


def markdown_image(png: bytes, alt: str) -> str:
    """A PNG inlined in markdown (Dagster renders it in the metadata panel)."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


def bars(values: Mapping[str, float], title: str, xlabel: str = "", top: int = 20) -> bytes:
    """Horizontal bars, largest first."""
    items = sorted(values.items(), key=lambda kv: kv[1], reverse=True)[:top][::-1]
    figure, axis = _pyplot().subplots(figsize=(7, 0.3 * len(items) + 1.2))
    axis.barh([str(k)[:45] for k, _ in items], [v for _, v in items], color="tab:blue")
    axis.set_title(title)
    axis.set_xlabel(xlabel)
    return _png(figure)


def grouped_counts(groups: Mapping[str, Mapping[str, float]], title: str) -> bytes:
    """One bar panel per group (e.g. counts by origin, failure_type, tag)."""
    figure, axes = _pyplot().subplots(1, len(groups), figsize=(4 * len(groups), 3.2), squeeze=False)
    for axis, (name, counts) in zip(axes[0], groups.items()):
        items = sorted(counts.items(), key=lambda kv: -kv[1])[:10]
        axis.bar([str(k)[:14] for k, _ in items], [v for _, v in items], color="tab:green")
        axis.set_title(name)
        axis.tick_params(axis="x", rotation=45, labelsize=8)
    figure.suptitle(title)
    return _png(figure)


def quality_heatmap(table: pd.DataFrame, slice_name: str, value: str = "mean") -> bytes:
    """Metric × slice value heat map (the quality vector per slice), baseline delta in the cell."""
    part = table[table["slice"].isin(["all", slice_name])]
    grid = part.pivot_table(index="metric", columns="slice_value", values=value)
    delta = part.pivot_table(index="metric", columns="slice_value", values="delta_mean")
    if grid.empty:  # no score in this slice: say so, rather than draw an empty image
        figure, axis = _pyplot().subplots(figsize=(5, 1.2))
        axis.axis("off")
        axis.text(0.5, 0.5, f"no {value} per metric and {slice_name}", ha="center", va="center")
        return _png(figure)
    figure, axis = _pyplot().subplots(figsize=(1.3 * len(grid.columns) + 3, 0.5 * len(grid) + 1.5))
    image = axis.imshow(grid.to_numpy(float), cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    axis.set_xticks(range(len(grid.columns)), grid.columns, rotation=30, ha="right", fontsize=8)
    axis.set_yticks(range(len(grid.index)), grid.index, fontsize=8)
    for i, metric in enumerate(grid.index):
        for j, column in enumerate(grid.columns):
            score = grid.loc[metric, column]
            change = delta.loc[metric, column] if metric in delta.index and column in delta.columns else np.nan
            if not np.isnan(score):
                label = f"{score:.2f}" + (f"\n{change:+.2f}" if not np.isnan(change) else "")
                axis.text(j, i, label, ha="center", va="center", fontsize=7)
    axis.set_title(f"{value} per metric and {slice_name} (second line: vs baseline)")
    figure.colorbar(image, ax=axis, fraction=0.03)
    return _png(figure)


def score_histograms(results: pd.DataFrame, baseline: pd.DataFrame | None) -> bytes:
    """Per metric, the run's score histogram over the baseline's."""
    metrics = sorted(results["metric"].unique())
    figure, axes = _pyplot().subplots(1, len(metrics), figsize=(3 * len(metrics), 2.6), squeeze=False)
    bins = np.linspace(0, 1, 11)
    for axis, metric in zip(axes[0], metrics):
        now = results[(results["metric"] == metric) & ~results["errored"]]["score"].astype(float)
        axis.hist(now, bins=bins, alpha=0.7, label="run", color="tab:blue")
        if baseline is not None and len(baseline):
            before = baseline[(baseline["metric"] == metric) & ~baseline["errored"]]["score"].astype(float)
            axis.hist(before, bins=bins, histtype="step", linewidth=2, label="baseline", color="black")
        axis.set_title(metric, fontsize=8)
    axes[0][0].legend(fontsize=7)
    return _png(figure)


def time_series(frame: pd.DataFrame, columns: Sequence[str], title: str,
                markers: pd.DataFrame | None = None, ylabel: str = "") -> bytes:
    """Daily lines with change markers (deploys, prompts, index builds, document updates)."""
    figure, axis = _pyplot().subplots(figsize=(8, 3.2))
    for column in columns:
        axis.plot(pd.to_datetime(frame["day"]), frame[column], marker="o", markersize=3, label=column)
    if markers is not None:
        for row in markers.itertuples():
            axis.axvline(pd.to_datetime(row.day), color=MARKER_COLORS.get(row.kind, "gray"),
                         linestyle="--", linewidth=1)
            axis.text(pd.to_datetime(row.day), axis.get_ylim()[1], f" {row.label}", rotation=90,
                      va="top", fontsize=6, color=MARKER_COLORS.get(row.kind, "gray"))
    axis.set_title(title)
    axis.set_ylabel(ylabel)
    axis.legend(fontsize=7, loc="lower left")
    figure.autofmt_xdate()
    return _png(figure)
