"""What the queue stage exports for the curator workspace beside the queue itself: the
knowledge base to pick expected sources from, and the intent clusters to explore (the
workspace reads files, never the database)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from rag_loop.curation.label_rules import CITABLE_SOURCES
from rag_loop.store.files import write_parquet_atomically
from rag_loop.store.judgments import current_judge_version
from rag_loop.store.tables import has_table


def export_knowledge(con: duckdb.DuckDBPyConnection, queue_dir: Path) -> Path:
    """`knowledge.parquet`: the citable sources (`CITABLE_SOURCES`: the knowledge base's chunks,
    else the chunks production traces retrieved, `seen_in` saying which) with title, language,
    text, published (or first seen) at and the document's newest version, what curators pick
    expected sources from; the label stage accepts the same sources."""
    path = queue_dir / "knowledge.parquet"
    write_parquet_atomically(con.sql(CITABLE_SOURCES).to_arrow_table(), path)
    return path


def export_intents(con: duckdb.DuckDBPyConnection, queue_dir: Path) -> Path:
    """`intents.parquet`: per intent cluster its volume (Σ 1/π of its selected traces), the
    weighted share with a bad signal, the weighted judged pass rate (every metric the current
    judge scored), the trend (share of its volume in the newest week of traffic against the
    share before), and a 2-D map position (PCA of the centroids, per language)."""
    version = current_judge_version(con) or ""
    judged = ("SELECT trace_id, avg(passed::INT) AS judged_pass FROM trace_judgments "
              "WHERE judge_version = $version AND status = 'judged' AND passed IS NOT NULL GROUP BY 1"
              if has_table(con, "trace_judgments") else
              "SELECT NULL::VARCHAR AS trace_id, NULL::DOUBLE AS judged_pass WHERE false")
    frame = con.execute(f"""
        WITH members AS (
            SELECT t.cluster_id, 1 / c.inclusion_probability AS w, (s.signal_count > 0)::INT AS flagged,
                   j.judged_pass, s.day >= (SELECT max(day) - 6 FROM trace_signals) AS recent
            FROM trace_clusters t JOIN failure_candidates c USING (trace_id)
            JOIN trace_signals s USING (trace_id) LEFT JOIN ({judged}) j USING (trace_id)),
        figures AS (
            SELECT cluster_id, sum(w) AS volume, sum(w * flagged) / sum(w) AS failure_rate,
                   sum(w * judged_pass) / nullif(sum(w) FILTER (judged_pass IS NOT NULL), 0) AS judged_pass_rate,
                   count(*) FILTER (judged_pass IS NOT NULL) AS judged,
                   sum(w) FILTER (recent) / sum(w) AS recent_share
            FROM members GROUP BY 1)
        SELECT i.cluster_id, i.language, i.label, i.size, i.is_singleton, coalesce(i.is_new, false) AS is_new,
               i.medoid_query, i.first_seen, i.last_seen, f.volume, f.failure_rate, f.judged_pass_rate,
               f.judged, f.recent_share - (SELECT sum(w) FILTER (recent) / sum(w) FROM members) AS trend,
               i.centroid
        FROM intent_clusters i LEFT JOIN figures f USING (cluster_id) ORDER BY f.volume DESC NULLS LAST""",
                        {"version": version} if has_table(con, "trace_judgments") else {}).df()
    frame["x"], frame["y"] = np.nan, np.nan
    for _, group in frame[~frame["is_singleton"]].groupby("language"):
        vectors = np.stack(group["centroid"].map(np.asarray).to_numpy()) if len(group) else None
        if vectors is not None and len(group) >= 3:
            from sklearn.decomposition import PCA  # sklearn is imported where it is used
            points = PCA(n_components=2, random_state=0).fit_transform(vectors)
            frame.loc[group.index, "x"], frame.loc[group.index, "y"] = points[:, 0], points[:, 1]
    path = queue_dir / "intents.parquet"
    write_parquet_atomically(pa.Table.from_pandas(frame.drop(columns=["centroid"]), preserve_index=False), path)
    return path


def cluster_phrasings(con: duckdb.DuckDBPyConnection, limit: int = 12) -> dict[str, list[dict]]:
    """Per intent cluster, its members' phrasings (case and spacing folded) with how many
    selected traces asked each, the most frequent first."""
    rows = con.sql(f"""
        SELECT cluster_id, list({{'query': query, 'count': n}} ORDER BY n DESC, query)[:{int(limit)}] AS phrasings
        FROM (SELECT t.cluster_id, any_value(r.original_query) AS query, count(*) AS n
              FROM trace_clusters t JOIN raw_traces r USING (trace_id)
              GROUP BY t.cluster_id, lower(trim(regexp_replace(r.original_query, '\\s+', ' ', 'g'))))
        GROUP BY cluster_id""").to_arrow_table().to_pylist()
    return {row["cluster_id"]: row["phrasings"] for row in rows}
