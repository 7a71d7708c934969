"""The curation queue: near-duplicates collapsed, diverse representatives per intent cluster,
goldens already covered left out, suggestions pre-filled, exported for curators (seed 004 §16).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rag_loop.schema import Priority
from rag_loop.text import same_text_key
from rag_loop.vectors.clustering import NOISE, Clustering, nearest


@dataclass(frozen=True)
class QueueSettings:
    duplicate_similarity: float = 0.95  # cosine at or above which two queries are one variant
    large_cluster: int = 20  # from this size a cluster gets a second representative
    max_representatives: int = 3
    golden_similarity: float = 0.9  # a representative this close to a golden is covered
    diverse_singletons: int = 2000  # per tier, singletons queued farthest first; then by weight


def collapse_near_duplicates(vectors: np.ndarray, order: Sequence[int],
                             similarity: float) -> list[list[int]]:
    """Greedy leader grouping in `order`: a point joins the first variant whose leader is at
    least `similarity` close, else leads a new one. Returns variants as index lists."""
    leaders: list[int] = []
    variants: list[list[int]] = []
    for i in order:
        if leaders:
            close = vectors[leaders] @ vectors[i]
            best = int(np.argmax(close))
            if close[best] >= similarity:
                variants[best].append(i)
                continue
        leaders.append(i)
        variants.append([i])
    return variants


def same_text(keys: np.ndarray, points: np.ndarray) -> list[np.ndarray]:
    """`points` grouped by their text key (`rag_loop.text.same_text_key`), in first-seen order.
    Not by vector: a vector product can differ in its last bits for two identical rows."""
    groups: dict[str, list[int]] = {}
    for point in points:
        groups.setdefault(keys[point], []).append(int(point))
    return [np.array(group, dtype=int) for group in groups.values()]


def select_representatives(members: pd.DataFrame, vectors: np.ndarray, clustering: Clustering,
                           settings: QueueSettings = QueueSettings()) -> pd.DataFrame:
    """Representatives of every cluster and singleton, in queue order.

    `members` has one row per point (aligned with `vectors`): trace_id, query, priority, weight
    (1/π: production traces it stands for) and suggested_failure_type. Queries of one text
    (`same_text_key`) are one variant, and singletons of one text one singleton. A cluster gets one
    representative, a second when large, another when its members' suggested failure
    types differ; they are chosen best priority first, then for a failure type not yet
    represented, then farthest from those already chosen (phrasing). Queue order: priority,
    then first representatives before extra ones; within that, clusters by weight, then
    singletons farthest first (`diversity_rank`, see `order_farthest_first`).
    """
    rows = []
    labels = clustering.labels
    types = members["suggested_failure_type"].to_numpy()
    priority_rank = members["priority"].map({p.value: i for i, p in enumerate(Priority)}).to_numpy()
    keys = members["query"].map(same_text_key).to_numpy()
    weights = members["weight"].to_numpy()
    groups = [np.flatnonzero(labels == c) for c in range(clustering.count)]
    groups += same_text(keys, np.flatnonzero(labels == NOISE))  # one row per text
    for number, group in enumerate(groups):
        cluster = number if number < clustering.count else NOISE
        centre = clustering.centroids[cluster] if cluster != NOISE else vectors[group[0]]
        order = sorted(group, key=lambda i: (priority_rank[i], -float(vectors[i] @ centre)))
        asked = {}  # text key -> its points, the first in queue order
        for point in order:
            asked.setdefault(keys[point], []).append(point)
        variants = [[p for first in variant for p in asked[keys[first]]] for variant in
                    collapse_near_duplicates(vectors, [points[0] for points in asked.values()],
                                             settings.duplicate_similarity)]
        group_types = types[group]
        mixed = len({t for t in set(group_types) if (group_types == t).mean() >= 0.2}) > 1
        wanted = min(settings.max_representatives,
                     1 + (len(group) >= settings.large_cluster) + mixed, len(variants))
        chosen = _diverse(variants, vectors, types, count=wanted)
        weight = float(weights[group].sum())
        for rank, variant in enumerate(chosen):
            leader = variant[0]
            rows.append({"point": leader, "cluster": cluster, "representative_rank": rank,
                         "cluster_size": len(group), "cluster_weight": weight,
                         "variant_count": len(variant), "variant_weight": float(weights[variant].sum()),
                         "variant_trace_ids": members["trace_id"].to_numpy()[variant].tolist(),
                         "priority_rank": int(priority_rank[variant].min())})
    queue = pd.DataFrame(rows)
    if queue.empty:
        return queue
    queue["priority"] = [list(Priority)[r].value for r in queue["priority_rank"]]
    queue["singleton"] = queue["cluster"] == NOISE
    queue = queue.sort_values(["priority_rank", "representative_rank", "singleton", "cluster_weight",
                               "point"], ascending=[True, True, True, False, True], kind="stable")
    queue["diversity_rank"] = 0
    queued: list[int] = []
    for _, tier in queue.groupby(["priority_rank", "representative_rank"], sort=True):
        clustered = tier.loc[~tier["singleton"], "point"].tolist()
        singles = tier.loc[tier["singleton"]]
        order = order_farthest_first(vectors, singles["point"].to_numpy(), queued + clustered,
                                     limit=settings.diverse_singletons)
        queue.loc[singles.index[order], "diversity_rank"] = np.arange(len(order))
        queued += clustered + singles["point"].to_numpy()[order].tolist()
    queue = queue.sort_values(["priority_rank", "representative_rank", "singleton", "diversity_rank",
                               "cluster_weight", "point"],
                              ascending=[True, True, True, True, False, True], kind="stable")
    return queue.drop(columns="priority_rank").reset_index(drop=True)


def order_farthest_first(vectors: np.ndarray, points: np.ndarray, before: Sequence[int],
                         limit: int = 2000, pool: int = 20_000, seed: int = 0) -> np.ndarray:
    """Positions of `points`: up to `limit` of them farthest first, each the least similar to
    everything queued before it (`before`, then the points already ordered), then the rest
    in their given order.

    Singletons are queries no cluster took; in input order a curator's first rows would spend
    themselves on neighbouring paraphrases (inputs often arrive grouped), while farthest first
    each row reaches a part of the space no row above it covers. The picks come from at most
    `pool` points (a seeded sample beyond that), so the cost stays limit × pool products."""
    if len(points) == 0:
        return np.array([], dtype=int)
    eligible = np.arange(len(points)) if len(points) <= pool else \
        np.sort(np.random.default_rng(seed).choice(len(points), pool, replace=False))
    candidates = vectors[points[eligible]].astype(np.float32)
    if len(before):
        _, distance = nearest(candidates, vectors[list(before)])
        best = 1 - distance ** 2 / 2  # unit vectors: the cosine of the most similar
    else:
        best = np.full(len(eligible), -np.inf, dtype=np.float32)
    picks = np.empty(min(limit, len(eligible)), dtype=int)
    for step in range(len(picks)):
        pick = int(np.argmin(best))
        picks[step] = pick
        np.maximum(best, candidates @ candidates[pick], out=best)
        best[pick] = np.inf
    picked = eligible[picks]
    return np.concatenate([picked, np.setdiff1d(np.arange(len(points)), picked)])


def _diverse(variants: list[list[int]], vectors: np.ndarray, types: np.ndarray,
             count: int) -> list[list[int]]:
    """The first variant, then repeatedly the one with an unseen failure type, farthest
    from those already chosen."""
    chosen = [variants[0]]
    while len(chosen) < count:
        seen = {types[v[0]] for v in chosen}
        leaders = vectors[[v[0] for v in chosen]]
        candidates = [v for v in variants if v not in chosen]
        chosen.append(max(candidates, key=lambda v, s=seen, chosen_leaders=leaders: (
            types[v[0]] not in s, -float((chosen_leaders @ vectors[v[0]]).max()))))
    return chosen


def covered_by_goldens(vectors: np.ndarray, golden_vectors: np.ndarray,
                       threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Per vector: is a golden input at least `threshold` similar, and the best similarity."""
    if len(golden_vectors) == 0 or len(vectors) == 0:
        return np.zeros(len(vectors), bool), np.zeros(len(vectors))
    best = (vectors @ golden_vectors.T).max(axis=1)
    return best >= threshold, best


