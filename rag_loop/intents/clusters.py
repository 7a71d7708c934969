"""`intent_clusters` and `trace_clusters`: the candidates clustered by intent per language, with
ids that stay stable across runs (a cluster keeps the id of the one it continues)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pandas as pd

from rag_loop.intents.members import candidate_members, load_vectors
from rag_loop.logs import Log, quiet
from rag_loop.store.tables import has_table, replace_table
from rag_loop.vectors.cache import text_hash
from rag_loop.vectors.clustering import (
    NOISE,
    Clustering,
    ClusterSettings,
    cluster_labels,
    cluster_vectors,
    match_clusters,
    mix,
)


@dataclass
class ClusteringReport:
    """How many intent clusters and singletons `cluster_intents` found."""

    clusters: int = 0
    singletons: int = 0
    new_clusters: int = 0  # not continuing a cluster of the previous run
    by_language: dict[str, int] = field(default_factory=dict)  # language -> clusters

    def figures(self) -> dict[str, int]:
        """Flat figures for metadata (clusters_<language> per language)."""
        return {"clusters": self.clusters, "singletons": self.singletons, "new_clusters": self.new_clusters,
                **{f"clusters_{k}": v for k, v in self.by_language.items()}}


def cluster_intents(con: duckdb.DuckDBPyConnection, settings: ClusterSettings,
                    log: Log = quiet) -> ClusteringReport:
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
        return ClusteringReport()
    real = clusters[~clusters["is_singleton"]]
    return ClusteringReport(len(real), int(clusters["is_singleton"].sum()), int(real["is_new"].eq(True).sum()),
                            {lang: int((real["language"] == lang).sum())
                             for lang in sorted(clusters["language"].unique())})


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


