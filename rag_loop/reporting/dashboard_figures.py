"""The workspace dashboard's figures (seed 004 §10: product, quality, performance, change) per
UTC day, from the tables the loop writes, as one small JSON document (`dashboard.json` in the
reports folder, which `rag-loop serve` reads; the workspace never opens the database).

- product: requests per day; feedback given, thumbs-down and thumbs-up per day (trace_feedback).
- quality: the judged pass rate per metric from the random stream (the unbiased one) with its
  Wilson interval (online_quality); the SLO's state per day, the online_slo check's verdict
  recomputed with `OnlineQualitySettings` (the sliding window ending on the day); per slice,
  the random stream's pass rate over the last `window_days` days (passes and n add up).
- performance: latency p50 / p95, application cost, and the online evaluation's cost per day
  (online_cost); the regression evals' cost is in change.evals.
- change: the day each rag_version / prompt_version / index_version first served traffic, the
  drift checks that fired per day (`alerts`, from the Dagster asset checks: the library does not
  read them), the golden releases and the regression evals.

A layer whose tables are missing or empty is present with empty lists: the page says "no data
yet" instead of drawing nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from rag_loop.online.quality import OnlineQualitySettings, slo_verdict
from rag_loop.selection.estimates import wilson_interval
from rag_loop.store.ddl import utc_day
from rag_loop.store.judgments import current_judge_version
from rag_loop.store.tables import has_table

DASHBOARD_FILE = "dashboard.json"
FORMAT = 1  # the document's version: the page refuses another
VERSION_COLUMNS = ("rag_version", "prompt_version", "index_version")


def _value(value: Any) -> Any:
    """A JSON value: dates as ISO text, NaN as null, numpy scalars as Python's."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat() if value.tzinfo else value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _rows(con: duckdb.DuckDBPyConnection, sql: str, parameters: Iterable | Mapping | None = None) -> list[dict]:
    cursor = con.execute(sql, parameters) if parameters is not None else con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [{name: _value(v) for name, v in zip(names, row, strict=True)} for row in cursor.fetchall()]


def _nonempty(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return has_table(con, table) and con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] > 0


def product_layer(con: duckdb.DuckDBPyConnection) -> dict:
    traffic = _rows(con, f"""
        SELECT {utc_day()} AS day, count(*) AS requests,
               count(*) FILTER (coalesce(is_fallback, false)) AS fallbacks,
               count(*) FILTER (status IN ('timeout', 'error')) AS failed
        FROM raw_traces GROUP BY 1 ORDER BY 1""") if has_table(con, "raw_traces") else []
    feedback = _rows(con, """
        SELECT day, count(*) AS feedback, count(*) FILTER (rating = 'negative') AS thumbs_down,
               count(*) FILTER (rating = 'positive') AS thumbs_up
        FROM trace_feedback GROUP BY 1 ORDER BY 1""") if has_table(con, "trace_feedback") else []
    requests = {r["day"]: r["requests"] for r in traffic}
    for row in feedback:
        row["thumbs_down_rate"] = row["thumbs_down"] / requests[row["day"]] if requests.get(row["day"]) else None
    return {"traffic": traffic, "feedback": feedback}


def quality_layer(con: duckdb.DuckDBPyConnection, settings: OnlineQualitySettings) -> dict:
    if not _nonempty(con, "online_quality"):
        return {"pass_rates": [], "slo": [], "slices": [], "targets": dict(settings.slo_targets),
                "window_days": settings.window_days, "estimator": settings.slo_estimator}
    pass_rates = _rows(con, """
        SELECT day, metric, n, pass_rate, ci_low, ci_high FROM online_quality
        WHERE slice = 'all' AND estimator = 'random' AND pass_rate IS NOT NULL ORDER BY day, metric""")
    last = con.execute("SELECT max(day) FROM online_quality").fetchall()[0][0]
    first = last - timedelta(days=settings.window_days - 1)
    slices = _rows(con, """
        SELECT slice, slice_value, metric, sum(n) AS n, sum(passes) AS passes FROM online_quality
        WHERE estimator = 'random' AND slice <> 'all' AND passes IS NOT NULL AND day BETWEEN $first AND $last
        GROUP BY ALL HAVING sum(n) > 0 ORDER BY slice, metric, slice_value""", {"first": first, "last": last})
    if slices:
        low, high = wilson_interval(np.array([s["passes"] for s in slices]), np.array([s["n"] for s in slices]),
                                    settings.confidence)
        for row, lo, hi in zip(slices, low, high, strict=True):
            row.update(pass_rate=row["passes"] / row["n"], ci_low=float(lo), ci_high=float(hi),
                       target=settings.slo_targets.get(row["metric"]))
    return {"pass_rates": pass_rates, "slo": slo_states(con, settings), "slices": slices,
            "slices_window": [first.isoformat(), last.isoformat()], "targets": dict(settings.slo_targets),
            "window_days": settings.window_days, "estimator": settings.slo_estimator}


