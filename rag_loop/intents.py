"""Stage 3 on the database: embed the candidates, cluster them by intent per language, and
build the curation queue. Each function reads and writes DuckDB tables and returns figures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from rag_loop.clustering import (
    NOISE,
    Clustering,
    ClusterSettings,
    cluster_labels,
    cluster_vectors,
    match_clusters,
    mix,
)
from rag_loop.curation import (
    CURATOR_FIELDS,
    QueueSettings,
    batch_name,
    covered_by_goldens,
    export_queue,
    load_golden_inputs,
    select_representatives,
    suggest_failure_type,
    suggest_origin,
)
from rag_loop.embedding import LanguageRouter, text_hash
from rag_loop.schema import Priority
from rag_loop.storage import has_table, replace_table, retrieval_contexts
from rag_loop.tables import EMBEDDING_CACHE_DDL

Log = Callable[[str], None]
UNKNOWN_LANGUAGE = "und"

_MEMBERS_SQL = f"""
    SELECT c.trace_id, t.original_query AS query, coalesce(t.language, '{UNKNOWN_LANGUAGE}') AS language,
           t.answer, t.turn_id, t.rewritten_query, t."timestamp", c.priority, c.signals,
           1 / c.inclusion_probability AS weight, s.feedback_category,
           coalesce(top.reranked_out, false) AS top_chunk_reranked_out
    FROM failure_candidates c
    JOIN raw_traces t USING (trace_id)
    JOIN trace_signals s USING (trace_id)
    LEFT JOIN (SELECT trace_id, bool_or(rank = 1 AND selected = false) AS reranked_out
               FROM trace_chunks GROUP BY trace_id) top USING (trace_id)
    ORDER BY c.trace_id"""


def candidate_members(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The selected traces with what clustering and curation need, and a suggested failure type."""
    members = con.execute(_MEMBERS_SQL).df()
    members["signals"] = members["signals"].map(list)
    suggestions = [suggest_failure_type(row) for row in members.to_dict("records")]
    members["suggested_failure_type"] = [str(s[0]) for s in suggestions]
    members["suggestion_reason"] = [s[1] for s in suggestions]
    return members


def embed_candidates(con: duckdb.DuckDBPyConnection, router: LanguageRouter,
                     log: Log = lambda _: None) -> dict[str, object]:
    """(Re)build `query_embeddings` (trace_id, language, model_id, text_hash) for the
    candidates; vectors live in `embedding_cache`, so only new texts are embedded."""
    members = con.execute(_MEMBERS_SQL).df()
    rows, figures, default_model, truncated = [], {}, {}, 0
    for language, group in members.groupby("language", sort=True):
        model_id, _ = router.embed(con, group["query"].tolist(), language, log=log)
        hashes = [text_hash(router.prepare(q, language)) for q in group["query"]]
        rows.append(pd.DataFrame({"trace_id": group["trace_id"], "language": language,
                                  "model_id": model_id, "text_hash": hashes}))
        figures[f"embedded_{language}"] = len(group)
        figures[f"model_{language}"] = model_id
        precision = getattr(router.for_language(language), "precision", None)
        if precision:
            figures[f"precision_{language}"] = precision
        if not router.configured(language):
            default_model[language] = len(group)
        cut = router.count_truncated(group["query"].drop_duplicates().tolist(), language) or 0
        if cut:
            log(f"{language}: {cut} distinct queries longer than {model_id}'s window were "
                "embedded from their first tokens")
        truncated += cut
    figures["languages_on_default_model"] = default_model  # no model of their own configured
    figures["truncated_queries"] = truncated
    table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        columns=["trace_id", "language", "model_id", "text_hash"])
    replace_table(con, "query_embeddings", table)
    return {"traces": len(table), **figures}


