"""Golden coverage's traffic-sized counts (issue 48), one Ibis expression each for DuckDB and
Spark (rag_loop.goldens.coverage turns them into the day's coverage):

- `traffic_expression`: the exact trace count of a range of days per slice value (slice `all`
  included), from raw_traces;
- `sampled_expression`: the sampled candidates of a range of days grouped by day, slice values,
  intent and outcome (assessed, failed), with their count and Σ 1/π: what coverage needs of the
  candidates, never one row per trace.

Both read only the days asked for (`on_days`). The optional inputs (trace_clusters,
trace_judgments, current_labels) are read when the deployment has them (`CoverageWindow`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

import ibis
import ibis.expr.types as ir

from rag_loop.engines.functions import Functions, day_range, double, on_days

SLICES = ("language", "tenant", "query_type")
UNKNOWN = {"language": "und", "tenant": "unknown", "query_type": "unknown"}
UNASSIGNED = "(unassigned)"
OPTIONAL = ("trace_clusters", "trace_judgments", "current_labels")


@dataclass(frozen=True)
class CoverageWindow:
    """The days counted (both included) and which optional inputs the deployment has."""

    first: date
    last: date
    optional: tuple[str, ...] = OPTIONAL

    def inputs(self) -> tuple[str, ...]:
        return ("raw_traces", "failure_candidates", *self.optional)


def _slice_value(traces: ir.Table, name: str) -> ir.StringValue:
    return traces[name].cast("string").fill_null(UNKNOWN[name])


def traffic_expression(tables: Mapping[str, ir.Table], window: CoverageWindow, fn: Functions) -> ir.Table:
    """Per slice and value over the window's days: traffic (exact count of traces)."""
    traces = tables["raw_traces"]
    traces = traces.filter(on_days(fn, traces["timestamp"], day_range(window.first, window.last)))
    values = traces.select(all=ibis.literal("all"), **{s: _slice_value(traces, s) for s in SLICES})
    parts = [values.group_by(values[s].name("slice_value")).aggregate(traffic=values.count())
             .mutate(slice=ibis.literal(s)) for s in ("all", *SLICES)]
    return ibis.union(*parts).select("slice", "slice_value", "traffic")


def _newest_verdicts(judgments: ir.Table) -> ir.Table:
    """Per trace: whether its newest verdict of any metric failed (judged rows with a verdict)."""
    judged = judgments.filter((judgments.status == "judged") & judgments.passed.notnull())
    newest = judged.mutate(rank=ibis.row_number().over(group_by=[judged.trace_id, judged.metric],
                                                        order_by=ibis.desc(judged.judged_at)))
    newest = newest.filter(newest["rank"] == 0)
    return newest.group_by(j_trace_id=newest.trace_id).aggregate(j_failed=(~newest.passed).any())


def sampled_expression(tables: Mapping[str, ir.Table], window: CoverageWindow, fn: Functions) -> ir.Table:
    """Per day, slice values, intent, assessed and failed: the sampled candidates (`n`) and the
    traffic they stand for (`weight`, Σ 1/π with π at most 1). A curator's accepted label decides
    whether a trace failed (failure type other than `none`), else its newest judged verdicts (any
    metric failed); neither: not assessed. A candidate without a cluster is `(unassigned)`."""
    traces = tables["raw_traces"]
    traces = traces.filter(on_days(fn, traces["timestamp"], day_range(window.first, window.last)))
    rows = traces.select(trace_id=traces.trace_id, day=fn.utc_day(traces["timestamp"]),
                         **{s: _slice_value(traces, s) for s in SLICES})
    candidates = tables["failure_candidates"]
    chosen = candidates.group_by(c_trace_id=candidates.trace_id).aggregate(
        probability=candidates.inclusion_probability.max())
    chosen = chosen.filter(chosen.probability > 0)
    joined = rows.join(chosen, rows.trace_id == chosen.c_trace_id)
    if "trace_clusters" in window.optional:
        clusters = tables["trace_clusters"]
        clusters = clusters.select(t_trace_id=clusters.trace_id, cluster=clusters.cluster_id)
        joined = joined.left_join(clusters, joined.trace_id == clusters.t_trace_id)
        cluster = joined.cluster.fill_null(UNASSIGNED)
    else:
        cluster = ibis.literal(UNASSIGNED)
    if "current_labels" in window.optional:
        labels = tables["current_labels"]
        labels = labels.filter(labels.decision == "accept")
        labels = labels.select(l_trace_id=labels.trace_id, l_failed=labels.failure_type.fill_null("none") != "none")
        joined = joined.left_join(labels, joined.trace_id == labels.l_trace_id)
        label_failed = joined.l_failed
    else:
        label_failed = ibis.null("boolean")
    if "trace_judgments" in window.optional:
        verdicts = _newest_verdicts(tables["trace_judgments"])
        joined = joined.left_join(verdicts, joined.trace_id == verdicts.j_trace_id)
        judge_failed = joined.j_failed
    else:
        judge_failed = ibis.null("boolean")
    one = double(1.0)
    outcome = joined.select(
        day=joined.day, **{s: joined[s] for s in SLICES}, cluster_id=cluster,
        assessed=label_failed.notnull() | judge_failed.notnull(),
        failed=ibis.coalesce(label_failed, judge_failed, ibis.literal(False)),
        weight=one / ibis.least(joined.probability, one))
    return outcome.group_by(["day", *SLICES, "cluster_id", "assessed", "failed"]).aggregate(
        n=outcome.count(), weight=outcome.weight.sum())
