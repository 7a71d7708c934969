"""The curation queue: near-duplicates collapsed, diverse representatives per intent cluster,
goldens already covered left out, suggestions pre-filled, exported for curators (seed 004 §16).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rag_loop.clustering import NOISE, Clustering, nearest
from rag_loop.schema import FailureType, Origin, Priority

CURATOR_FIELDS = {"expected_output": "", "expected_sources": [], "tags": [], "origin": "",
                  "failure_type": "", "decision": ""}
_AVAILABILITY_SIGNALS = frozenset({"timeout", "error", "latency_over_budget"})
_FEEDBACK_FAILURE = {
    "outdated_source": FailureType.DATA_FRESHNESS, "wrong_source": FailureType.RETRIEVAL,
    "missing_info": FailureType.RETRIEVAL, "irrelevant": FailureType.RETRIEVAL,
    "hallucination": FailureType.GENERATION, "incorrect": FailureType.GENERATION,
    "too_verbose": FailureType.GENERATION, "too_slow": FailureType.NONE,
}


@dataclass(frozen=True)
class QueueSettings:
    duplicate_similarity: float = 0.95  # cosine at or above which two queries are one variant
    large_cluster: int = 20  # from this size a cluster gets a second representative
    max_representatives: int = 3
    golden_similarity: float = 0.9  # a representative this close to a golden is covered
    diverse_singletons: int = 2000  # per tier, singletons queued farthest first; then by weight


def suggest_failure_type(trace: dict) -> tuple[FailureType, str]:
    """A first guess at the failure layer from the trace's signals (seed 004 §13), with why.

    Checked in the seed's order, from data to generation: an outdated source, a follow-up the
    rewriter did not resolve, nothing retrieved, the retriever's best chunk dropped by the
    reranker, weak retrieval, then a good context with a bad answer.
    """
    signals = set(trace.get("signals") or [])
    if not signals:
        return FailureType.NONE, "no failure signal (random quality control)"
    if not signals - _AVAILABILITY_SIGNALS:
        return FailureType.NONE, "availability only: " + ", ".join(sorted(signals))
    if "stale_source" in signals:
        return FailureType.DATA_FRESHNESS, "a context chunk's document version was outdated"
    weak = signals & {"empty_retrieval", "low_rerank_score", "fallback"}
    if weak and (trace.get("turn_id") or 1) > 1 and not trace.get("rewritten_query"):
        return FailureType.QUERY_REWRITE, "a follow-up turn, not rewritten, retrieved poorly"
    if "empty_retrieval" in signals:
        return FailureType.RETRIEVAL, "nothing was retrieved"
    if trace.get("top_chunk_reranked_out"):
        return FailureType.RERANKING, "the retriever's top chunk was ranked out of the context"
    if weak:
        return FailureType.RETRIEVAL, "low rerank score or fallback: no good evidence found"
    if "no_citation" in signals:
        return FailureType.GENERATION, "good retrieval, but the answer cites nothing"
    category = trace.get("feedback_category")
    if "thumbs_down" in signals and category in _FEEDBACK_FAILURE:
        return _FEEDBACK_FAILURE[category], f"thumbs-down: {category}"
    if "thumbs_down" in signals:
        return FailureType.GENERATION, "thumbs-down with good retrieval"
    return FailureType.GENERATION, "rephrased at once although retrieval looked fine"


def suggest_origin(signals: Sequence[str]) -> Origin:
    return Origin.PRODUCTION_FAILURE if len(signals) else Origin.PRODUCTION_SAMPLE


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


def select_representatives(members: pd.DataFrame, vectors: np.ndarray, clustering: Clustering,
                           settings: QueueSettings = QueueSettings()) -> pd.DataFrame:
    """Representatives of every cluster and singleton, in queue order.

    `members` has one row per point (aligned with `vectors`): trace_id, priority, weight
    (1/π: production traces it stands for) and suggested_failure_type. A cluster gets one
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
    groups = [np.flatnonzero(labels == c) for c in range(clustering.count)]
    groups += [np.array([i]) for i in np.flatnonzero(labels == NOISE)]
    for number, group in enumerate(groups):
        cluster = number if number < clustering.count else NOISE
        centre = clustering.centroids[cluster] if cluster != NOISE else vectors[group[0]]
        order = sorted(group, key=lambda i: (priority_rank[i], -float(vectors[i] @ centre)))
        variants = collapse_near_duplicates(vectors, order, settings.duplicate_similarity)
        group_types = types[group]
        mixed = len({t for t in set(group_types) if (group_types == t).mean() >= 0.2}) > 1
        wanted = min(settings.max_representatives,
                     1 + (len(group) >= settings.large_cluster) + mixed, len(variants))
        chosen = _diverse(variants, vectors, types, count=wanted)
        weight = float(members["weight"].to_numpy()[group].sum())
        for rank, variant in enumerate(chosen):
            leader = variant[0]
            rows.append({"point": leader, "cluster": cluster, "representative_rank": rank,
                         "cluster_size": len(group), "cluster_weight": weight,
                         "variant_count": len(variant),
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
        chosen.append(max(candidates, key=lambda v, s=seen, l=leaders: (
            types[v[0]] not in s, -float((l @ vectors[v[0]]).max()))))
    return chosen


def covered_by_goldens(vectors: np.ndarray, golden_vectors: np.ndarray,
                       threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Per vector: is a golden input at least `threshold` similar, and the best similarity."""
    if len(golden_vectors) == 0 or len(vectors) == 0:
        return np.zeros(len(vectors), bool), np.zeros(len(vectors))
    best = (vectors @ golden_vectors.T).max(axis=1)
    return best >= threshold, best


def load_golden_inputs(goldens_dir: Path) -> list[dict]:
    """Inputs of the newest release under `goldens_dir` (vNNNN/goldens.json), if any."""
    releases = sorted(p for p in goldens_dir.glob("v[0-9]*/goldens.json")) if goldens_dir.is_dir() else []
    if not releases:
        return []
    goldens = json.loads(releases[-1].read_text(encoding="utf-8"))
    return [{"input": g["input"], "release": releases[-1].parent.name,
             "language": (g.get("additional_metadata") or {}).get("language")} for g in goldens]


def batch_name(queue: pd.DataFrame, last_day: str) -> str:
    """`<last traffic day>-<hash of the queued trace ids>`: a rerun on the same data reuses it."""
    digest = hashlib.sha256("\n".join(queue["trace_id"]).encode()).hexdigest()[:8]
    return f"{last_day.replace('-', '')}-{digest}"


def export_queue(rows: list[dict], directory: Path, batch: str) -> tuple[Path, Path]:
    """Write `<batch>.jsonl` and `<batch>.csv` atomically (temp file, then rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    jsonl = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    frame = pd.DataFrame(rows)
    for column in frame.columns:
        if frame[column].map(lambda v: isinstance(v, (list, dict))).any():
            frame[column] = frame[column].map(lambda v: json.dumps(v, ensure_ascii=False, default=str))
    paths = directory / f"{batch}.jsonl", directory / f"{batch}.csv"
    _atomic_write(paths[0], jsonl)
    _atomic_write(paths[1], frame.to_csv(index=False))
    return paths


def read_queue(path: Path) -> list[dict]:
    """Rows of an exported queue file, JSONL or CSV (list fields decoded)."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    rows = frame.to_dict("records")
    for row in rows:
        for key, value in row.items():
            if value.startswith(("[", "{")):
                try:
                    row[key] = json.loads(value)
                except (json.JSONDecodeError, RecursionError):
                    pass  # text that merely starts with a bracket: "[doc#chunk] 15 days"
    return rows


def _atomic_write(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
    os.replace(temporary, path)
