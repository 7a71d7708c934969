"""What the pipeline stored, as `rag-loop summary` prints it after `make demo` and `make run`."""

from __future__ import annotations

import json
import shlex

import duckdb

from rag_loop.home import Home, home
from rag_loop.ingest.pipeline import (
    QUARANTINE_ERROR_RATE,
    QUARANTINE_WARN_RATE,
    quarantined_records,
    trace_table_summary,
)
from rag_loop.store.lake import Lake


def _print_coverage(con: duckdb.DuckDBPyConnection) -> None:
    """Golden coverage per day (issue 48) and the largest uncovered intents over those days."""
    print("Golden coverage per day (share of traffic in intents the release holds a golden of, Σ 1/π):")
    print(con.sql("""SELECT day, release, traffic, n AS sampled, round(covered_share, 3) AS covered_share,
                            intents, covered_intents FROM golden_coverage WHERE slice = 'all'
                     ORDER BY day""").df().to_string(index=False))
    print("Largest uncovered intents over those days:")
    print(con.sql("""SELECT cluster_id, any_value(label) AS label, round(sum(volume), 1) AS volume,
                            count(DISTINCT day) AS days, count(*) FILTER (rising) AS rising_days
                     FROM golden_coverage_intents WHERE slice = 'all' AND covered IS NOT TRUE
                     GROUP BY 1 ORDER BY 3 DESC, 1 LIMIT 5""").df().to_string(index=False))


def print_summary(path: str, next_steps: bool = False, where: Home | None = None,
                  lake: Lake | None = None) -> None:
    """Every table's row count, quarantine reasons and rate (against the check's limits),
    selection, clusters, releases, evals, drift; then the next steps as commands to paste.
    `lake`: a lake-backed deployment's, whose views read its files."""
    where = where or home()
    with duckdb.connect(path, read_only=True) as con:
        if lake is not None:
            lake.attach(con)
        tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables "
                                            "WHERE table_schema = 'main' ORDER BY 1").fetchall()]
        print(f"rag-loop database: {path}")
        for table in tables:
            print(f"  {table:<18} {con.execute(f'SELECT count(*) FROM {table}').fetchall()[0][0]:>8} rows")
        print(con.sql("SELECT format, reason, count(*) AS n FROM quarantine GROUP BY ALL "
                     "ORDER BY n DESC, format, reason"))
        _print_quarantined(con)
        if "raw_traces" in tables:
            _print_quarantine_check(con)
        if "failure_candidates" in tables:
            print("Selected for judging and curation, by priority and stream:")
            print(con.sql("SELECT priority, count(*) AS selected, count(*) FILTER (by_random) AS random, "
                          "count(*) FILTER (by_bad_signal) AS bad_signal, "
                          "count(*) FILTER (by_risk) AS risk, round(avg(inclusion_probability), 3) "
                          "AS mean_pi FROM failure_candidates GROUP BY 1 ORDER BY 1"))
        if "curation_queue" in tables and "intent_clusters" in tables:
            clusters, singletons = con.execute(
                "SELECT count(*) FILTER (NOT is_singleton), count(*) FILTER (is_singleton) "
                "FROM intent_clusters").fetchall()[0]
            queued, batch = con.execute("SELECT count(*), any_value(batch) FROM curation_queue").fetchall()[0]
            print(f"Intent clusters: {clusters} (+ {singletons} singletons); curation queue: "
                  f"{queued} representatives, batch {batch} ({where.curation_dir / 'queue' / f'{batch}.jsonl'})")
        if "judgment_runs" in tables:
            _print_online(con, tables)
        if "golden_releases" in tables:
            print("Golden releases:")
            print(con.sql("SELECT version, parent_version, goldens, added, removed, changed, "
                          "released_by FROM golden_releases ORDER BY version"))
        if "eval_runs" in tables:
            _print_eval_runs(con, where)
        if {"retrieval_scores", "quality_slis", "query_mix", "freshness_daily"} <= set(tables):
            print("Drift per day (the checks' verdicts are in the UI: Assets > drift):")
            print(con.sql("""
                SELECT r.day, round(r.rerank_p50, 3) AS rerank_p50, round(r.ks_statistic, 3) AS ks,
                       round(r.topk_overlap, 2) AS topk_overlap, round(m.js_divergence, 3) AS js_query_type,
                       f.lag_max_minutes AS max_lag_min, round(q.stale, 3) AS stale,
                       round(q.timeout, 3) AS timeout, round(q.no_citation, 3) AS no_citation,
                       round(q.fallback, 3) AS fallback
                FROM retrieval_scores r
                JOIN query_mix m ON m.day = r.day AND m.dimension = 'query_type'
                JOIN freshness_daily f ON f.day = r.day
                JOIN (PIVOT (SELECT day, outcome, rate FROM quality_slis) ON outcome USING any_value(rate)
                      GROUP BY day) AS q(day, empty_retrieval, fallback, no_citation, stale, timeout)
                  ON q.day = r.day
                WHERE r.slice = 'all' ORDER BY r.day""").df().to_string(index=False))
        if "golden_coverage" in tables:
            _print_coverage(con)
        if "otlp_traces" in tables:
            # the pending traces never assembled: not a scan of every span (on Spark, the lake's)
            pending = "otlp_pending" if "otlp_pending" in tables else "otlp_spans"  # or a database from before it
            print("OTLP trace ids by state (waiting = spans staged, root not yet arrived):")
            print(con.sql(f"""SELECT state, count(*) FILTER (complete IS NOT false) AS complete,
                                     count(*) FILTER (complete = false) AS without_root
                              FROM otlp_traces GROUP BY 1 UNION ALL
                              SELECT 'waiting', count(DISTINCT trace_id), NULL FROM {pending}
                              WHERE trace_id NOT IN (SELECT trace_id FROM otlp_traces) ORDER BY 1"""))
    if next_steps:
        print(NEXT_STEPS.format(home=shlex.quote(str(where.root)), queue=where.curation_dir / "queue",
                                labels=where.curation_dir / "labels", goldens=where.goldens_dir))


