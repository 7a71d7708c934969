"""What the data says about an incident, section by section of seed 004 §14's runbook. Every
figure comes from a stored table or file; what none records is reported as not recorded
(`None` / an empty list plus a `missing` note), never guessed.

- impact: requests of the window (matching the slices), the failing ones, users and sessions,
  per slice value and per intent, the failing share before the window (same length, same slices);
- detection: the drift and SLO checks that fired on the window's days as the `dashboard` asset
  exported them from Dagster's check history (`dashboard.json`; the library never reads Dagster),
  which drift tables were computed on those days, the SLO's state per day, the golden_coverage
  check recomputed from its stored rows (default floor), and the users' thumbs-down;
- timeline: versions (rag / prompt / index / chunking / model / retrieval config) first served
  within the lookback before and in the window, documents updated or indexed then, releases and
  eval runs, first and last failing request;
- root-cause evidence: failure types of the labelled traces, failing metrics of the judged ones,
  bad signals, the judge versions that judged them;
- why offline tests missed it: the release that gated the last deploy (the newest release an
  eval run tested before the window, else the newest created before it, else none) and whether
  it held a golden of each affected intent; the newest release too;
- lineage: the goldens built from the incident's traces in each release and the eval runs that
  tested them since (`eval_results` by golden).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from rag_loop.drift.checks import assess
from rag_loop.goldens.coverage import CHECK as COVERAGE_CHECK
from rag_loop.goldens.coverage import CoverageSettings, golden_intents, intent_labels, release_goldens
from rag_loop.incidents.record import IncidentRequest, window_traces
from rag_loop.store.releases import read_goldens, read_manifest, release_versions
from rag_loop.store.tables import has_table

VERSION_COLUMNS = ("rag_version", "prompt_version", "index_version", "chunking_version", "model_name",
                   "retrieval_config_version", "embedding_model", "reranker_model")
IMPACT_SLICES = ("language", "tenant", "query_type")
DRIFT_TABLES = ("query_mix", "freshness_daily", "retrieval_scores", "quality_slis", "online_quality",
                "golden_coverage")
DASHBOARD_FILE = "dashboard.json"  # rag_loop.reporting.dashboard_figures.DASHBOARD_FILE
LOOKBACK = timedelta(days=7)


@dataclass
class Facts:
    request: IncidentRequest
    traces: pd.DataFrame
    impact: dict[str, Any] = field(default_factory=dict)
    detection: dict[str, Any] = field(default_factory=dict)
    timeline: dict[str, Any] = field(default_factory=dict)
    root_cause: dict[str, Any] = field(default_factory=dict)
    offline: dict[str, Any] = field(default_factory=dict)
    lineage: dict[str, Any] = field(default_factory=dict)


def _days(request: IncidentRequest) -> list:
    first, last = request.start.date(), (request.end - timedelta(microseconds=1)).date()
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def gather(con: duckdb.DuckDBPyConnection, request: IncidentRequest, reports_dir: Path, goldens_dir: Path,
           incident_id: str | None = None, traces: pd.DataFrame | None = None) -> Facts:
    traces = window_traces(con, request.start, request.end, request.slices, request.query_contains) \
        if traces is None else traces
    facts = Facts(request, traces)
    facts.impact = impact(con, request, traces)
    facts.detection = detection(con, request, Path(reports_dir), traces)
    facts.timeline = timeline(con, request, traces, Path(goldens_dir))
    facts.root_cause = root_cause(con, traces)
    facts.offline = offline(con, request, traces, Path(goldens_dir))
    # the incident's stored traces (what the queue and the releases used), not today's recount
    facts.lineage = lineage(con, Path(goldens_dir), incident_id) if incident_id else {}
    return facts


def impact(con: duckdb.DuckDBPyConnection, request: IncidentRequest, traces: pd.DataFrame) -> dict[str, Any]:
    failing = traces[traces["failing"]]
    result: dict[str, Any] = {
        "requests": len(traces), "failing": len(failing),
        "users": int(traces["user_id"].nunique()) if traces["user_id"].notna().any() else None,
        "sessions": int(traces["session_id"].nunique()) if traces["session_id"].notna().any() else None,
        "selected": int(traces["candidate"].sum()) if len(traces) else 0,
        "first": traces["timestamp"].min() if len(traces) else None,
        "last": traces["timestamp"].max() if len(traces) else None,
    }
    slices = {}
    for name in IMPACT_SLICES:
        values = traces[name].fillna("(not recorded)")
        if len(traces) and traces[name].notna().any():
            table = (traces.assign(value=values).groupby("value")
                     .agg(requests=("trace_id", "size"), failing=("failing", "sum"))
                     .sort_values(["requests"], ascending=False).reset_index())
            slices[name] = table
    result["slices"] = slices
    result["language_detected"] = int((traces["language_source"] == "detected").sum()) if len(traces) else 0
    labels = intent_labels(con)
    if len(traces) and traces["cluster_id"].notna().any():
        intents = (traces[traces["cluster_id"].notna()].groupby("cluster_id")
                   .agg(requests=("trace_id", "size"), failing=("failing", "sum")).reset_index()
                   .sort_values(["failing", "requests", "cluster_id"], ascending=[False, False, True]))
        intents["label"] = intents["cluster_id"].map(lambda c: labels.get(c, ""))
        result["intents"] = intents.reset_index(drop=True)
    else:
        result["intents"] = pd.DataFrame(columns=["cluster_id", "requests", "failing", "label"])
    result["unclustered"] = int(traces["cluster_id"].isna().sum()) if len(traces) else 0
    before = window_traces(con, request.start - (request.end - request.start), request.start,
                           request.slices, request.query_contains)
    result["before"] = {"requests": len(before), "failing": int(before["failing"].sum()) if len(before) else 0}
    result["examples"] = failing.head(10)[["trace_id", "timestamp", "original_query", "reasons"]]
    return result


def _dashboard(reports_dir: Path) -> dict | None:
    try:
        return json.loads((reports_dir / DASHBOARD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def detection(con: duckdb.DuckDBPyConnection, request: IncidentRequest, reports_dir: Path,
              traces: pd.DataFrame) -> dict[str, Any]:
    days = {d.isoformat() for d in _days(request)}
    board = _dashboard(reports_dir)
    result: dict[str, Any] = {"dashboard": board is not None}
    if board is not None:
        change = board.get("change") or {}
        result["drift_checked"] = bool(change.get("drift_checked"))
        result["fired"] = sorted((a for a in change.get("alerts") or [] if str(a.get("day")) in days),
                                 key=lambda a: (str(a.get("day")), str(a.get("asset")), str(a.get("check"))))
        result["slo"] = [s for s in (board.get("quality") or {}).get("slo") or [] if str(s.get("day")) in days]
        result["dashboard_generated_at"] = board.get("generated_at")
    computed = {}
    for table in DRIFT_TABLES:
        if has_table(con, table):
            stored = {str(d) for (d,) in con.execute(f"SELECT DISTINCT day FROM {table}").fetchall()}
            computed[table] = sorted(stored & days)
    result["computed"] = computed
    fired_assets = {str(a.get("asset")) for a in result.get("fired", [])}
    result["silent"] = sorted(t for t, d in computed.items() if d and t not in fired_assets and t != "golden_coverage")
    coverage = []
    if has_table(con, "golden_coverage"):
        limit = CoverageSettings().min_share
        for day, share, n, release in con.execute(
                "SELECT day, covered_share, n, release FROM golden_coverage WHERE slice = 'all' "
                "AND day IN (SELECT unnest($days::DATE[])) ORDER BY day", {"days": sorted(days)}).fetchall():
            verdict = assess(COVERAGE_CHECK, share, int(n or 0), limit) if release else None
            coverage.append({"day": str(day), "release": release, "covered_share": share, "n": n,
                             "state": ("not evaluated: no release" if verdict is None else
                                       verdict.severity if verdict.fired else
                                       "met" if verdict.evaluated else f"not evaluated: {verdict.note}")})
    result["coverage"] = coverage
    result["coverage_floor"] = CoverageSettings().min_share.warn
    result["feedback"] = request_feedback(con, traces)
    return result


def request_feedback(con: duckdb.DuckDBPyConnection, traces: pd.DataFrame) -> pd.DataFrame:
    """The users' negative feedback on the incident's requests, by category."""
    if not has_table(con, "trace_feedback"):
        return pd.DataFrame(columns=["category", "n"])
    con.register("_incident_ids", traces[["trace_id"]])
    try:
        return con.execute("""
            SELECT coalesce(category, '(none)') AS category, count(*) AS n FROM trace_feedback
            WHERE trace_id IN (SELECT trace_id FROM _incident_ids)
              AND lower(rating) IN ('down', 'thumbs_down', 'negative', '-1', '0')
            GROUP BY 1 ORDER BY 2 DESC, 1""").df()
    finally:
        con.unregister("_incident_ids")


def timeline(con: duckdb.DuckDBPyConnection, request: IncidentRequest, traces: pd.DataFrame,
             goldens_dir: Path) -> dict[str, Any]:
    since = request.start - LOOKBACK
    events: list[dict[str, Any]] = []
    if has_table(con, "raw_traces"):
        have = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'raw_traces' "
                                          "AND schema_name = current_schema()").fetchall()}
        for column in (c for c in VERSION_COLUMNS if c in have):
            rows = con.execute(f"""
                SELECT {column}, min("timestamp") AS first_seen, count(*) FILTER ("timestamp" >= $start
                       AND "timestamp" < $end) AS in_window
                FROM raw_traces WHERE {column} IS NOT NULL GROUP BY 1
                HAVING min("timestamp") >= $since AND min("timestamp") < $end ORDER BY 2""",
                               {"since": since, "start": request.start, "end": request.end}).fetchall()
            events += [{"at": at, "kind": f"{column} first served", "what": str(value),
                        "detail": f"{n} of the window's requests"} for value, at, n in rows]
    if has_table(con, "documents"):
        for doc, version, updated, indexed in con.execute("""
                SELECT doc_id, version, source_updated_at, indexed_at FROM documents
                WHERE (source_updated_at >= $since AND source_updated_at < $end)
                   OR (indexed_at >= $since AND indexed_at < $end) ORDER BY source_updated_at""",
                                                         {"since": since, "end": request.end}).fetchall():
            lag = (f"indexed {indexed:%Y-%m-%d %H:%M}, {(indexed - updated).total_seconds() / 3600:.1f} h later"
                   if indexed is not None else "not indexed")
            events.append({"at": updated, "kind": "document version published", "what": f"{doc} {version}",
                           "detail": lag})
    if has_table(con, "golden_releases"):
        for version, created in con.execute("SELECT version, created_at FROM golden_releases WHERE created_at "
                                            ">= $since AND created_at < $end ORDER BY 2",
                                            {"since": since, "end": request.end}).fetchall():
            events.append({"at": created, "kind": "golden release", "what": version, "detail": ""})
    failing = traces[traces["failing"]]
    if len(failing):
        events.append({"at": failing["timestamp"].min(), "kind": "first failing request", "what":
                       str(failing["trace_id"].iloc[0]), "detail": ", ".join(failing["reasons"].iloc[0][:4])})
        events.append({"at": failing["timestamp"].max(), "kind": "last failing request in the window",
                       "what": str(failing["trace_id"].iloc[-1]), "detail": ""})
        hours = failing["timestamp"].dt.floor("h").value_counts()
        peak = hours.index[0]
        events.append({"at": peak, "kind": "peak hour of failing requests", "what": f"{int(hours.iloc[0])}",
                       "detail": "failing requests in that hour"})
    events.sort(key=lambda e: pd.Timestamp(e["at"]))
    return {"events": events, "since": since, "versions_recorded": has_table(con, "raw_traces")}


def root_cause(con: duckdb.DuckDBPyConnection, traces: pd.DataFrame) -> dict[str, Any]:
    def count(values) -> dict[str, int]:
        series = pd.Series([v for vs in values for v in vs], dtype=object)
        return {str(k): int(v) for k, v in series.value_counts().items()} if len(series) else {}
    labelled = traces["failure_type"].dropna()
    judged = traces[traces["failing_metrics"].map(len) > 0]
    judge_versions: dict[str, int] = {}
    if has_table(con, "trace_judgments") and len(traces):
        con.register("_incident_ids", traces[["trace_id"]])
        try:
            judge_versions = dict(con.execute(
                "SELECT judge_version, count(DISTINCT trace_id) FROM trace_judgments WHERE trace_id IN "
                "(SELECT trace_id FROM _incident_ids) GROUP BY 1 ORDER BY 1").fetchall())
        finally:
            con.unregister("_incident_ids")
    return {"labelled": {str(k): int(v) for k, v in labelled.value_counts().items()},
            "labelled_n": len(labelled), "judged_failing": count(traces["failing_metrics"]),
            "judged_failing_n": len(judged), "judged_n": sum(judge_versions.values()),
            "signals": count(traces["signals"]), "judge_versions": judge_versions,
            "feedback_categories": {str(k): int(v) for k, v in traces["feedback_category"].dropna()
                                    .value_counts().items()}}


def gating_release(con: duckdb.DuckDBPyConnection, request: IncidentRequest,
                   goldens_dir: Path) -> tuple[str | None, str]:
    """(release, how it was found): named by the user; else the release of the newest eval run
    started before the window; else the newest release created before it; else none."""
    versions = release_versions(goldens_dir)
    if request.gating_release:
        return request.gating_release, "named when the incident was opened"
    if has_table(con, "eval_runs"):
        row = con.execute("SELECT release_version, run_id FROM eval_runs WHERE started_at < $start "
                          "AND release_version IS NOT NULL ORDER BY started_at DESC LIMIT 1",
                          {"start": request.start}).fetchall()
        if row and row[0][0] in versions:
            return row[0][0], f"tested by eval run {row[0][1]}, the last before the window"
    for version in reversed(versions):
        created = read_manifest(goldens_dir, version).get("created_at")
        if created and pd.Timestamp(created) < pd.Timestamp(request.start):
            return version, "the newest release created before the window (no eval run recorded before it)"
    return None, "no release was created, and no eval run started, before the window"


def offline(con: duckdb.DuckDBPyConnection, request: IncidentRequest, traces: pd.DataFrame,
            goldens_dir: Path) -> dict[str, Any]:
    gating, how = gating_release(con, request, goldens_dir)
    versions = release_versions(goldens_dir)
    newest = versions[-1] if versions else None
    failing = traces[traces["failing"] & traces["cluster_id"].notna()]
    intents = (failing.groupby("cluster_id").size().sort_values(ascending=False).head(15)
               if len(failing) else pd.Series(dtype=int))
    labels = intent_labels(con)
    covered = {}
    for version in dict.fromkeys(v for v in (gating, newest) if v):
        if version not in versions:
            covered[version] = None  # named but not on disk
            continue
        covered[version] = golden_intents(con, release_goldens(goldens_dir, version))[0]
    rows = [{"cluster_id": c, "label": labels.get(c, ""), "failing": int(n),
             **{v: (None if s is None else c in s) for v, s in covered.items()}} for c, n in intents.items()]
    return {"gating": gating, "gating_how": how, "newest": newest, "releases": list(covered),
            "missing_release": [v for v, s in covered.items() if s is None],
            "intents": rows, "failing_unclustered": int((traces["failing"] & traces["cluster_id"].isna()).sum())}


def incident_goldens(goldens_dir: Path, incident_id: str, trace_ids: set[str]) -> pd.DataFrame:
    """Per release, the goldens built from the incident's traces (recorded as the incident's in
    their metadata, or — releases made before the incident was opened — from one of its traces)."""
    rows = []
    for version in release_versions(goldens_dir):
        for golden in read_goldens(goldens_dir, version):
            meta = golden.get("additional_metadata") or {}
            traces = {meta.get("trace_id"), *(meta.get("source_trace_ids") or [])}
            recorded = incident_id in (meta.get("incidents") or [])
            if recorded or traces & trace_ids:
                rows.append({"version": version, "golden": golden.get("name"), "trace_id": meta.get("trace_id"),
                             "origin": meta.get("origin"), "failure_type": meta.get("failure_type"),
                             "recorded": recorded})
    return pd.DataFrame(rows, columns=["version", "golden", "trace_id", "origin", "failure_type", "recorded"])


def golden_eval_runs(con: duckdb.DuckDBPyConnection, goldens: list[str]) -> pd.DataFrame:
    """The eval runs that tested any of `goldens`: per run, its release, when, the goldens it ran
    and how many of their metric results passed, failed or errored."""
    columns = ["run_id", "started_at", "release_version", "goldens", "passed", "failed", "errored", "blocked"]
    if not goldens or not has_table(con, "eval_results"):
        return pd.DataFrame(columns=columns)
    runs = has_table(con, "eval_runs")
    return con.execute(f"""
        SELECT r.run_id, {'any_value(e.started_at)' if runs else 'NULL'} AS started_at,
               {'any_value(e.release_version)' if runs else 'NULL'} AS release_version,
               count(DISTINCT r.golden) AS goldens,
               count(*) FILTER (r.passed AND NOT coalesce(r.errored, false)) AS passed,
               count(*) FILTER (NOT r.passed AND NOT coalesce(r.errored, false)) AS failed,
               count(*) FILTER (r.errored) AS errored, {'any_value(e.blocked)' if runs else 'NULL'} AS blocked
        FROM eval_results r {'LEFT JOIN eval_runs e USING (run_id)' if runs else ''}
        WHERE r.golden IN (SELECT unnest($goldens::VARCHAR[]))
        GROUP BY r.run_id ORDER BY started_at NULLS LAST, r.run_id""", {"goldens": goldens}).df()[columns]


def lineage(con: duckdb.DuckDBPyConnection, goldens_dir: Path, incident_id: str,
            traces: pd.DataFrame | None = None) -> dict[str, Any]:
    """The incident's goldens per release and the eval runs that tested them."""
    if traces is not None:
        ids = set(traces.loc[traces["failing"], "trace_id"])
    elif has_table(con, "incident_traces"):
        ids = {t for (t,) in con.execute("SELECT trace_id FROM incident_traces WHERE incident_id = ? AND failing",
                                         [incident_id]).fetchall()}
    else:
        ids = set()  # only goldens that record the incident
    goldens = incident_goldens(goldens_dir, incident_id, ids)
    runs = golden_eval_runs(con, sorted(set(goldens["golden"])))
    return {"goldens": goldens, "runs": runs,
            "releases": sorted(set(goldens["version"])), "newest_with_goldens":
                (sorted(set(goldens["version"]))[-1] if len(goldens) else None)}


def golden_origin(con: duckdb.DuckDBPyConnection, goldens_dir: Path, name: str) -> dict[str, Any]:
    """From a golden back: per release holding it, its trace and the traces it stood for, the
    incidents it came from (recorded in its metadata, or its traces are an incident's failing
    traces), and the eval runs that tested it."""
    from rag_loop.store.incidents import trace_incidents
    by_trace = trace_incidents(con)
    releases = []
    for version in release_versions(goldens_dir):
        for golden in read_goldens(goldens_dir, version):
            if golden.get("name") != name:
                continue
            meta = golden.get("additional_metadata") or {}
            traces = list(dict.fromkeys([meta.get("trace_id"), *(meta.get("source_trace_ids") or [])]))
            found = sorted({i for t in traces for i in by_trace.get(t, ())})
            releases.append({"version": version, "trace_id": meta.get("trace_id"), "traces": traces,
                             "origin": meta.get("origin"), "recorded_incidents": list(meta.get("incidents") or []),
                             "incidents": sorted({*found, *(meta.get("incidents") or [])})})
    return {"golden": name, "releases": releases, "runs": golden_eval_runs(con, [name])}
