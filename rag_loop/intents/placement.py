"""New traffic placed in the intent clusters known before its day, without reclustering."""

from __future__ import annotations

from datetime import date

import duckdb
import numpy as np
import pandas as pd

from rag_loop.logs import Log, quiet
from rag_loop.store.ddl import utc_day
from rag_loop.vectors.clustering import NOISE, assign_to_clusters


def assign_intents(con: duckdb.DuckDBPyConnection, router, day: date, sample: int,
                   log: Log = quiet) -> pd.DataFrame:
    """Place a deterministic sample (≤ `sample`) of the day's queries in the intent clusters
    known before the day (first seen earlier: no look-ahead), per language, without
    reclustering; unplaced queries get cluster None."""
    traces = con.execute(f"""
        SELECT trace_id, coalesce(language, 'und') AS language, original_query
        FROM raw_traces WHERE {utc_day()} = ?
        ORDER BY md5(trace_id) LIMIT ?""", [day, sample]).df()
    clusters = con.execute("SELECT cluster_id, language, centroid, radius FROM intent_clusters "
                           f"WHERE NOT is_singleton AND {utc_day('first_seen')} < ?",
                           [day]).df()
    parts = []
    for language, group in traces.groupby("language"):
        _, vectors = router.embed(con, group["original_query"].tolist(), language, log=log)
        known = clusters[clusters["language"] == language]
        centroids = np.array(known["centroid"].tolist(), dtype=np.float32).reshape(
            len(known), -1 if len(known) else vectors.shape[1])
        if len(known) and centroids.shape[1] != vectors.shape[1]:
            known, centroids = known.iloc[:0], np.zeros((0, vectors.shape[1]), np.float32)
        labels, similarity = assign_to_clusters(vectors, centroids, known["radius"].to_numpy())
        ids = known["cluster_id"].to_numpy()
        parts.append(pd.DataFrame({"trace_id": group["trace_id"], "language": language,
                                   "cluster_id": [ids[c] if c != NOISE else None for c in labels],
                                   "similarity": similarity}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["trace_id", "language", "cluster_id", "similarity"])
