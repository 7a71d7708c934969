"""Every rag-loop table with a fixed schema, in one place.

Which asset writes each table is declared in `rag_loop_dagster/assets/` (a stage's own table, or a part of its
multi_asset); tables a stage builds from a query (trace_signals, failure_candidates,
quality_estimates, query_embeddings, intent_clusters, trace_clusters, curation_queue) take
the schema of that SELECT. Columns added after a first release are in a new
database's DDL, and added to existing databases by `ALTER TABLE ... ADD COLUMN IF NOT EXISTS`.
"""

# ingestion (raw_traces and its parts, knowledge_base's documents)
TRACE_COLUMNS = """
    trace_id VARCHAR NOT NULL, request_id VARCHAR, session_id VARCHAR, conversation_id VARCHAR,
    turn_id BIGINT, "timestamp" TIMESTAMPTZ NOT NULL, environment VARCHAR,
    rag_version VARCHAR, prompt_version VARCHAR, model_name VARCHAR, response_model VARCHAR,
    provider VARCHAR, embedding_model VARCHAR, reranker_model VARCHAR, index_version VARCHAR,
    chunking_version VARCHAR, retrieval_config_version VARCHAR,
    original_query VARCHAR NOT NULL, rewritten_query VARCHAR, filters JSON,
    answer VARCHAR, citations VARCHAR[], temperature DOUBLE, input_tokens BIGINT,
    output_tokens BIGINT, llm_calls BIGINT, final_input_tokens BIGINT, final_output_tokens BIGINT,
    finish_reason VARCHAR, status VARCHAR, error VARCHAR,
    is_fallback BOOLEAN, latency_ms DOUBLE, cost_usd DOUBLE,
    language VARCHAR, tenant VARCHAR, query_type VARCHAR, risk_level VARCHAR,
    source_format VARCHAR, source_file VARCHAR, source_line BIGINT, ingested_at TIMESTAMPTZ,
    retrieval_unreadable VARCHAR, service VARCHAR, user_id VARCHAR, language_source VARCHAR
"""

INGESTION_DDL = f"""
CREATE TABLE IF NOT EXISTS raw_traces ({TRACE_COLUMNS});
CREATE TABLE IF NOT EXISTS trace_chunks (
    trace_id VARCHAR NOT NULL, doc_id VARCHAR, chunk_id VARCHAR, doc_version VARCHAR,
    score DOUBLE, rank BIGINT, rerank_score DOUBLE, rerank_rank BIGINT, selected BOOLEAN,
    text VARCHAR, doc_id_from VARCHAR, day DATE NOT NULL);
CREATE TABLE IF NOT EXISTS trace_spans (
    trace_id VARCHAR NOT NULL, span_id VARCHAR, parent_span_id VARCHAR, name VARCHAR,
    kind VARCHAR, start_time TIMESTAMPTZ, duration_ms DOUBLE, status VARCHAR, day DATE NOT NULL);
CREATE TABLE IF NOT EXISTS trace_feedback (
    trace_id VARCHAR NOT NULL, rating VARCHAR, category VARCHAR, comment VARCHAR, day DATE NOT NULL);
CREATE TABLE IF NOT EXISTS quarantine (
    source_file VARCHAR, line_no BIGINT, format VARCHAR, reason VARCHAR, raw VARCHAR,
    quarantined_at TIMESTAMPTZ, span_id VARCHAR);
CREATE TABLE IF NOT EXISTS trace_duplicates (
    source_file VARCHAR, line_no BIGINT, trace_id VARCHAR, format VARCHAR,
    seen_at TIMESTAMPTZ, span_id VARCHAR);
-- OTLP: every span received (the unit of ingestion), and what became of each trace id
CREATE TABLE IF NOT EXISTS otlp_spans (
    trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL, parent_span_id VARCHAR, name VARCHAR,
    start_ns BIGINT, end_ns BIGINT, status_code VARCHAR, status_message VARCHAR,
    attributes JSON, resource JSON, events JSON, source_file VARCHAR, source_line BIGINT,
    received_at TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS otlp_traces (
    trace_id VARCHAR NOT NULL, state VARCHAR, complete BOOLEAN, spans BIGINT, reason VARCHAR,
    source_file VARCHAR, source_line BIGINT, record_span_id VARCHAR, assembled_at TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS ingested_files (
    path VARCHAR, size BIGINT, mtime_ns BIGINT, format VARCHAR, records BIGINT,
    ingested BIGINT, duplicates BIGINT, quarantined BIGINT, ingested_at TIMESTAMPTZ);
-- files read through a mapping file (rag_loop.ingest.mapped): per mapped field, how many of the
-- file's records its path resolved, with the mapping's hash (a changed mapping shows here)
CREATE TABLE IF NOT EXISTS mapping_coverage (
    source_file VARCHAR, mapping_file VARCHAR, mapping_hash VARCHAR, field VARCHAR, path VARCHAR,
    records BIGINT, resolved BIGINT, top_failure VARCHAR, ingested_at TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS documents (
    doc_id VARCHAR NOT NULL, version VARCHAR NOT NULL, title VARCHAR, language VARCHAR,
    source_updated_at TIMESTAMPTZ NOT NULL, indexed_at TIMESTAMPTZ, indexed_at_known BOOLEAN,
    PRIMARY KEY (doc_id, version));
CREATE TABLE IF NOT EXISTS document_chunks (
    chunk_id VARCHAR PRIMARY KEY, doc_id VARCHAR NOT NULL, version VARCHAR NOT NULL,
    text VARCHAR NOT NULL);
"""