def load_vectors(con: duckdb.DuckDBPyConnection, language: str) -> tuple[list[str], np.ndarray]:
    """Trace ids and vectors of one language from `query_embeddings` + `embedding_cache`."""
    con.execute(EMBEDDING_CACHE_DDL)
    table = con.sql("""
        SELECT e.trace_id, c.vector FROM query_embeddings e
        JOIN embedding_cache c USING (model_id, text_hash)
        WHERE e.language = $language ORDER BY e.trace_id""", params={"language": language}).to_arrow_table()
    if table.num_rows == 0:
        return [], np.zeros((0, 0), np.float32)
    flat = table.column("vector").combine_chunks().flatten().to_numpy()
    return table.column("trace_id").to_pylist(), flat.reshape(table.num_rows, -1).astype(np.float32)


@dataclass
class LanguageClusters:
    """One language's clustering, aligned with `trace_ids`."""

    trace_ids: list[str]
    vectors: np.ndarray
    clustering: Clustering
    cluster_ids: list[str]  # per cluster index


def cluster_intents(con: duckdb.DuckDBPyConnection, settings: ClusterSettings,
                    log: Log = lambda _: None) -> dict[str, object]:
    """(Re)build `intent_clusters` (clusters and singletons) and `trace_clusters` per language.

    A cluster keeps the id of the previous run's cluster it continues (matched on centroids);
    unmatched clusters get fresh ids and `is_new`.
    """
    members = candidate_members(con).set_index("trace_id")
    previous = _previous_clusters(con)
    cluster_rows, assignments = [], []
    for language in sorted(members["language"].unique()):
        trace_ids, vectors = load_vectors(con, language)
        if not trace_ids:
            continue
        clustering = cluster_vectors(vectors, settings)
        group = members.loc[trace_ids]
        texts = group["query"].tolist()
        ids, is_new = _stable_ids(clustering, previous, language)
        point_ids = [ids[c] if c != NOISE else f"{language}-s-{text_hash(texts[p])[:10]}"
                     for p, c in enumerate(clustering.labels)]
        labels = cluster_labels(texts, clustering.labels)
        for index in range(clustering.count):
            cluster_rows.append(_cluster_row(
                ids[index], language, group, np.flatnonzero(clustering.labels == index),
                clustering.medoids[index], labels.get(index, ""), clustering.centroids[index],
                clustering.radii[index], is_new[index], is_singleton=False))
        noise = np.flatnonzero(clustering.labels == NOISE)
        for singleton in dict.fromkeys(point_ids[p] for p in noise):  # same text: one singleton
            points = np.array([p for p in noise if point_ids[p] == singleton])
            cluster_rows.append(_cluster_row(
                singleton, language, group, points, points[0], texts[points[0]],
                vectors[points[0]], 0.0,
                None if previous.empty else singleton not in set(previous["cluster_id"]),
                is_singleton=True))
        centres = [clustering.centroids[c] if c != NOISE else vectors[p]
                   for p, c in enumerate(clustering.labels)]
        assignments.append(pd.DataFrame({
            "trace_id": trace_ids, "language": language, "cluster_id": point_ids,
            "similarity": np.einsum("ij,ij->i", vectors, np.asarray(centres))}))
        log(f"{language}: {len(trace_ids)} queries -> {clustering.count} clusters, "
            f"{len(noise)} singleton queries")
    clusters = pd.DataFrame(cluster_rows)
    replace_table(con, "intent_clusters", clusters)
    replace_table(con, "trace_clusters", pd.concat(assignments, ignore_index=True) if assignments
                   else pd.DataFrame(columns=["trace_id", "language", "cluster_id", "similarity"]))
    if clusters.empty:
        return {"clusters": 0, "singletons": 0, "new_clusters": 0}
    real = clusters[~clusters["is_singleton"]]
    return {"clusters": len(real), "singletons": int(clusters["is_singleton"].sum()),
            "new_clusters": int(real["is_new"].eq(True).sum()),
            **{f"clusters_{lang}": int((real["language"] == lang).sum())
               for lang in sorted(clusters["language"].unique())}}


