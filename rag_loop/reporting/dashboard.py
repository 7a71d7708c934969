"""The four-layer dashboard of seed 004 §10 (product, quality, performance, change) as daily
series, with deploy, prompt, index and document markers. The quality layer has the signals'
unbiased failure rates and, where the online judge ran, its judged pass rates; performance has
the evaluation cost apart from the application's."""

from __future__ import annotations

import duckdb
import pandas as pd

from rag_loop.reporting import plots
from rag_loop.reporting.html import image, table
from rag_loop.store.ddl import utc_day
from rag_loop.store.tables import has_table


def change_markers(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Days on which a new rag_version, prompt_version or index_version first served traffic,
    and days a document version was published (within the traffic's range)."""
    parts = [con.execute(f"""
        SELECT min({utc_day()}) AS day, '{column}' AS kind,
               {column} AS label FROM raw_traces WHERE {column} IS NOT NULL GROUP BY {column}""").df()
             for column in ("rag_version", "prompt_version", "index_version")]
    parts.append(con.execute(f"""
        SELECT {utc_day('source_updated_at')} AS day, 'document' AS kind,
               doc_id || '@' || version AS label FROM documents""").df())
    markers = pd.concat(parts, ignore_index=True)
    markers["day"] = pd.to_datetime(markers["day"]).dt.date
    first, last = con.execute(f"SELECT min({utc_day()}), max({utc_day()}) FROM raw_traces").fetchall()[0]
    return markers[(markers["day"] > first) & (markers["day"] <= last)].sort_values("day")


def daily_layers(con: duckdb.DuckDBPyConnection) -> dict[str, pd.DataFrame]:
    """The four dashboard layers as daily frames."""
    product = con.execute("""
        SELECT day, count(*) AS requests, avg(thumbs_down::INT) AS thumbs_down_rate,
               1 - avg(fallback::INT) AS answered_rate FROM trace_signals GROUP BY 1 ORDER BY 1""").df()
    performance = con.execute(f"""
        SELECT {utc_day()} AS day,
               quantile_cont(latency_ms, 0.5) / 1000 AS latency_p50_s,
               quantile_cont(latency_ms, 0.95) / 1000 AS latency_p95_s,
               avg((status = 'timeout')::INT) AS timeout_rate, sum(cost_usd) AS cost_usd,
               avg(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)) AS tokens_per_request
        FROM raw_traces GROUP BY 1 ORDER BY 1""").df()
    quality = con.execute("""
        PIVOT (SELECT day, outcome, ht_rate FROM quality_estimates WHERE slice = 'all'
               AND outcome IN ('any_signal', 'no_citation', 'stale_source', 'low_rerank_score'))
        ON outcome USING any_value(ht_rate) GROUP BY day ORDER BY day""").df() \
        if has_table(con, "quality_estimates") else pd.DataFrame(columns=["day"])
    judged = con.execute("""
        PIVOT (SELECT day, metric || ' pass rate' AS series, pass_rate FROM online_quality
               WHERE slice = 'all' AND estimator = 'random' AND pass_rate IS NOT NULL)
        ON series USING any_value(pass_rate) GROUP BY day ORDER BY day""").df() \
        if has_table(con, "online_quality") else pd.DataFrame(columns=["day"])
    if has_table(con, "online_cost"):
        cost = con.execute("SELECT day, eval_cost_per_request, eval_to_app_ratio FROM online_cost").df()
        performance = performance.merge(cost, on="day", how="left")
    change = con.execute("""
        SELECT day, quantile_cont(top_rerank_score, 0.5) AS rerank_p50,
               quantile_cont(top_retrieval_score, 0.5) AS retrieval_p50 FROM trace_signals
        GROUP BY 1 ORDER BY 1""").df()
    if has_table(con, "query_mix"):
        mix = con.execute("SELECT day, js_divergence AS query_type_js FROM query_mix "
                          "WHERE dimension = 'query_type'").df()
        change = change.merge(mix, on="day", how="left")
    return {"product": product, "quality": quality, "judged": judged, "performance": performance,
            "change": change}


def dashboard_sections(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    missing = [name for name in ("raw_traces", "trace_signals", "documents") if not has_table(con, name)]
    if missing:  # an eval on a database that holds releases but no traffic
        return [("Dashboard", f"<p>no dashboard: the database has no {', '.join(missing)} table</p>")]
    layers, markers = daily_layers(con), change_markers(con)
    charts = {
        "product": (["thumbs_down_rate", "answered_rate"], "Product: feedback and answered requests"),
        "quality": ([c for c in ("any_signal", "no_citation", "stale_source", "low_rerank_score")
                     if c in layers["quality"]], "Quality: unbiased daily failure rates (Horvitz-Thompson)"),
        "judged": ([c for c in layers["judged"].columns if c != "day"],
                   "Quality: judged pass rate per metric (random stream only)"),
        "performance": (["latency_p50_s", "latency_p95_s", "timeout_rate"], "Performance: latency and timeouts"),
        "change": ([c for c in ("rerank_p50", "retrieval_p50", "query_type_js") if c in layers["change"]],
                   "Change: retrieval scores and query mix"),
    }
    sections = []
    for layer, (columns, title) in charts.items():
        frame = layers[layer]
        if len(frame) and columns:
            chart = image(plots.time_series(frame, columns, title, markers), title)
            name = "QUALITY layer (judged)" if layer == "judged" else f"{layer.upper()} layer"
            sections.append((name, chart + table(frame.round(4), 31)))
    sections.append(("Change markers", table(markers)))
    return sections