def span_day(start_ns: str = "start_ns") -> str:
    """SQL for a span's day: the UTC day its start (nanoseconds since the epoch) falls on; a span
    without a start is OTLP's zero, 1970-01-01. Integer arithmetic, so no value fails; a
    function of the stored span alone (the trace lake's partition of otlp_spans)."""
    return f"(DATE '1970-01-01' + CAST(coalesce({start_ns}, 0) // 86400000000000 AS INTEGER))"


# otlp_pending: the trace ids with spans stored since their last assembly, or never assembled,
# the only ones assembly looks at (not every span stored), with each day those spans are on
# (`span_day`: where the trace lake keeps them). Created in one statement from the stored
# spans, so a database made before it loses no waiting trace; a new database's (`NEW_PENDING`)
# has the same columns.
NEW_PENDING = "CREATE TABLE otlp_pending (trace_id VARCHAR, day DATE)"
PENDING_FROM_SPANS = f"""
    CREATE TABLE otlp_pending AS
    SELECT DISTINCT trace_id, {span_day()} AS day FROM otlp_spans
    SEMI JOIN (SELECT s.trace_id FROM otlp_spans s LEFT JOIN otlp_traces t USING (trace_id)
               GROUP BY s.trace_id, t.trace_id, t.spans HAVING t.trace_id IS NULL OR count(*) > t.spans)
    USING (trace_id)"""

# columns added after the first release, by table: a new database has them from the DDL above,
# one made before gets them (the child tables' `day`, with its values, in
# rag_loop.store.tables.add_child_days); a table that is a view of the trace lake's files is
# left as it is
ADDED_COLUMNS = {
    "quarantine": ("span_id VARCHAR",),
    "trace_duplicates": ("span_id VARCHAR",),
    "trace_chunks": ("doc_id_from VARCHAR",),
    "raw_traces": ("llm_calls BIGINT", "final_input_tokens BIGINT", "final_output_tokens BIGINT",
                   "retrieval_unreadable VARCHAR", "service VARCHAR", "user_id VARCHAR",
                   # how the language was obtained: attribute, detected, undetermined (NULL: not yet)
                   "language_source VARCHAR"),
    "otlp_pending": ("day DATE",),  # NULL: on any day
    # false: the knowledge base gives no index times (a folder of files): no freshness lag for it
    "documents": ("indexed_at_known BOOLEAN",),
}

