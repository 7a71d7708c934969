"""The dashboard page's four layers (seed 004 §10) from `dashboard.json` (written by the
`dashboard` asset into the reports folder): each layer's charts as inline SVG, the links to the
rows behind each chart (queue filters, releases, eval comparisons, the figures' own table on the
page, and the Dagster asset page where a webserver is known), or why there is nothing to draw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from markupsafe import Markup

from rag_loop.workspace import charts
from rag_loop.workspace.charts import COLOURS, STATE_COLOURS, Series

SEVERITY_COLOURS = {"ERROR": STATE_COLOURS["ERROR"], "WARN": STATE_COLOURS["WARN"]}
MOST_SLICES = 20


@dataclass
class Chart:
    title: str
    svg: Markup
    links: list[tuple[str, str]] = field(default_factory=list)  # (text, href): the rows behind it
    note: str = ""


@dataclass
class Table:
    id: str
    title: str
    columns: list[str]
    rows: list[list[Any]]


@dataclass
class Layer:
    id: str
    title: str
    question: str
    charts: list[Chart] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    empty: str | None = None  # why there is nothing to draw


def dagster_link(dagster_url: str | None, asset: str, checks: bool = False) -> list[tuple[str, str]]:
    if not dagster_url:
        return []
    href = f"{dagster_url.rstrip('/')}/assets/{quote(asset)}" + ("?view=checks" if checks else "")
    return [(f"{asset} in Dagster", href)]


def _table(id_: str, title: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Table:
    return Table(id_, title, list(columns), [[_cell(r.get(c)) for c in columns] for r in rows])


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else value


def _days(*groups: Sequence[Mapping[str, Any]], key: str = "day") -> list[str]:
    days = sorted({str(r[key])[:10] for rows in groups for r in rows if r.get(key)})
    return charts.days_between(days[0], days[-1]) if days else []


def product(figures: Mapping, dagster_url: str | None) -> Layer:
    layer = Layer("product", "Product", "How much is the assistant used, and what do users say?")
    traffic, feedback = figures["traffic"], figures["feedback"]
    if not traffic:
        layer.empty = "No traffic yet: no trace has been ingested (raw_traces is empty)."
        return layer
    days = _days(traffic)
    layer.charts.append(Chart("Requests per day", charts.time_chart(days, [
        Series("requests", {r["day"]: r["requests"] for r in traffic}, bars=True),
        Series("fallback answers", {r["day"]: r["fallbacks"] for r in traffic}, bars=True),
        Series("timeouts and errors", {r["day"]: r["failed"] for r in traffic}, bars=True)],
        "Requests per day"), [("queue rows with a fallback", "/?" + urlencode({"signal": "fallback"})),
                              ("with a timeout", "/?" + urlencode({"signal": "timeout"})),
                              ("the figures", "#rows-traffic"), *dagster_link(dagster_url, "raw_traces")]))
    if feedback:
        layer.charts.append(Chart("Feedback per day", charts.time_chart(days, [
            Series("thumbs down", {r["day"]: r["thumbs_down"] for r in feedback}, bars=True),
            Series("thumbs up", {r["day"]: r["thumbs_up"] for r in feedback}, bars=True)], "Feedback per day"),
            [("queue rows with a thumbs-down", "/?" + urlencode({"signal": "thumbs_down"})),
             ("the figures", "#rows-feedback"), *dagster_link(dagster_url, "trace_feedback")]))
    else:
        layer.charts.append(Chart("Feedback per day", Markup(""), note="No feedback recorded in the traces."))
    layer.tables += [_table("rows-traffic", "Traffic per day", traffic, ["day", "requests", "fallbacks", "failed"]),
                     _table("rows-feedback", "Feedback per day", feedback,
                            ["day", "feedback", "thumbs_down", "thumbs_up", "thumbs_down_rate"])]
    return layer


def quality(figures: Mapping, dagster_url: str | None) -> Layer:
    layer = Layer("quality", "Quality", "Are the answers right? Judged pass rates from the random stream, "
                                        "with 95% intervals, against the SLO.")
    rates = figures["pass_rates"]
    if not rates:
        layer.empty = ("No judged quality yet: trace_judgments and online_quality (drift_job, daily) have not "
                       "stored a pass rate.")
        return layer
    days = _days(rates, figures["slo"])
    metrics = sorted({r["metric"] for r in rates})
    series = [Series(m, {r["day"]: r["pass_rate"] for r in rates if r["metric"] == m},
                     band={r["day"]: (r["ci_low"], r["ci_high"]) for r in rates if r["metric"] == m}) for m in metrics]
    targets = ", ".join(f"{m} ≥ {t:.0%}" for m, t in figures["targets"].items())
    online = dagster_link(dagster_url, "online_quality")
    layer.charts.append(Chart("Judged pass rate per day (random stream, 95% interval)",
                              charts.time_chart(days, series, "Judged pass rate per day", percent=True,
                                                targets=figures["targets"]),
                              [("the figures", "#rows-pass-rates"), *online],
                              note=f"Shaded: the 95% interval. Dashed: the SLO target ({targets})." if targets
                              else "Shaded: the 95% interval."))
    states = {s["day"]: s for s in figures["slo"]}
    if states:
        breached = sum(s["state"] in ("WARN", "ERROR") for s in figures["slo"])
        layer.charts.append(Chart(
            f"SLO state ({figures['window_days']}-day window ending on the day, {figures['estimator']} estimator)",
            charts.state_strip(days, states, "SLO state per day"),
            [("the verdicts", "#rows-slo"), *dagster_link(dagster_url, "online_quality", checks=True)],
            note=f"{breached} of {len(states)} days breached. Green: met; amber: WARN (under target); red: "
                 "ERROR (the whole interval under target); grey: not evaluated (too few judged traces)."))
    else:
        layer.charts.append(Chart("SLO state", Markup(""), note="No SLO verdict: no target set or no judging run."))
    # the surest to be worst first: the lowest top of the interval (a slice of 3 traces at 0% is not)
    slices = sorted(figures["slices"], key=lambda r: (r["ci_high"], r["pass_rate"], r["metric"], r["slice"],
                                                      str(r["slice_value"])))
    if slices:
        window = " to ".join(figures.get("slices_window") or [])
        shown = slices[:MOST_SLICES]
        layer.charts.append(Chart(
            f"By slice, {window} ({len(shown)} of {len(slices)}, lowest interval top first)",
            charts.slice_chart(shown, "Judged pass rate by slice"),
            [("intents by judged pass rate", "/intents?sort=judged_pass_rate"), ("the figures", "#rows-slices"),
             *online], note="Bars: pass rate; black whisker: 95% interval; dashed tick: the target; red: the "
                            "whole interval under the target."))
    layer.tables += [
        _table("rows-pass-rates", "Judged pass rate per day", rates,
               ["day", "metric", "n", "pass_rate", "ci_low", "ci_high"]),
        _table("rows-slo", "SLO verdict per day", figures["slo"], ["day", "state", "value", "n", "note"]),
        _table("rows-slices", "By slice", slices, ["slice", "slice_value", "metric", "n", "pass_rate", "ci_low",
                                                   "ci_high", "target"])]
    return layer


def performance(figures: Mapping, dagster_url: str | None) -> Layer:
    layer = Layer("performance", "Performance", "How fast and how costly: latency, the application's cost, "
                                                "and what evaluating it costs.")
    rows, evals = figures["days"], figures["eval_cost"]
    if not rows and not evals:
        layer.empty = "No latency or cost recorded yet: the traces carry neither latency_ms nor cost_usd."
        return layer
    days = _days(rows, evals)
    if any(r["latency_p50_ms"] is not None for r in rows):
        layer.charts.append(Chart("Latency per day (ms)", charts.time_chart(days, [
            Series("p50", {r["day"]: r["latency_p50_ms"] for r in rows}),
            Series("p95", {r["day"]: r["latency_p95_ms"] for r in rows})], "Latency per day"),
            [("the figures", "#rows-performance"), *dagster_link(dagster_url, "raw_traces")]))
    layer.charts.append(Chart("Cost per day (USD)", charts.time_chart(days, [
        Series("application", {r["day"]: r["app_cost_usd"] for r in rows}, bars=True),
        Series("online evaluation", {r["day"]: r["eval_cost_usd"] for r in evals}, bars=True)], "Cost per day"),
        [("the figures", "#rows-performance"), ("evaluation cost", "#rows-eval-cost"),
         *dagster_link(dagster_url, "online_cost")],
        note="" if evals else "No online evaluation cost yet (online_cost is empty)."))
    layer.tables += [_table("rows-performance", "Latency and cost per day", rows,
                            ["day", "requests", "latency_p50_ms", "latency_p95_ms", "app_cost_usd",
                             "app_cost_per_request"]),
                     _table("rows-eval-cost", "Online evaluation cost per day", evals,
                            ["day", "judged_requests", "eval_cost_usd", "eval_cost_per_request", "eval_to_app_ratio"])]
    return layer


def change(figures: Mapping, dagster_url: str | None, served: Sequence[str | None] = ()) -> Layer:
    """`served`: the first and last day of traffic, so the timeline spans them too."""
    layer = Layer("change", "Change", "What changed: versions first served, drift, SLO and golden coverage "
                                      "alerts, golden releases, evals.")
    versions, alerts, releases, evals = (figures[k] for k in ("versions", "alerts", "releases", "evals"))
    if not (versions or alerts or releases or evals):
        layer.empty = ("No change recorded yet: no version in the traces, no drift alert"
                       + ("" if figures["drift_checked"] else " (no drift check has run)")
                       + ", no golden release, no eval.")
        return layer
    kinds = {"rag_version": COLOURS[0], "prompt_version": COLOURS[3], "index_version": COLOURS[4]}
    lanes = [
        ("versions", [{"day": v["day"], "text": f"{v['kind']} {v['version']} first served ({v['requests']} requests)",
                       "colour": kinds.get(v["kind"], COLOURS[5])} for v in versions]),
        ("drift / SLO / coverage alerts", [
            {"day": a["day"], "text": f"{a['severity']} {a['asset']} · {a['check']}: {a['note']}",
             "colour": SEVERITY_COLOURS.get(a["severity"], COLOURS[5]),
             "link": next((h for _, h in dagster_link(dagster_url, a["asset"], True)), None)} for a in alerts]),
        ("golden releases", [{"day": str(r["created_at"])[:10], "colour": COLOURS[2], "link": "/releases",
                              "text": f"{r['version']}: {r['goldens']} goldens"} for r in releases]),
        ("evals", [{"day": str(e["started_at"])[:10], "link": f"/evals/{quote(str(e['run_id']))}",
                    "colour": STATE_COLOURS["ERROR"] if e["blocked"] else COLOURS[2],
                    "text": f"{e['run_id']} on {e['release_version']}: " + ("blocked" if e["blocked"] else "passed")}
                   for e in evals])]
    days = _days(*(events for _, events in lanes), [{"day": d} for d in served if d])
    notes = []
    if not figures["drift_checked"]:
        notes.append("No drift check has run yet (drift_job): no alert is not a clean bill.")
    layer.charts.append(Chart("Changes per day", charts.timeline(days, lanes, "Changes per day"),
                              [("releases", "/releases"), ("evals", "/evals"), ("the changes", "#rows-change"),
                               *dagster_link(dagster_url, "query_mix", checks=True)],
                              note=" ".join(notes + ["Each marker says what it is on hover; releases and evals "
                                                     "open their page, alerts their checks in Dagster."])))
    events = [{"day": e["day"], "lane": lane, "what": e["text"], "link": e.get("link") or ""}
              for lane, group in lanes for e in group]
    layer.tables.append(_table("rows-change", "Changes", sorted(events, key=lambda e: (e["day"], e["lane"])),
                               ["day", "lane", "what"]))
    return layer


def layers(figures: Mapping, dagster_url: str | None = None) -> list[Layer]:
    return [product(figures["product"], dagster_url), quality(figures["quality"], dagster_url),
            performance(figures["performance"], dagster_url), change(figures["change"], dagster_url,
                                                          (figures["first_day"], figures["last_day"]))]
