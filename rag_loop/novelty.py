"""Novel intents per day, before selection: the input of the sampling stage's novelty stream.

A day's queries are clustered together with the trailing window's (per language, the same
PCA + HDBSCAN as intent dedup). A cluster whose members come almost only from the judged day
(share ≥ `new_cluster_share`) is an intent the traffic did not have before: its queries of
the day are novel. A single odd query is not (noise is left to the random and signal
streams), and a query of an intent already asked in the window is not, however far it is
from its nearest neighbour: per-query distances do not separate a new intent from an old
one's paraphrase (multilingual-e5 puts both above 0.9 cosine). Only earlier days are the
reference, so novelty never looks ahead, and it is computed from raw traffic, not from the
selected candidates, so selection does not depend on its own output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pandas as pd

from rag_loop.clustering import NOISE, ClusterSettings, cluster_vectors
from rag_loop.embedding import LanguageRouter
from rag_loop.tables import NOVELTY_DDL

Log = Callable[[str], None]
TABLE = "trace_novelty"


@dataclass(frozen=True)
class NoveltySettings:
    """How far back the reference reaches and what makes a cluster new."""

    window_days: int = 7  # earlier days a day's queries are compared with
    min_history_days: int = 3  # days with less history are not judged (everything is new)
    daily_sample: int = 2000  # queries per day and language, a deterministic sample
    new_cluster_share: float = 0.8  # a cluster this much of the judged day is a new intent
    rate: float = 1.0  # novelty stream rate of a novel query
    cluster: ClusterSettings = field(default_factory=ClusterSettings)

    def __post_init__(self) -> None:
        if not 0.5 <= self.new_cluster_share <= 1.0:
            raise ValueError("new_cluster_share must be within [0.5, 1]")
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError("rate must be within [0, 1]")


def _sampled_traffic(con: duckdb.DuckDBPyConnection, sample: int) -> pd.DataFrame:
    return con.execute("""
        SELECT trace_id, language, original_query, day FROM (
            SELECT trace_id, coalesce(language, 'und') AS language, original_query,
                   CAST(timezone('UTC', "timestamp") AS DATE) AS day,
                   row_number() OVER (PARTITION BY day, coalesce(language, 'und')
                                      ORDER BY md5(trace_id)) AS position
            FROM raw_traces)
        WHERE position <= ? ORDER BY day, language, trace_id""", [sample]).df()


def new_intent_members(days: np.ndarray, vectors: np.ndarray, day: object,
                       settings: NoveltySettings) -> tuple[np.ndarray, np.ndarray]:
    """Which of the judged day's points fall in a new cluster, and that cluster's size.

    `days` and `vectors` cover the judged day and its window; returns boolean and size arrays
    over the judged day's points.
    """
    today = days == day
    labels = cluster_vectors(vectors, settings.cluster).labels
    novel, sizes = np.zeros(int(today.sum()), bool), np.zeros(int(today.sum()), int)
    positions = np.flatnonzero(today)
    for label in set(labels[today].tolist()) - {NOISE}:
        members = labels == label
        if today[members].mean() >= settings.new_cluster_share:
            hit = np.isin(positions, np.flatnonzero(members))
            novel[hit], sizes[hit] = True, int(members.sum())
    return novel, sizes


def detect_novelty(con: duckdb.DuckDBPyConnection, router: LanguageRouter,
                   settings: NoveltySettings, log: Log = lambda _: None) -> dict[str, object]:
    """(Re)build `trace_novelty`: every sampled query of a day with enough history, `novel`
    when it falls in a new intent (then `rate` is the stream rate and `cluster_size` the new
    cluster's size, else 0). Returns figures for metadata."""
    traffic = _sampled_traffic(con, settings.daily_sample)
    rows, judged, skipped = [], set(), set()
    for language, group in traffic.groupby("language", sort=True):
        _, vectors = router.embed(con, group["original_query"].tolist(), language, log=log)
        days = pd.to_datetime(group["day"]).to_numpy()
        window = np.timedelta64(settings.window_days, "D")
        for day in np.unique(days):
            in_window = (days <= day) & (days >= day - window)
            history = len(set(days[in_window & (days < day)]))
            if history < settings.min_history_days:
                skipped.add(pd.Timestamp(day).date())
                continue
            judged.add(pd.Timestamp(day).date())
            novel, sizes = new_intent_members(days[in_window], vectors[in_window], day, settings)
            trace_ids = group["trace_id"].to_numpy()[days == day]
            rows.append(pd.DataFrame({"day": pd.Timestamp(day).date(), "trace_id": trace_ids,
                                      "language": language, "novel": novel, "cluster_size": sizes,
                                      "rate": np.where(novel, settings.rate, 0.0)}))
    frame = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        columns=["day", "trace_id", "language", "novel", "cluster_size", "rate"])
    con.execute(NOVELTY_DDL)
    if len(frame):
        con.register("_novel", frame)
        try:
            con.execute(f"INSERT INTO {TABLE} BY NAME SELECT * FROM _novel")
        finally:
            con.unregister("_novel")
    per_day = frame[frame["novel"].astype(bool)].groupby("day").size()
    return {"novel": int(per_day.sum()), "judged": len(frame), "sampled": len(traffic),
            "days_judged": len(judged),
            "days_without_history": sorted(str(d) for d in skipped - judged),
            "novel_per_day": {str(d): int(n) for d, n in per_day.items()}}