# the tables kept with their trace: each row carries its trace's UTC day (the trace lake's
# partition), so a stage reading some days' traces reads only those days' rows of these too
CHILD_TABLES = ("trace_chunks", "trace_spans", "trace_feedback")
RAW_TABLES = ("raw_traces", *CHILD_TABLES)  # a trace's rows
KEPT_IN_LAKE = (*RAW_TABLES, "otlp_spans", "otlp_traces")  # what ingestion keeps in a lake-backed deployment's lake


def utc_day(instant: str = '"timestamp"') -> str:
    """SQL for the UTC day of the TIMESTAMPTZ `instant`, as every stage cuts days."""
    return f"CAST(timezone('UTC', {instant}) AS DATE)"


# a database made before the child tables had `day`: their rows get their trace's
CHILD_DAY_BACKFILL = f"""
UPDATE {{table}} SET day = t.day
FROM (SELECT trace_id, {utc_day()} AS day FROM raw_traces) t
WHERE {{table}}.trace_id = t.trace_id AND {{table}}.day IS NULL"""

# selection: the novelty stream's input
NOVELTY_DDL = """
CREATE TABLE IF NOT EXISTS trace_novelty (
    day DATE, trace_id VARCHAR, language VARCHAR, novel BOOLEAN, cluster_size BIGINT,
    rate DOUBLE, settings VARCHAR, traffic VARCHAR);
ALTER TABLE trace_novelty ADD COLUMN IF NOT EXISTS settings VARCHAR;
ALTER TABLE trace_novelty ADD COLUMN IF NOT EXISTS traffic VARCHAR;
"""


# intents: vectors by model and text hash
EMBEDDING_CACHE_DDL = """
CREATE TABLE IF NOT EXISTS embedding_cache (
    model_id VARCHAR NOT NULL, text_hash VARCHAR NOT NULL, vector FLOAT[] NOT NULL,
    PRIMARY KEY (model_id, text_hash))"""


# curation: labels, their errors and files, the latest label per trace
LABELS_DDL = """
CREATE TABLE IF NOT EXISTS curated_labels (
    label_id VARCHAR PRIMARY KEY, trace_id VARCHAR NOT NULL, decision VARCHAR NOT NULL,
    input VARCHAR, expected_output VARCHAR, expected_sources VARCHAR[], tags VARCHAR[],
    origin VARCHAR, failure_type VARCHAR, curator VARCHAR, labeled_at TIMESTAMPTZ NOT NULL,
    cluster_id VARCHAR, cluster_weight DOUBLE, priority VARCHAR, source_trace_ids VARCHAR[],
    warnings VARCHAR[], source_file VARCHAR, line_no BIGINT, stored_at TIMESTAMPTZ,
    suggested_failure_type VARCHAR, judge_score DOUBLE, reject_reason VARCHAR);
-- what the curator was shown, for curator-versus-suggestion and -judge agreement; why a reject
ALTER TABLE curated_labels ADD COLUMN IF NOT EXISTS suggested_failure_type VARCHAR;
ALTER TABLE curated_labels ADD COLUMN IF NOT EXISTS judge_score DOUBLE;
ALTER TABLE curated_labels ADD COLUMN IF NOT EXISTS reject_reason VARCHAR;
-- the curator's grades of the online judge's verdicts on the trace (issue 45), one per metric
ALTER TABLE curated_labels ADD COLUMN IF NOT EXISTS judge_grades STRUCT(
    metric VARCHAR, judge_version VARCHAR, judge_passed BOOLEAN, judge_score DOUBLE, grade VARCHAR,
    curator_passed BOOLEAN)[];
-- "skip" was the terminal labeller's word for "later"
UPDATE curated_labels SET decision = 'later' WHERE decision = 'skip';
CREATE TABLE IF NOT EXISTS label_errors (
    source_file VARCHAR, line_no BIGINT, trace_id VARCHAR, errors VARCHAR[], raw VARCHAR,
    found_at TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS label_files (
    path VARCHAR, size BIGINT, mtime_ns BIGINT, rows BIGINT, stored BIGINT, rejected BIGINT,
    read_at TIMESTAMPTZ);
CREATE OR REPLACE VIEW current_labels AS
    SELECT * FROM curated_labels
    QUALIFY row_number() OVER (PARTITION BY trace_id
                               ORDER BY labeled_at DESC, source_file DESC, line_no DESC) = 1;
"""


