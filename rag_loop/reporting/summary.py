"""What the pipeline stored, as `rag-loop summary` prints it after `make demo` and `make run`."""

from __future__ import annotations

import json

import duckdb


def print_summary(path: str, next_steps: bool = False) -> None:
    """Every table's row count, quarantine reasons, selection, clusters, releases, evals, drift."""
    with duckdb.connect(path, read_only=True) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables "
                                            "WHERE table_schema = 'main' ORDER BY 1").fetchall()]
        print(f"rag-loop database: {path}")
        for table in tables:
            print(f"  {table:<18} {con.execute(f'SELECT count(*) FROM {table}').fetchall()[0][0]:>8} rows")
        print(con.sql("SELECT format, reason, count(*) AS n FROM quarantine GROUP BY ALL ORDER BY n DESC"))
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
                  f"{queued} representatives, batch {batch} (data/curation/queue/{batch}.jsonl)")
        if "golden_releases" in tables:
            print("Golden releases:")
            print(con.sql("SELECT version, parent_version, goldens, added, removed, changed, "
                          "released_by FROM golden_releases ORDER BY version"))
        if "eval_runs" in tables:
            _print_eval_runs(con)
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
        if "otlp_traces" in tables:
            print("OTLP trace ids by state (waiting = spans staged, root not yet arrived):")
            print(con.sql("""SELECT state, count(*) FILTER (complete IS NOT false) AS complete,
                                    count(*) FILTER (complete = false) AS without_root
                             FROM otlp_traces GROUP BY 1 UNION ALL
                             SELECT 'waiting', count(DISTINCT trace_id), NULL FROM otlp_spans
                             WHERE trace_id NOT IN (SELECT trace_id FROM otlp_traces) ORDER BY 1"""))
    if next_steps:
        print(NEXT_STEPS.format(db=path))


NEXT_STEPS = """
Next steps
  1. Label the curation queue (one row per intent, newest export first):
       .venv/bin/rag-loop label --db {db}
     or fill the exported CSV/JSONL and drop it in data/curation/labels/ (RAG_LOOP_CURATION_DIR).
  2. Release the labelled goldens (immutable, hashed vNNNN under data/goldens/):
       .venv/bin/dagster job execute -f definitions.py -j release_goldens
  3. Evaluate your RAG service on the release (HTTP: see README "Your own RAG service"):
       RAG_LOOP_RAG_APP_URL=http://127.0.0.1:8000/answer \\
         .venv/bin/dagster job execute -f definitions.py -j regression_eval_job
"""


def _print_eval_runs(con: duckdb.DuckDBPyConnection) -> None:
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
        print(f"    report: data/reports/{run['run_id']}.html")
        for failure in json.loads(run["gate_failures"] or "[]"):
            print(f"    - {failure['metric']} on {failure['slice']}={failure['value']} "
                  f"(n={failure['n']}): {failure['problems']}")
        unevaluated = json.loads(run.get("gates_not_evaluated") or "[]")
        if unevaluated:
            print(f"    {len(unevaluated)} gate checks not evaluated (no baseline figure): "
                  + ", ".join(sorted({f"{u['metric']} on {u['slice']}={u['value']}" for u in unevaluated}))[:300])
