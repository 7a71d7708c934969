"""A tiny DuckDB world for the incident tests: a day before and two days of traffic, signals,
a judgement, a label, feedback, a version change, a document update, clusters, a release."""

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rag_loop.store.ddl import LABELS_DDL, ONLINE_DDL
from rag_loop.store.releases import serialize
from rag_loop.store.tables import create_tables

DAY = datetime(2026, 11, 12, tzinfo=UTC)


def tiny_world(con, goldens_dir: Path | None = None):
    """t0 the day before (vi, ok); t1..t6 on 11-12/11-13: t1 vi failing (low rerank), t2 vi judged
    failing, t3 en labelled retrieval, t4 en thumbs-down, t5 en ok, t6 vi ok with prompt v2 (first
    served 11-12). Intents: A (t1, t2), B (t3, t4), C (t0, t5); t6 unclustered. Release v0001
    (created 11-01) holds a golden of C only."""
    create_tables(con)
    rows = [("t0", DAY - timedelta(hours=12), "vi", "acme", "p1", "hello"),
            ("t1", DAY + timedelta(hours=1), "vi", "acme", "p1", "lỗi ERR-977 là gì"),
            ("t2", DAY + timedelta(hours=2), "vi", "globex", "p1", "ERR-977 *again* <b>"),
            ("t3", DAY + timedelta(hours=3), "en", "acme", "p1", "what is err-977"),
            ("t4", DAY + timedelta(hours=25), "en", "acme", "p1", "refund policy"),
            ("t5", DAY + timedelta(hours=26), "en", "globex", "p1", "leave days"),
            ("t6", DAY + timedelta(hours=27), "vi", "acme", "p2", "ngày phép")]
    for trace_id, at, language, tenant, prompt, query in rows:
        con.execute('INSERT INTO raw_traces (trace_id, "timestamp", original_query, language, tenant, '
                    "query_type, prompt_version, answer, session_id) VALUES (?, ?, ?, ?, ?, 'faq', ?, 'a', ?)",
                    [trace_id, at, query, language, tenant, prompt, f"s-{trace_id}"])
    con.execute("CREATE TABLE trace_signals (trace_id VARCHAR, signals VARCHAR[])")
    con.execute("INSERT INTO trace_signals VALUES ('t1', ['low_rerank_score']), ('t4', ['thumbs_down'])")
    con.execute("INSERT INTO trace_feedback VALUES ('t4', 'negative', 'missing_info', NULL, '2026-11-13')")
    con.execute("CREATE TABLE failure_candidates (trace_id VARCHAR, inclusion_probability DOUBLE)")
    con.execute("INSERT INTO failure_candidates SELECT unnest(['t0','t1','t2','t3','t4','t5']), 1.0")
    con.execute("CREATE TABLE trace_clusters (trace_id VARCHAR, language VARCHAR, cluster_id VARCHAR)")
    con.execute("INSERT INTO trace_clusters VALUES ('t1','vi','A'), ('t2','vi','A'), ('t3','en','B'), "
                "('t4','en','B'), ('t0','vi','C'), ('t5','en','C')")
    con.execute("CREATE TABLE intent_clusters (cluster_id VARCHAR, label VARCHAR, medoid_query VARCHAR)")
    con.execute("INSERT INTO intent_clusters VALUES ('A', 'err · 977', 'q'), ('B', 'refund', 'q'), ('C', 'hi', 'q')")
    con.execute(open_judgments())
    con.execute(LABELS_DDL)
    con.execute("INSERT INTO trace_judgments (trace_id, metric, judge_version, status, passed, judged_at) "
                "VALUES ('t2', 'Faithfulness', 'j1', 'judged', false, now()), "
                "('t5', 'Faithfulness', 'j1', 'judged', true, now())")
    con.execute("INSERT INTO curated_labels (label_id, trace_id, decision, labeled_at, failure_type, origin, "
                "expected_output, expected_sources, tags, source_trace_ids, cluster_id, curator, input) "
                "VALUES ('l3', 't3', 'accept', now(), 'retrieval', 'production_failure', 'x', [], [], ['t3'], "
                "'B', 'ann', 'what is err-977')")
    con.execute("INSERT INTO documents VALUES ('pay', '2026', 'Pay', 'en', '2026-11-11 09:00+00', "
                "'2026-11-11 15:30+00', true)")
    if goldens_dir is not None:
        release(goldens_dir, "v0001", [("g-c", "t0", "C")], "2026-11-01T00:00:00+00:00")
    return con


def open_judgments() -> str:
    return ONLINE_DDL


def release(goldens_dir: Path, version: str, goldens: list[tuple], created_at: str) -> None:
    """A release folder by hand: goldens (name, trace, cluster[, incident ids])."""
    folder = goldens_dir / version
    folder.mkdir(parents=True)
    rows = [{"name": name, "input": "q", "expected_output": "x",
             "additional_metadata": {"trace_id": trace, "source_trace_ids": [trace], "cluster_id": cluster,
                                     "origin": "incident" if incidents else "production_failure",
                                     "failure_type": "retrieval", "tags": [],
                                     **({"incidents": list(incidents)} if incidents else {})}}
            for name, trace, cluster, *rest in goldens for incidents in [rest[0] if rest else ()]]
    payload = serialize(rows)
    (folder / "goldens.json").write_text(payload)
    (folder / "manifest.json").write_text(json.dumps({"version": version, "created_at": created_at,
                                                      "sha256": hashlib.sha256(payload.encode()).hexdigest()}))