# goldens: releases and lineage, rebuilt from the release files
GOLDEN_RELEASES_COLUMNS = ("version VARCHAR, parent_version VARCHAR, created_at TIMESTAMPTZ, "
                           "released_by VARCHAR, notes VARCHAR, goldens BIGINT, added BIGINT, "
                           "removed BIGINT, changed BIGINT, redacted_differently BIGINT, redacted BIGINT, "
                           "sha256 VARCHAR, "
                           "path VARCHAR")
GOLDEN_LINEAGE_COLUMNS = ("version VARCHAR, golden VARCHAR, label_id VARCHAR, trace_id VARCHAR, "
                          "source_trace_ids VARCHAR[], cluster_id VARCHAR, "
                          "incidents VARCHAR[]")  # the incidents the golden came from (issue 48)


# evaluation: runs, results, summaries, flips; the judge's cache; calibrations and agreement
EVAL_DDL = """
CREATE TABLE IF NOT EXISTS eval_runs (
    run_id VARCHAR PRIMARY KEY, started_at TIMESTAMPTZ, seconds DOUBLE, release_version VARCHAR,
    release_sha256 VARCHAR, mode VARCHAR, rag_app VARCHAR, rag_config JSON, judge JSON,
    deepeval_version VARCHAR, metrics JSON, gates JSON, cases BIGINT, results BIGINT,
    errored BIGINT, judge_calls BIGINT, judge_cache_hits BIGINT, input_tokens BIGINT,
    output_tokens BIGINT, cost_usd DOUBLE, baseline_run_id VARCHAR, blocked BOOLEAN,
    gate_failures JSON, gates_not_evaluated JSON);
ALTER TABLE eval_runs ADD COLUMN IF NOT EXISTS gates_not_evaluated JSON;
CREATE TABLE IF NOT EXISTS eval_results (
    run_id VARCHAR, golden VARCHAR, metric VARCHAR, score DOUBLE, threshold DOUBLE,
    passed BOOLEAN, errored BOOLEAN, error VARCHAR, reason VARCHAR, actual_output VARCHAR,
    input VARCHAR, language VARCHAR, query_type VARCHAR, origin VARCHAR, failure_type VARCHAR,
    tags VARCHAR[]);
CREATE TABLE IF NOT EXISTS eval_summary (
    run_id VARCHAR, baseline_run_id VARCHAR, metric VARCHAR, slice VARCHAR, slice_value VARCHAR,
    n BIGINT, errored BIGINT, mean DOUBLE, median DOUBLE, pass_rate DOUBLE, p10 DOUBLE,
    severe BIGINT, baseline_mean DOUBLE, baseline_pass_rate DOUBLE, delta_mean DOUBLE,
    delta_pass_rate DOUBLE);
CREATE TABLE IF NOT EXISTS eval_flips (
    run_id VARCHAR, baseline_run_id VARCHAR, golden VARCHAR, metric VARCHAR, input VARCHAR,
    baseline_score DOUBLE, score DOUBLE, errored BOOLEAN, actual_output VARCHAR);
"""
JUDGE_CACHE_DDL = """CREATE TABLE IF NOT EXISTS judge_cache (
    key VARCHAR PRIMARY KEY, model VARCHAR, response VARCHAR, input_tokens BIGINT,
    output_tokens BIGINT, created_at TIMESTAMPTZ DEFAULT now())"""

