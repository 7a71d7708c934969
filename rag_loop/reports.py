"""Self-contained HTML reports (charts inlined) per golden release and per eval run.

The eval report carries the four-layer dashboard of seed 004 §10 — product, quality,
performance, change — as daily series with deploy, prompt, index and document markers.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import duckdb
import pandas as pd

from rag_loop import plots
from rag_loop.storage import has_table

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-top:.6em}table{border-collapse:collapse;
font-size:.85em}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left}img{max-width:100%}
.bad{color:#b00020;font-weight:bold}.ok{color:#1b5e20;font-weight:bold}"""


def _image(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def _table(frame: pd.DataFrame, limit: int = 50) -> str:
    return frame.head(limit).to_html(index=False, escape=True, float_format=lambda x: f"{x:.3f}")


def _page(title: str, sections: list[tuple[str, str]]) -> str:
    body = "".join(f"<h2>{html.escape(name)}</h2>{content}" for name, content in sections)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


def change_markers(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Days on which a new rag_version, prompt_version or index_version first served traffic,
    and days a document version was published (within the traffic's range)."""
    parts = [con.execute(f"""
        SELECT min(CAST(timezone('UTC', "timestamp") AS DATE)) AS day, '{column}' AS kind,
               {column} AS label FROM raw_traces WHERE {column} IS NOT NULL GROUP BY {column}""").df()
             for column in ("rag_version", "prompt_version", "index_version")]
    parts.append(con.execute("""
        SELECT CAST(timezone('UTC', source_updated_at) AS DATE) AS day, 'document' AS kind,
               doc_id || '@' || version AS label FROM documents""").df())
    markers = pd.concat(parts, ignore_index=True)
    markers["day"] = pd.to_datetime(markers["day"]).dt.date
    first, last = con.execute('SELECT min(CAST(timezone(\'UTC\', "timestamp") AS DATE)), '
                              'max(CAST(timezone(\'UTC\', "timestamp") AS DATE)) FROM raw_traces').fetchall()[0]
    return markers[(markers["day"] > first) & (markers["day"] <= last)].sort_values("day")


def daily_layers(con: duckdb.DuckDBPyConnection) -> dict[str, pd.DataFrame]:
    """The four dashboard layers as daily frames."""
    product = con.execute("""
        SELECT day, count(*) AS requests, avg(thumbs_down::INT) AS thumbs_down_rate,
               1 - avg(fallback::INT) AS answered_rate FROM trace_signals GROUP BY 1 ORDER BY 1""").df()
    performance = con.execute("""
        SELECT CAST(timezone('UTC', "timestamp") AS DATE) AS day,
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
    change = con.execute("""
        SELECT day, quantile_cont(top_rerank_score, 0.5) AS rerank_p50,
               quantile_cont(top_retrieval_score, 0.5) AS retrieval_p50 FROM trace_signals
        GROUP BY 1 ORDER BY 1""").df()
    if has_table(con, "query_mix"):
        mix = con.execute("SELECT day, js_divergence AS query_type_js FROM query_mix "
                          "WHERE dimension = 'query_type'").df()
        change = change.merge(mix, on="day", how="left")
    return {"product": product, "quality": quality, "performance": performance, "change": change}


def dashboard_sections(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    layers, markers = daily_layers(con), change_markers(con)
    charts = {
        "product": (["thumbs_down_rate", "answered_rate"], "Product: feedback and answered requests"),
        "quality": ([c for c in ("any_signal", "no_citation", "stale_source", "low_rerank_score")
                     if c in layers["quality"]], "Quality: unbiased daily failure rates (Horvitz-Thompson)"),
        "performance": (["latency_p50_s", "latency_p95_s", "timeout_rate"], "Performance: latency and timeouts"),
        "change": ([c for c in ("rerank_p50", "retrieval_p50", "query_type_js") if c in layers["change"]],
                   "Change: retrieval scores and query mix"),
    }
    sections = []
    for layer, (columns, title) in charts.items():
        frame = layers[layer]
        if len(frame) and columns:
            chart = _image(plots.time_series(frame, columns, title, markers), title)
            sections.append((f"{layer.upper()} layer", chart + _table(frame.round(4), 31)))
    sections.append(("Change markers", _table(markers)))
    return sections


def release_report(goldens_dir: Path, version: str, out_dir: Path) -> Path:
    """HTML report of one golden release: manifest, counts, diff, goldens."""
    release = goldens_dir / version
    manifest = json.loads((release / "manifest.json").read_text(encoding="utf-8"))
    goldens = json.loads((release / "goldens.json").read_text(encoding="utf-8"))
    counts = plots.grouped_counts({k: v for k, v in manifest["counts"].items() if v}, f"Goldens of {version}")
    rows = pd.DataFrame([{"name": g["name"], "language": g["additional_metadata"].get("language"),
                          "origin": g["additional_metadata"]["origin"],
                          "failure_type": g["additional_metadata"]["failure_type"],
                          "input": g["input"], "expected_output": g["expected_output"]} for g in goldens])
    summary = pd.DataFrame([{k: manifest[k] for k in ("version", "parent_version", "created_at",
                                                       "released_by", "goldens", "sha256")}])
    sections = [("Release", _table(summary) + f"<p>{html.escape(manifest['notes'] or '')}</p>"),
                ("Counts", _image(counts, "counts")),
                ("Changes against the parent", "<pre>" + html.escape((release / "CHANGES.md")
                                                                     .read_text(encoding="utf-8")) + "</pre>"),
                ("Redaction", _table(pd.DataFrame([manifest["redaction"]]))),
                ("Goldens", _table(rows, 500))]
    return _write(out_dir / f"release-{version}.html", _page(f"Golden release {version}", sections))


def eval_report(con: duckdb.DuckDBPyConnection, run_id: str, out_dir: Path) -> Path:
    """HTML report of one eval run: verdict, quality vector per slice, histograms vs the
    baseline, flipped cases, and the four-layer dashboard of the traffic."""
    run = con.execute("SELECT * FROM eval_runs WHERE run_id = ?", [run_id]).df().iloc[0]
    results = con.execute("SELECT * FROM eval_results WHERE run_id = ?", [run_id]).df()
    baseline = con.execute("SELECT * FROM eval_results WHERE run_id = ?", [run["baseline_run_id"]]).df() \
        if run["baseline_run_id"] else None
    table = con.execute("SELECT * FROM eval_summary WHERE run_id = ?", [run_id]).df()
    flips = con.execute("SELECT metric, input, baseline_score, score, actual_output FROM eval_flips "
                        "WHERE run_id = ?", [run_id]).df()
    failures = pd.DataFrame(json.loads(run["gate_failures"] or "[]"))
    verdict = ('<p class="bad">BLOCKED by a hard gate</p>' if run["blocked"]
               else '<p class="ok">passes its hard gates</p>')
    verdict += _judge_agreement(json.loads(run["judge"] or "{}"))
    evaluator = pd.DataFrame([{k: run[k] for k in ("release_version", "release_sha256", "mode", "rag_app",
                                                    "rag_config", "judge", "deepeval_version",
                                                    "baseline_run_id", "cases", "errored", "cost_usd")}])
    overall = table[table["slice"] == "all"][["metric", "n", "errored", "mean", "median", "pass_rate",
                                             "p10", "severe", "delta_mean", "delta_pass_rate"]]
    sections = [
        ("Verdict", verdict + (_table(failures) if len(failures) else "")),
        ("Evaluator version", _table(evaluator)),
        ("Quality vector", _table(overall)),
        ("By language", _image(plots.quality_heatmap(table, "language"), "by language")),
        ("By query type", _image(plots.quality_heatmap(table, "query_type"), "by query type")),
        ("Scores against the baseline", _image(plots.score_histograms(results, baseline), "histograms")),
        ("Cases that flipped from pass to fail", _table(flips) if len(flips) else "<p>none</p>"),
        *dashboard_sections(con),
    ]
    return _write(out_dir / f"{run_id}.html", _page(f"Regression eval {run_id}", sections))


def _judge_agreement(judge: dict) -> str:
    """How far the judge behind the verdict agrees with humans (its latest calibration)."""
    found = judge.get("calibration")
    if not found:
        return ('<p class="bad">The judge has not been calibrated against human labels: '
                "run <code>rag-loop calibrate FILE</code>.</p>")
    auc = "n/a" if found["roc_auc"] is None else f"{found['roc_auc']:.3f}"
    return (f"<p>Judge agreement with humans ({found['rows']} labelled answers, {found['file']}, "
            f"{found['created_at'][:16]}): ROC-AUC {auc}, Cohen's kappa {found['kappa']:.2f} at "
            f"threshold {found['threshold']:g} (best {found['best_threshold']:g}).</p>")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
    return path