NEXT_STEPS = """
Next steps (everything below stays in this deployment's home, {home}):
  1. Label the curation queue in the browser workspace (queue, traces, sources, grading the judge):
       RAG_LOOP_HOME={home} .venv/bin/rag-loop serve
     or in the terminal (one row per intent, newest export first):
       RAG_LOOP_HOME={home} .venv/bin/rag-loop label
     or fill the export in {queue} (CSV or JSONL) and save it in {labels}
  2. Release the labelled goldens (immutable, hashed vNNNN in {goldens}):
       RAG_LOOP_HOME={home} .venv/bin/rag-loop release --notes "first release" --by "$USER"
  3. Evaluate your RAG service on the release (see README "Your own RAG service"):
       RAG_LOOP_HOME={home} RAG_LOOP_RAG_APP_URL=http://127.0.0.1:8000/answer .venv/bin/rag-loop eval --release latest
"""


def _print_quarantined(con: duckdb.DuckDBPyConnection) -> None:
    shown, total = quarantined_records(con)
    if not total:
        return
    print(f"Quarantined records (file names relative to the traces or knowledge-base folder), "
          f"{len(shown)} of {total}:")
    for line in shown:
        print(f"  {line}")
    if total > len(shown):
        print(f"  ... {total - len(shown)} more: SELECT * FROM quarantine ORDER BY source_file, line_no")


def _print_quarantine_check(con: duckdb.DuckDBPyConnection) -> None:
    """The raw_traces_quarantine_rate check, as the asset check judges it."""
    figures = trace_table_summary(con)
    records = figures["traces"] + figures["duplicates"] + figures["quarantined"]
    rate = figures["quarantine_rate"]
    verdict = ("ERROR" if rate > QUARANTINE_ERROR_RATE else "WARN" if rate > QUARANTINE_WARN_RATE else "ok")
    print(f"Check raw_traces_quarantine_rate: {verdict}: {figures['quarantined']} of {records} records "
          f"quarantined ({rate:.1%}; WARN above {QUARANTINE_WARN_RATE:.0%}, ERROR above "
          f"{QUARANTINE_ERROR_RATE:.0%})")


def _print_online(con: duckdb.DuckDBPyConnection, tables: list[str]) -> None:
    """The newest judging run, and judged quality per day where online_quality ran."""
    run = con.execute("SELECT judge_id, judge_version, planned, judged, unjudgeable, errored, unfinished, "
                      "over_error_budget FROM judgment_runs ORDER BY finished_at DESC LIMIT 1").fetchall()
    if run:
        judge, version, planned, judged, unjudgeable, errored, unfinished, over = run[0]
        print(f"Online judge {judge} ({version}), newest run: {planned} planned, {judged} judged, "
              f"{unjudgeable} unjudgeable, {errored} errored{' (over the error budget)' if over else ''}, "
              f"{unfinished} left for the next run")
    if "online_quality" in tables:
        print("Judged pass rate per day, random stream only (n), the checks are in the UI: Assets > online:")
        print(con.sql("""
            PIVOT (SELECT day, metric, printf('%.2f (%d)', pass_rate, n) AS value FROM online_quality
                   WHERE slice = 'all' AND estimator = 'random' AND pass_rate IS NOT NULL)
            ON metric USING any_value(value) GROUP BY day ORDER BY day""").df().to_string(index=False))


def _print_eval_runs(con: duckdb.DuckDBPyConnection, where: Home) -> None:
    """Each evaluation: release, app configuration, verdict of its gates, what failed, and
    what could not be evaluated (no baseline figure is its own verdict, never a pass)."""
    runs = con.execute("""SELECT *, rag_app || ' ' || rag_config::VARCHAR AS target,
                                 (SELECT count(*) FROM eval_flips f WHERE f.run_id = r.run_id) AS flipped
                          FROM eval_runs r ORDER BY started_at""").df().to_dict("records")
    print("Regression evals (offline judge unless configured):")
    for run in runs:
        verdict = "BLOCKED by a hard gate" if run["blocked"] else "passes its hard gates"
        against = (f"{run['flipped']} case x metric flipped to fail vs baseline {run['baseline_run_id']}"
                   if run["baseline_run_id"] else "no baseline run: flips and drops not evaluated")
        print(f"  {run['run_id']} on {run['release_version']}, {run['target']}: {verdict}; {against}")
        print(f"    report: {where.reports_dir / (run['run_id'] + '.html')}")
        for failure in json.loads(run["gate_failures"] or "[]"):
            print(f"    - {failure['metric']} on {failure['slice']}={failure['value']} "
                  f"(n={failure['n']}): {failure['problems']}")
        unevaluated = json.loads(run.get("gates_not_evaluated") or "[]")
        if unevaluated:
            print(f"    {len(unevaluated)} gate checks not evaluated (no baseline figure): "
                  + ", ".join(sorted({f"{u['metric']} on {u['slice']}={u['value']}" for u in unevaluated}))[:300])