CALIBRATIONS_DDL = """
CREATE TABLE IF NOT EXISTS judge_calibrations (
    calibration_id VARCHAR, created_at TIMESTAMPTZ, file VARCHAR, file_sha256 VARCHAR,
    judge JSON, metric VARCHAR, rows BIGINT, errors BIGINT, roc_auc DOUBLE, threshold DOUBLE,
    kappa DOUBLE, best_threshold DOUBLE, best_kappa DOUBLE, true_faithful BIGINT,
    false_faithful BIGINT, true_unfaithful BIGINT, false_unfaithful BIGINT,
    precision_unfaithful DOUBLE, recall_unfaithful DOUBLE, cases_per_second DOUBLE)
"""
AGREEMENT_DDL = """
CREATE OR REPLACE TABLE judge_agreement (
    comparison VARCHAR, n BIGINT, kappa DOUBLE, agreement DOUBLE, confusion JSON,
    computed_at TIMESTAMPTZ)
"""
# curators' grades of the online judge (issue 45): per metric, judge version and language
# ('all': every language), from the current labels; rebuilt whole by each run
GRADE_AGREEMENT_COLUMNS = ("metric VARCHAR, judge_version VARCHAR, language VARCHAR, n BIGINT, "
                           "agreements BIGINT, agreement DOUBLE, kappa DOUBLE, ci_low DOUBLE, ci_high DOUBLE, "
                           "judge_pass_rate DOUBLE, curator_pass_rate DOUBLE, own_verdicts BIGINT, "
                           "curators BIGINT, computed_at TIMESTAMPTZ")


# online evaluation: judgments of selected traces (one per trace × metric × judge version),
# the judging runs, and the daily quality estimates
ONLINE_DDL = """
CREATE TABLE IF NOT EXISTS trace_judgments (
    trace_id VARCHAR NOT NULL, day DATE, metric VARCHAR NOT NULL, judge_id VARCHAR,
    judge_version VARCHAR NOT NULL, status VARCHAR, score DOUBLE, threshold DOUBLE,
    passed BOOLEAN, reason VARCHAR, error VARCHAR, streams VARCHAR[], by_random BOOLEAN,
    inclusion_probability DOUBLE, metric_rate DOUBLE, cost_usd DOUBLE, latency_ms DOUBLE,
    run_id VARCHAR, judged_at TIMESTAMPTZ, PRIMARY KEY (trace_id, metric, judge_version));
CREATE TABLE IF NOT EXISTS judgment_runs (
    run_id VARCHAR PRIMARY KEY, finished_at TIMESTAMPTZ, judge_id VARCHAR, judge_version VARCHAR,
    planned BIGINT, judged BIGINT, unjudgeable BIGINT, errored BIGINT, unfinished BIGINT,
    seconds DOUBLE, cost_usd DOUBLE, over_error_budget BOOLEAN, per_metric JSON,
    still_unjudgeable BIGINT, newly_judgeable BIGINT);
-- rows unjudgeable before: still missing the same input (not planned), judged now that it is there
ALTER TABLE judgment_runs ADD COLUMN IF NOT EXISTS still_unjudgeable BIGINT;
ALTER TABLE judgment_runs ADD COLUMN IF NOT EXISTS newly_judgeable BIGINT;
-- a judge version's re-judging window (issue 45), fixed by its first run: an earlier version's
-- verdicts on days before rejudge_from are kept, not re-judged (NULL: the whole selection)
CREATE TABLE IF NOT EXISTS judge_windows (
    judge_version VARCHAR PRIMARY KEY, rejudge_from DATE, rejudge_days INTEGER, set_at TIMESTAMPTZ);
"""


