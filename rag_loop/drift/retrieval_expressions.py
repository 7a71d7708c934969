"""Retrieval and freshness drift figures that grow with traffic, one Ibis expression each for
DuckDB and Spark (rag_loop.drift.figures turns them into the day's figures):

- per slice value of a day: quantiles of the top-1 retrieval and rerank scores, the empty
  retrieval rate, source diversity, top-k overlap with the baseline for repeated queries, and
  the KS statistic and PSI of the top-1 rerank score against the baseline window — computed
  where the rows are, so only one row per slice value leaves the engine;
- per slice value: the day's and the baseline's stale retrieval rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

import ibis
import ibis.expr.types as ir

from rag_loop.drift.query_mix_expressions import trim_spaces
from rag_loop.engines.functions import Functions, day_range, double, on_days
from rag_loop.selection.signal_expressions import SLICE_COLUMNS

RETRIEVAL_INPUTS = ("trace_signals", "raw_traces", "trace_chunks")
STALE_INPUTS = ("trace_signals",)
DIMENSIONS = ("all", *SLICE_COLUMNS)
DECILES = tuple(i / 10 for i in range(11))
TERTILES = {"p10": 0.1, "p50": 0.5, "p90": 0.9}  # the day's score quantiles
EDGE_TOLERANCE = 1e-9  # relative: a score this close to a decile is on it
PSI_FLOOR = 1e-4  # rag_loop.drift.stats.psi's: a share never counts as less than this


@dataclass(frozen=True)
class DriftWindow:
    """The day and its baseline window [start, end] (the days before it)."""

    start: date
    end: date
    day: date


def retrieval_expression(tables: Mapping[str, ir.Table], window: DriftWindow, fn: Functions) -> ir.Table:
    """One row per dimension (`slice_order`: its place in DIMENSIONS) and value seen on the day
    ('all' for the whole traffic, even on a day without traces): the day's and the baseline's
    figures, with `ks_d` (the largest distance between the two empirical distributions of the
    top-1 rerank score, over `rerank_n` and `baseline_rerank_n` scores) and `rerank_psi` (PSI
    over the baseline's decile bins)."""
    rows = by_slice(fn.reuse(_window_rows(tables, window, fn)), "is_today", "is_baseline", "top_retrieval_score",
                    "top_rerank_score", "empty_retrieval", "documents", "overlap")
    levels = _score_levels(rows, "top_rerank_score", fn, now="is_today", before="is_baseline")
    rerank = fn.reuse(_quantiles(levels, {"now": {f"rerank_{k}": q for k, q in TERTILES.items()},
                                          "before": _deciles()}))  # read by the figures and the PSI
    retrieval = _quantiles(_score_levels(rows, "top_retrieval_score", fn, now="is_today"),
                           {"now": {f"retrieval_{k}": q for k, q in TERTILES.items()}})
    figures = _figures(rows, rerank, retrieval)
    figures = figures.filter((figures.slice == "all") | (figures.n > 0))
    distance, psi = _ks_distance(levels), _psi(levels, rerank)
    joined = (figures.left_join(distance, (figures.slice_order == distance.k_order)
                                & (figures.slice_value == distance.k_value))
              .left_join(psi, (figures.slice_order == psi.p_order) & (figures.slice_value == psi.p_value)))
    result = joined.drop("k_order", "k_value", "p_order", "p_value", "q_low", "q_high", *_edges())
    return result.order_by(["slice_order", "slice_value"])


def by_slice(rows: ir.Table, *columns: str) -> ir.Table:
    """`columns` of `rows` once per dimension of DIMENSIONS: `slice_order` (its place there),
    `slice` and `slice_value` ("(none)" for a missing value) — one pass over the rows for
    every slice, where a union would read them once per slice."""
    slices = ibis.array([ibis.struct({"order": ibis.literal(order, "int64"), "slice": ibis.literal(dimension),
                                      "value": ibis.literal("all") if dimension == "all"
                                      else rows[dimension].fill_null("(none)")})
                         for order, dimension in enumerate(DIMENSIONS)])
    exploded = rows.select(*columns, rag_loop_slice=slices).unnest("rag_loop_slice")
    one = exploded.rag_loop_slice
    return exploded.select(*columns, slice_order=one["order"], slice=one["slice"], slice_value=one["value"])


def _window_rows(tables: Mapping[str, ir.Table], window: DriftWindow, fn: Functions) -> ir.Table:
    """The window's traces: slices and scores; for the day's traces also the documents used
    and the top-k overlap with the latest retrieval of the same query in the baseline window.
    Chunk lists are gathered for those traces only (the day's, and one per repeated query),
    not for the whole window. Each part is read once (Spark computes a part again at each
    reading): the rows are one stream, the day's chunks and the earlier traces' join it."""
    signals, traces, chunks = tables["trace_signals"], tables["raw_traces"], tables["trace_chunks"]
    in_window = signals.filter(signals.day.between(window.start, window.day))
    traces = traces.filter(on_days(fn, traces["timestamp"], day_range(window.start, window.day)))
    chunks = chunks.filter(chunks.day.between(window.start, window.day))  # a chunk has its trace's day
    queries = traces.select(q_trace_id=traces.trace_id, query=trim_spaces(traces.original_query).lower(),
                            asked_at=traces["timestamp"])
    rows = in_window.join(queries, in_window.trace_id == queries.q_trace_id).select(
        "trace_id", "day", *SLICE_COLUMNS, "top_retrieval_score", "top_rerank_score", "empty_retrieval", "query",
        is_today=in_window.day == window.day, is_baseline=in_window.day <= window.end)
    named = chunks.filter(chunks.chunk_id.notnull())
    baseline_ids = in_window.filter(in_window.day <= window.end).trace_id
    before = queries.filter(queries.q_trace_id.isin(baseline_ids) & queries.q_trace_id.isin(named.trace_id))
    newest = ibis.struct({"at": before.asked_at, "id": before.q_trace_id})  # ties: the larger id
    earlier = before.group_by(e_query=before.query).aggregate(e_trace_id=before.q_trace_id.argmax(newest))
    then = chunks.join(earlier, chunks.trace_id == earlier.e_trace_id)  # one trace per query
    then = then.group_by(then.e_query).aggregate(e_chunk_ids=fn.distinct(then.chunk_id.collect()))
    todays = chunks.filter(chunks.day == window.day)
    used = todays.group_by(k_trace_id=todays.trace_id).aggregate(
        documents=fn.distinct(todays.doc_id.collect()).length(), chunk_ids=fn.distinct(todays.chunk_id.collect()))
    rows = rows.view()  # Ibis: not merged into the join below, which joins parts derived from its tables
    joined = (rows.left_join(used, rows.is_today & (rows.trace_id == used.k_trace_id))
              .left_join(then, rows.is_today & (rows.query == then.e_query)))
    shared = ibis.ifelse(joined.chunk_ids.isnull(), 0, joined.chunk_ids.intersect(joined.e_chunk_ids).length())
    both = joined.chunk_ids.length().fill_null(0) + joined.e_chunk_ids.length() - shared
    overlap = ibis.ifelse(joined.e_query.notnull(), shared.cast("float64") / ibis.greatest(both, 1), ibis.null())
    return joined.select("day", *SLICE_COLUMNS, "top_retrieval_score", "top_rerank_score", "empty_retrieval",
                         "is_today", "is_baseline", documents=joined.documents, overlap=overlap)


def _figures(part: ir.Table, rerank: ir.Table, retrieval: ir.Table) -> ir.Table:
    """Per slice value: counts, rates, and the quantiles of the rerank and retrieval scores
    (`_quantiles` of their score levels), the baseline's rerank deciles (the PSI bins) among them."""
    today, base = part.is_today, part.is_baseline
    figures = part.group_by(["slice_order", "slice", "slice_value"]).aggregate(
        n=part.count(where=today), baseline_n=part.count(where=base),
        empty_rate=part.empty_retrieval.cast("float64").mean(where=today),
        baseline_empty_rate=part.empty_retrieval.cast("float64").mean(where=base),
        source_diversity=part.documents.fill_null(0).cast("float64").mean(where=today),
        topk_overlap=part.overlap.mean(where=today))
    for quantiles in (retrieval, rerank):
        figures = figures.left_join(quantiles, (figures.slice_order == quantiles.q_order)
                                    & (figures.slice_value == quantiles.q_value)).drop("q_order", "q_value")
    return figures.select(
        "slice", "slice_value", "slice_order", "n", "baseline_n",
        *(f"retrieval_{k}" for k in TERTILES), *(f"rerank_{k}" for k in TERTILES),
        baseline_rerank_p50=figures.q5, **{c: figures[c] for c in (
            "empty_rate", "baseline_empty_rate", "source_diversity", "topk_overlap", *_deciles())})


def _quantiles(levels: ir.Table, wanted: Mapping[str, Mapping[str, float]]) -> ir.Table:
    """Per slice value (`q_order`, `q_value`): for each count column of `levels` in `wanted`,
    each of its quantiles (name: probability) of the scores it counts, interpolated between the
    order statistics as DuckDB's quantile_cont does (at (n − 1)·p). Read off the distinct
    scores' running counts in one pass, not gathered from the rows: Spark's exact percentile
    holds every value of a group in one task, and would differ from DuckDB's in the last bits."""
    group = [levels.slice_order, levels.slice_value]
    running = ibis.window(group_by=group, order_by=levels.score, rows=(None, 0))
    ranked = levels.mutate(**{f"{count}_seen": levels[count].sum().over(running) for count in wanted},
                           **{f"{count}_n": levels[count].sum().over(ibis.window(group_by=group)) for count in wanted})
    ends = {}
    for count, quantiles in wanted.items():
        for name, p in quantiles.items():
            at = (ranked[f"{count}_n"] - 1).cast("float64") * double(p)
            counted = ranked[count] > 0
            ends[f"{name}_lo"] = ranked.score.min(where=counted & (ranked[f"{count}_seen"] > at.floor()))
            ends[f"{name}_hi"] = ranked.score.min(where=counted & (ranked[f"{count}_seen"] > at.ceil()))
    found = ranked.group_by(q_order=ranked.slice_order, q_value=ranked.slice_value).aggregate(
        **{f"{count}_n": ranked[count].sum() for count in wanted}, **ends)
    values = {}
    for count, quantiles in wanted.items():
        for name, p in quantiles.items():
            at = (found[f"{count}_n"] - 1).cast("float64") * double(p)
            low = found[f"{name}_lo"]
            values[name] = low + (found[f"{name}_hi"] - low) * (at - at.floor())
    return found.select("q_order", "q_value", **values)


def _edges() -> tuple[str, ...]:
    return tuple(f"q{i}" for i in range(1, len(DECILES) - 1))


def _deciles() -> dict[str, float]:
    """The baseline's rerank deciles by name: q_low, the inner edges q1…q9, q_high."""
    return dict(zip(("q_low", *_edges(), "q_high"), DECILES))


def _score_levels(part: ir.Table, column: str, fn: Functions, **counts: str) -> ir.Table:
    """Per slice value and distinct score of `column`: how many of the rows each boolean column
    of `counts` (name: column) marks have it. The quantiles, the KS distance and the PSI read
    these, not the rows; computed once for all of them (`fn.reuse`)."""
    levels = part.group_by(["slice_order", "slice_value", part[column].name("score")]).aggregate(
        **{name: part.count(where=part[mask]) for name, mask in counts.items()})
    return fn.reuse(levels.filter(levels.score.notnull()))


def _ks_distance(levels: ir.Table) -> ir.Table:
    """Per slice value: max |F_day(x) − F_baseline(x)| over the distinct rerank scores x (the
    two-sample KS statistic), NULL without scores on either side."""
    running = ibis.window(group_by=[levels.slice_order, levels.slice_value], order_by=levels.score, rows=(None, 0))
    whole = ibis.window(group_by=[levels.slice_order, levels.slice_value])
    cdf = levels.mutate(
        now_cdf=levels.now.sum().over(running).cast("float64") / levels.now.sum().over(whole).nullif(0),
        before_cdf=levels.before.sum().over(running).cast("float64") / levels.before.sum().over(whole).nullif(0))
    return cdf.group_by(k_order=cdf.slice_order, k_value=cdf.slice_value).aggregate(
        ks_d=(cdf.now_cdf - cdf.before_cdf).abs().max(), rerank_n=cdf.now.sum(), baseline_rerank_n=cdf.before.sum())


def _psi(levels: ir.Table, deciles: ir.Table) -> ir.Table:
    """Per slice value: PSI of the day's top-1 rerank scores against the baseline's over the
    baseline's decile bins (as rag_loop.drift.stats.psi: shares floored at PSI_FLOOR; NULL when
    the baseline has one value only or either side has no score). A bin's index is the number of
    inner edges at or below the score; edges equal to the lowest or highest decile are not edges
    (as numpy's histogram over the unique deciles, with the outer two made infinite). The deciles:
    `_quantiles`' of the rerank levels (q_low, q1…q9, q_high), not the figures that join them."""
    edges = deciles.select(slice_order=deciles.q_order, slice_value=deciles.q_value, q_low=deciles.q_low,
                           q_high=deciles.q_high, **{e: deciles[e] for e in _edges()})
    edges = edges.filter(_above(edges.q_high, edges.q_low))
    with_edges = levels.join(edges, ["slice_order", "slice_value"])
    score, low, high = with_edges.score, with_edges.q_low, with_edges.q_high
    bin_index = sum((_above(with_edges[e], low) & _above(high, with_edges[e]) & ~_above(with_edges[e], score))
                    .cast("int64") for e in _edges())
    bins = with_edges.group_by(["slice_order", "slice_value", bin_index.name("bin")]).aggregate(
        now=with_edges.now.sum(), before=with_edges.before.sum())
    whole = ibis.window(group_by=[bins.slice_order, bins.slice_value])
    share_now, share_before = (_floored_share(count, count.sum().over(whole)) for count in (bins.now, bins.before))
    terms = bins.mutate(term=(share_now - share_before) * (share_now / share_before).ln())
    return terms.group_by(p_order=terms.slice_order, p_value=terms.slice_value).aggregate(
        rerank_psi=terms.term.sum())


def _above(value: ir.FloatingValue, edge: ir.FloatingValue) -> ir.BooleanValue:
    """value > edge by more than the last bits: numpy (the tests' reference) and the engines'
    own quantile aggregates interpolate differently in the last bit, and a score tied with a
    decile must fall in the same bin whichever computed the decile."""
    return value > edge + double(EDGE_TOLERANCE) * ibis.greatest(edge.abs(), double(1.0))


def _floored_share(count: ir.IntegerValue, total: ir.IntegerValue) -> ir.FloatingValue:
    """count / total, at least PSI_FLOOR; NULL when total is 0 (GREATEST skips NULLs on both engines)."""
    return ibis.ifelse(total > 0, ibis.greatest(count.cast("float64") / total.nullif(0), double(PSI_FLOOR)),
                       ibis.null("float64"))


def stale_expression(tables: Mapping[str, ir.Table], window: DriftWindow, fn: Functions) -> ir.Table:
    """Per dimension and value seen on the day: the day's and the baseline's traces and stale
    retrieval rates."""
    signals = tables["trace_signals"]
    window_rows = signals.filter(signals.day.between(window.start, window.day))
    rows = by_slice(window_rows.mutate(is_today=window_rows.day == window.day,
                                       stale=window_rows.stale_source.cast("float64")), "is_today", "stale")
    counts = rows.group_by(["slice", "slice_value"]).aggregate(
        n=rows.count(where=rows.is_today), stale_rate=rows.stale.mean(where=rows.is_today),
        baseline_n=rows.count(where=~rows.is_today), baseline_stale_rate=rows.stale.mean(where=~rows.is_today))
    return counts.filter(counts.n > 0).order_by(["slice", "slice_value"])
