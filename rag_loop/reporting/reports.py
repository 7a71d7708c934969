"""Self-contained HTML reports (charts inlined) per golden release and per eval run; the eval
report carries the four-layer dashboard of seed 004 §10."""

from __future__ import annotations

import html
import json
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from rag_loop.goldens.coverage import CoverageChange
from rag_loop.reporting import plots
from rag_loop.reporting.dashboard import dashboard_sections
from rag_loop.reporting.html import image, page, table
from rag_loop.store.files import write_atomically, write_parquet_atomically
from rag_loop.store.releases import read_goldens, read_manifest


def coverage_section(change: CoverageChange | None) -> str:
    """How a release changed the covered share of production traffic, per slice, with the
    intents it newly covers and the largest it leaves uncovered."""
    if change is None:
        return "<p>Not computed: no traffic, intents or release in the database when the release was made.</p>"
    shares = change.slices.assign(**{c: (change.slices[c].astype(float) * 100).round(1)
                                     for c in ("parent_share", "share", "change")})
    shares = shares.rename(columns={"parent_share": f"% covered by {change.parent or 'nothing'}",
                                    "share": f"% covered by {change.version}", "change": "change (points)",
                                    "n": "sampled"})
    overall = change.slices[change.slices["slice"] == "all"]
    headline = ""
    if len(overall) and pd.notna(overall["share"].iloc[0]):
        before, after = overall["parent_share"].iloc[0], overall["share"].iloc[0]
        headline = (f"<p>{after:.1%} of the traffic of {change.first} .. {change.last} falls in intents "
                    f"{change.version} holds a golden of ({before:.1%} with {change.parent or 'no release'}; "
                    f"Σ 1/π over the sampled traces' intents).</p>")
    return (headline + table(shares) + "<h3>Newly covered intents</h3>" + table(change.newly_covered.round(1))
            + "<h3>Largest intents still uncovered</h3>" + table(change.still_uncovered.round(1)))


def release_report(goldens_dir: Path, version: str, out_dir: Path, coverage: CoverageChange | None = None) -> Path:
    """HTML report of one golden release: manifest, counts, diff, goldens, and how it changed
    the coverage of production against its parent (`coverage`, when computed)."""
    release = goldens_dir / version
    manifest, goldens = read_manifest(goldens_dir, version), read_goldens(goldens_dir, version)
    counts = plots.grouped_counts({k: v for k, v in manifest["counts"].items() if v}, f"Goldens of {version}")
    rows = pd.DataFrame([{"name": g["name"], "language": g["additional_metadata"].get("language"),
                          "origin": g["additional_metadata"]["origin"],
                          "failure_type": g["additional_metadata"]["failure_type"],
                          "input": g["input"], "expected_output": g["expected_output"]} for g in goldens])
    summary = pd.DataFrame([{k: manifest[k] for k in ("version", "parent_version", "created_at",
                                                       "released_by", "goldens", "sha256")}])
    sections = [("Release", table(summary) + f"<p>{html.escape(manifest['notes'] or '')}</p>"),
                ("Counts", image(counts, "counts")),
                ("Changes against the parent", "<pre>" + html.escape((release / "CHANGES.md")
                                                                     .read_text(encoding="utf-8")) + "</pre>"),
                ("Redaction", table(pd.DataFrame([manifest["redaction"]]))),
                ("Coverage of production", coverage_section(coverage)),
                ("Goldens", table(rows, 500))]
    return write_atomically(out_dir / f"release-{version}.html", page(f"Golden release {version}", sections))


def eval_report(con: duckdb.DuckDBPyConnection, run_id: str, out_dir: Path) -> Path:
    """HTML report of one eval run: verdict, quality vector per slice, histograms vs the
    baseline, flipped cases, and the four-layer dashboard of the traffic."""
    run = con.execute("SELECT * FROM eval_runs WHERE run_id = ?", [run_id]).df().iloc[0]
    results = con.execute("SELECT * FROM eval_results WHERE run_id = ?", [run_id]).df()
    baseline = con.execute("SELECT * FROM eval_results WHERE run_id = ?", [run["baseline_run_id"]]).df() \
        if run["baseline_run_id"] else None
    vector = con.execute("SELECT * FROM eval_summary WHERE run_id = ?", [run_id]).df()
    flips = con.execute("SELECT metric, input, baseline_score, score, actual_output FROM eval_flips "
                        "WHERE run_id = ?", [run_id]).df()
    failures = pd.DataFrame(json.loads(run["gate_failures"] or "[]"))
    unevaluated = pd.DataFrame(json.loads(run.get("gates_not_evaluated") or "[]"))
    verdict = ('<p class="bad">BLOCKED by a hard gate</p>' if run["blocked"]
               else '<p class="ok">passes its hard gates</p>')
    verdict += _judge_agreement(json.loads(run["judge"] or "{}"))
    evaluator = pd.DataFrame([{k: run[k] for k in ("release_version", "release_sha256", "mode", "rag_app",
                                                    "rag_config", "judge", "deepeval_version",
                                                    "baseline_run_id", "cases", "errored", "cost_usd")}])
    overall = vector[vector["slice"] == "all"][["metric", "n", "errored", "mean", "median", "pass_rate",
                                             "p10", "severe", "delta_mean", "delta_pass_rate"]]
    sections = [
        ("Verdict", verdict + (table(failures) if len(failures) else "")
         + (f'<p class="bad">{len(unevaluated)} gate checks not evaluated (no baseline figure):</p>'
            + table(unevaluated) if len(unevaluated) else "")),
        ("Evaluator version", table(evaluator)),
        ("Quality vector", table(overall)),
        ("By language", image(plots.quality_heatmap(vector, "language"), "by language")),
        ("By query type", image(plots.quality_heatmap(vector, "query_type"), "by query type")),
        ("Scores against the baseline", image(plots.score_histograms(results, baseline), "histograms")),
        ("Cases that flipped from pass to fail", table(flips) if len(flips) else
         "<p>none</p>" if run["baseline_run_id"] else "<p>no baseline run: flips not computed</p>"),
        *dashboard_sections(con),
    ]
    return write_atomically(out_dir / f"{run_id}.html", page(f"Regression eval {run_id}", sections))


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


def export_eval_results(con: duckdb.DuckDBPyConnection, run_id: str, goldens: list[dict], out_dir: Path) -> Path:
    """`eval-<run id>.parquet` beside the HTML report: every case × metric of the run with the
    golden's expected output and the run's verdict, what the curator workspace compares runs
    with (it never opens the database)."""
    expected = pa.table({"golden": [g.get("name") for g in goldens],
                         "expected_output": [g.get("expected_output") for g in goldens]})
    con.register("_expected", expected)
    try:
        table = con.sql("""
            SELECT r.run_id, e.release_version, e.rag_app, e.rag_config::VARCHAR AS rag_config, e.started_at,
                   e.blocked, e.baseline_run_id, r.golden, r.metric, r.score, r.threshold, r.passed, r.errored,
                   r.error, r.reason, r.input, x.expected_output, r.actual_output, r.language, r.query_type
            FROM eval_results r JOIN eval_runs e USING (run_id) LEFT JOIN _expected x USING (golden)
            WHERE r.run_id = $run ORDER BY r.golden, r.metric""", params={"run": run_id}).to_arrow_table()
    finally:
        con.unregister("_expected")
    path = out_dir / f"{run_id}.parquet"
    write_parquet_atomically(table, path)
    return path