# drift: one row set per day
DRIFT_DAY_COLUMNS = {  # each table also has `day DATE`; a day's rows are replaced
    "traffic_intents": "trace_id VARCHAR, language VARCHAR, cluster_id VARCHAR, similarity DOUBLE",
    "query_mix_counts": "dimension VARCHAR, value VARCHAR, n BIGINT",
    "query_mix": "dimension VARCHAR, n BIGINT, baseline_n BIGINT, js_divergence DOUBLE, psi DOUBLE, "
                 "novel_share DOUBLE, top_movers JSON",
    "freshness_lag": "doc_id VARCHAR, version VARCHAR, source_updated_at TIMESTAMPTZ, "
                     "indexed_at TIMESTAMPTZ, lag_minutes DOUBLE, unindexed_at_end_of_day BOOLEAN, "
                     "within_slo BOOLEAN",
    "freshness_daily": "versions BIGINT, lag_p50_minutes DOUBLE, lag_p95_minutes DOUBLE, "
                       "lag_max_minutes DOUBLE, within_slo_share DOUBLE, stale_documents JSON",
    "stale_retrieval": "slice VARCHAR, slice_value VARCHAR, n BIGINT, stale_rate DOUBLE, "
                       "baseline_n BIGINT, baseline_stale_rate DOUBLE",
    "retrieval_scores": "slice VARCHAR, slice_value VARCHAR, n BIGINT, baseline_n BIGINT, "
                        "retrieval_p10 DOUBLE, retrieval_p50 DOUBLE, retrieval_p90 DOUBLE, "
                        "rerank_p10 DOUBLE, rerank_p50 DOUBLE, rerank_p90 DOUBLE, "
                        "baseline_rerank_p50 DOUBLE, empty_rate DOUBLE, baseline_empty_rate DOUBLE, "
                        "source_diversity DOUBLE, topk_overlap DOUBLE, ks_statistic DOUBLE, "
                        "ks_pvalue DOUBLE, rerank_psi DOUBLE",
    "online_quality": "slice VARCHAR, slice_value VARCHAR, metric VARCHAR, estimator VARCHAR, "
                      "kind VARCHAR, n BIGINT, passes DOUBLE, pass_rate DOUBLE, ci_low DOUBLE, "
                      "ci_high DOUBLE, mean_score DOUBLE, population_n BIGINT, judge_version VARCHAR",
    "online_cost": "requests BIGINT, app_cost_usd DOUBLE, app_cost_per_request DOUBLE, "
                   "judged_requests BIGINT, eval_cost_usd DOUBLE, eval_cost_per_judged DOUBLE, "
                   "eval_cost_per_request DOUBLE, eval_to_app_ratio DOUBLE",
    # golden coverage of the day's traffic by the newest release (issue 48; rag_loop.goldens.coverage)
    "golden_coverage": "slice VARCHAR, slice_value VARCHAR, traffic BIGINT, n BIGINT, volume DOUBLE, "
                       "covered_share DOUBLE, covered_traffic DOUBLE, intents BIGINT, covered_intents BIGINT, "
                       "unassigned_share DOUBLE, largest_uncovered VARCHAR[], release VARCHAR, "
                       "goldens BIGINT, goldens_unplaced BIGINT",
    "golden_coverage_intents": "slice VARCHAR, slice_value VARCHAR, cluster_id VARCHAR, label VARCHAR, "
                               "n BIGINT, volume DOUBLE, share DOUBLE, covered BOOLEAN, assessed BIGINT, "
                               "failure_rate DOUBLE, baseline_failure_rate DOUBLE, rising BOOLEAN, "
                               "release VARCHAR",
    "quality_slis": "outcome VARCHAR, rate DOUBLE, n BIGINT, random_n BIGINT, baseline_rate DOUBLE, "
                    "baseline_days BIGINT, increase DOUBLE",
}


# incidents (issue 48, rag_loop.incidents): one row per incident opened with `rag-loop incident
# open` (written by the CLI, outside Dagster, like judge_calibrations), and its window's traces
INCIDENTS_DDL = """
CREATE TABLE IF NOT EXISTS incidents (
    incident_id VARCHAR PRIMARY KEY, title VARCHAR, status VARCHAR, window_from TIMESTAMPTZ,
    window_to TIMESTAMPTZ, slices JSON, query_contains VARCHAR, opened_at TIMESTAMPTZ,
    opened_by VARCHAR, affected BIGINT, failing BIGINT, gating_release VARCHAR,
    closed_at TIMESTAMPTZ, actions VARCHAR, release_version VARCHAR, postmortem VARCHAR);
CREATE TABLE IF NOT EXISTS incident_traces (
    incident_id VARCHAR NOT NULL, trace_id VARCHAR NOT NULL, "timestamp" TIMESTAMPTZ,
    failing BOOLEAN, candidate BOOLEAN, cluster_id VARCHAR, reasons VARCHAR[]);
"""