def slo_states(con: duckdb.DuckDBPyConnection, settings: OnlineQualitySettings) -> list[dict]:
    """Per day with judged quality: the online_slo verdict of the window ending on it —
    met, WARN / ERROR (breached), or not evaluated (no judged trace, too small a sample)."""
    needed = ("trace_judgments", "failure_candidates", "trace_signals")
    if not settings.slo_targets or not all(has_table(con, t) for t in needed):
        return []
    version = current_judge_version(con, settings.judge_version)
    if version is None:
        return []
    states = []
    for (day,) in con.execute("SELECT DISTINCT day FROM online_quality ORDER BY 1").fetchall():
        verdict = slo_verdict(con, day, version, settings)
        state = verdict.severity if verdict.fired else "met" if verdict.evaluated else "not evaluated"
        states.append({"day": day.isoformat(), "state": state, "value": _value(verdict.value), "n": verdict.n,
                       "note": verdict.note})
    return states


def performance_layer(con: duckdb.DuckDBPyConnection) -> dict:
    days = _rows(con, f"""
        SELECT {utc_day()} AS day, count(*) AS requests,
               quantile_cont(latency_ms, 0.5) AS latency_p50_ms, quantile_cont(latency_ms, 0.95) AS latency_p95_ms,
               sum(cost_usd) AS app_cost_usd, avg(cost_usd) AS app_cost_per_request
        FROM raw_traces GROUP BY 1 ORDER BY 1""") if has_table(con, "raw_traces") else []
    eval_cost = _rows(con, """
        SELECT day, judged_requests, eval_cost_usd, eval_cost_per_request, eval_to_app_ratio
        FROM online_cost ORDER BY day""") if has_table(con, "online_cost") else []
    return {"days": [d for d in days if d["latency_p50_ms"] is not None or d["app_cost_usd"] is not None],
            "eval_cost": eval_cost}


def change_layer(con: duckdb.DuckDBPyConnection, alerts: Iterable[Mapping[str, Any]] = ()) -> dict:
    versions = []
    if has_table(con, "raw_traces"):
        for column in VERSION_COLUMNS:
            versions += _rows(con, f"""
                SELECT min({utc_day()}) AS day, '{column}' AS kind, {column} AS version, count(*) AS requests
                FROM raw_traces WHERE {column} IS NOT NULL GROUP BY {column}""")
    versions.sort(key=lambda v: (v["day"], v["kind"], v["version"]))
    releases = _rows(con, """SELECT version, created_at, released_by, goldens, added, removed, changed
                             FROM golden_releases ORDER BY created_at""") if has_table(con, "golden_releases") else []
    evals = _rows(con, """SELECT run_id, started_at, release_version, rag_app, blocked, cases, errored, cost_usd,
                                 baseline_run_id FROM eval_runs ORDER BY started_at""") \
        if has_table(con, "eval_runs") else []
    return {"versions": versions, "alerts": sorted(({k: _value(v) for k, v in a.items()} for a in alerts),
                                                   key=lambda a: (a["day"], a["asset"], a["check"])),
            "releases": releases, "evals": evals}


def dashboard_figures(con: duckdb.DuckDBPyConnection, settings: OnlineQualitySettings | None = None,
                      alerts: Iterable[Mapping[str, Any]] = (), drift_checked: bool = False) -> dict:
    """The four layers as one JSON-ready document. `alerts`: the drift and SLO checks that fired,
    each {day, asset, check, severity, note}; `drift_checked`: whether any drift check has run
    (no alert then means none fired, not that none was looked for)."""
    settings = settings or OnlineQualitySettings()
    product = product_layer(con)
    days = sorted({r["day"] for r in product["traffic"]})
    return {"format": FORMAT, "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "first_day": days[0] if days else None, "last_day": days[-1] if days else None,
            "product": product, "quality": quality_layer(con, settings),
            "performance": performance_layer(con),
            "change": {**change_layer(con, alerts), "drift_checked": drift_checked}}


def write_dashboard(figures: dict, folder: Path) -> Path:
    """Write `figures` to `<folder>/dashboard.json` whole (a reader never sees half a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    path, partial = folder / DASHBOARD_FILE, folder / f".{DASHBOARD_FILE}.partial"
    partial.write_text(json.dumps(figures, ensure_ascii=False, indent=1), encoding="utf-8")
    partial.replace(path)
    return path