def _previous_clusters(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    if not has_table(con, "intent_clusters"):
        return pd.DataFrame(columns=["cluster_id", "language", "centroid", "is_singleton"])
    return con.execute("SELECT cluster_id, language, centroid, is_singleton FROM intent_clusters").df()


def _stable_ids(clustering: Clustering, previous: pd.DataFrame,
                language: str) -> tuple[list[str], list[bool | None]]:
    before = previous[(previous["language"] == language) & ~previous["is_singleton"].astype(bool)]
    old_centroids = np.stack(before["centroid"].map(np.asarray).tolist()) if len(before) else \
        np.zeros((0, clustering.centroids.shape[1]))
    if len(before) and old_centroids.shape[1] != clustering.centroids.shape[1]:
        old_centroids = np.zeros((0, clustering.centroids.shape[1]))  # the model changed
    matched = match_clusters(old_centroids, clustering.centroids)
    first_run = previous.empty  # nothing to be new relative to: is_new stays unknown
    numbers = [int(c.rsplit("-", 1)[1]) for c in before["cluster_id"] if c.rsplit("-", 1)[1].isdigit()]
    next_number = max(numbers, default=0) + 1
    ids, is_new = [], []
    for match in matched:
        if match is None:
            ids.append(f"{language}-{next_number:04d}")
            next_number += 1
        else:
            ids.append(before["cluster_id"].iloc[match])
        is_new.append(None if first_run else match is None)
    return ids, is_new


def _cluster_row(cluster_id: str, language: str, group: pd.DataFrame, points: np.ndarray,
                 medoid: int, label: str, centroid: np.ndarray, radius: float, is_new: bool | None,
                 is_singleton: bool) -> dict[str, object]:
    rows = group.iloc[points]
    return {
        "cluster_id": cluster_id, "language": language, "is_singleton": is_singleton,
        "size": len(points), "weight": float(rows["weight"].sum()),
        "label": label, "medoid_trace_id": group.index[medoid], "medoid_query": group["query"].iloc[medoid],
        "member_trace_ids": rows.index.tolist(),
        "signal_mix": json.dumps(mix(rows["signals"].tolist())),
        "failure_mix": json.dumps(mix([[t] for t in rows["suggested_failure_type"]])),
        "priority_mix": json.dumps(mix([[p] for p in rows["priority"]])),
        "first_seen": rows["timestamp"].min(), "last_seen": rows["timestamp"].max(),
        "is_new": is_new, "centroid": centroid.astype(np.float32).tolist(), "radius": radius,
    }




def build_curation_queue(con: duckdb.DuckDBPyConnection, router: LanguageRouter,
                         settings: QueueSettings, queue_dir: Path, goldens_dir: Path,
                         log: Log = lambda _: None) -> dict[str, object]:
    """(Re)build `curation_queue` from the clusters and export it as `<batch>.jsonl` / `.csv`.

    Representatives already covered by the newest golden release are counted, not queued.
    A representative of a cluster that is new since the previous clustering run is at
    least P2 (novel).
    """
    members = candidate_members(con).set_index("trace_id")
    clusters = con.execute("SELECT * FROM intent_clusters").df().set_index("cluster_id")
    assigned = dict(con.execute("SELECT trace_id, cluster_id FROM trace_clusters").fetchall())
    goldens = load_golden_inputs(goldens_dir)
    parts, covered = [], 0
    for language in sorted(members["language"].unique()):
        trace_ids, vectors = load_vectors(con, language)
        if not trace_ids:
            continue
        group = members.loc[trace_ids].reset_index()
        clustering, cluster_ids = _clustering_from_tables(trace_ids, vectors, assigned, clusters)
        queue = select_representatives(group, vectors, clustering, settings)
        queue["cluster_id"] = [cluster_ids[c] if c != NOISE else assigned[trace_ids[p]]
                               for c, p in zip(queue["cluster"], queue["point"])]
        inputs = [g["input"] for g in goldens if g["language"] in (None, language)]
        if inputs:
            _, golden_vectors = router.embed(con, inputs, language, log=log)
            hit, _ = covered_by_goldens(vectors[queue["point"]], golden_vectors,
                                           settings.golden_similarity)
            covered += int(hit.sum())
            queue = queue[~hit]
        queue = queue.assign(trace_id=[trace_ids[p] for p in queue["point"]])
        parts.append(queue.drop(columns=["point", "cluster"]))
    queue = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    rows = _queue_rows(con, queue, members, clusters) if len(queue) else []
    last_day = str(members["timestamp"].max())[:10] if len(members) else "empty"
    batch = batch_name(pd.DataFrame({"trace_id": [r["trace_id"] for r in rows]}), last_day)
    for row in rows:
        row["batch"] = batch
    paths = export_queue(rows, queue_dir, batch) if rows else ()
    replace_table(con, "curation_queue", pd.DataFrame(rows) if rows else pd.DataFrame(
        {"trace_id": pd.Series(dtype=str), "batch": pd.Series(dtype=str)}))
    by = lambda key: dict(pd.Series([r[key] for r in rows]).value_counts().sort_index())
    return {"queued": len(rows), "covered_by_goldens": covered, "batch": batch,
            "files": [str(p) for p in paths], "by_priority": by("priority") if rows else {},
            "by_suggested_failure_type": by("suggested_failure_type") if rows else {}}


def _clustering_from_tables(trace_ids: list[str], vectors: np.ndarray, assigned: dict[str, str],
                            clusters: pd.DataFrame) -> tuple[Clustering, list[str]]:
    """The stored clustering of one language, as `select_representatives` takes it."""
    real = [c for c in dict.fromkeys(assigned[t] for t in trace_ids)
            if not clusters.loc[c, "is_singleton"]]
    index = {c: i for i, c in enumerate(real)}
    labels = np.array([index.get(assigned[t], NOISE) for t in trace_ids])
    centroids = np.array([clusters.loc[c, "centroid"] for c in real], dtype=np.float32).reshape(
        len(real), vectors.shape[1])
    medoids = np.array([trace_ids.index(clusters.loc[c, "medoid_trace_id"]) for c in real], dtype=int)
    radii = np.array([clusters.loc[c, "radius"] for c in real], dtype=float)
    return Clustering(labels, centroids, medoids, radii), real


def _queue_rows(con: duckdb.DuckDBPyConnection, queue: pd.DataFrame, members: pd.DataFrame,
                clusters: pd.DataFrame) -> list[dict]:
    contexts = retrieval_contexts(con, queue["trace_id"].tolist())
    order = {p.value: i for i, p in enumerate(Priority)}
    rows, positions = [], {}
    for item in queue.to_dict("records"):
        positions[item["trace_id"]] = (bool(item["singleton"]), int(item["diversity_rank"]))
        trace = members.loc[item["trace_id"]]
        cluster = clusters.loc[item["cluster_id"]]
        priority = item["priority"]
        is_new = pd.notna(cluster["is_new"]) and bool(cluster["is_new"])
        if is_new and order[priority] > order[Priority.P2.value]:
            priority = Priority.P2.value  # a cluster the previous run did not have
        rows.append({
            "trace_id": item["trace_id"], "language": trace["language"], "input": trace["query"],
            "actual_output": trace["answer"], "retrieval_context": contexts.get(item["trace_id"], []),
            "cluster_id": item["cluster_id"], "cluster_label": cluster["label"],
            "cluster_size": int(item["cluster_size"]),
            "cluster_weight": round(float(item["cluster_weight"]), 3),
            "representative_rank": int(item["representative_rank"]),
            "variant_count": int(item["variant_count"]),
            "variant_trace_ids": list(item["variant_trace_ids"]),
            "signals": list(trace["signals"]), "feedback_category": trace["feedback_category"],
            "priority": priority, "suggested_failure_type": trace["suggested_failure_type"],
            "suggestion_reason": trace["suggestion_reason"],
            "suggested_origin": str(suggest_origin(trace["signals"])),
            **{key: (list(value) if isinstance(value, list) else value)
               for key, value in CURATOR_FIELDS.items()},
        })
    rows.sort(key=lambda r: (order[r["priority"]], r["representative_rank"], *positions[r["trace_id"]],
                             -r["cluster_weight"], r["trace_id"]))
    return rows
