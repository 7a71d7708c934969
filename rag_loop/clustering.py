"""Intent clusters: PCA + HDBSCAN, near clusters merged, c-TF-IDF labels, stable ids across runs.

HDBSCAN on a few dozen PCA dimensions finds many small, pure clusters; one intent often
comes out as several of them. Clusters whose centroids are close (average linkage on cosine
distance in the embedding space) are merged, so one intent gets one cluster and the curation
budget is not spent on the same question twice. "Close" is relative to the space: a
fraction `merge_distance` of the median cosine distance between two random points, because
models differ in scale (multilingual-e5 puts most pairs within 0.2, MiniLM near 0.8). Points HDBSCAN
leaves as noise stay singletons: they are where novel queries live. Above `fit_sample`
points, HDBSCAN is fitted on a sample and the rest is placed with `approximate_predict`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import hdbscan
import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import AgglomerativeClustering
from sklearn.decomposition import PCA
from sklearn.feature_extraction.text import CountVectorizer

NOISE = -1
# a few Vietnamese function words, so that labels show content words
_VI_STOP_WORDS = frozenset(
    ["là", "có", "được", "bao", "nhiêu", "thì", "sao", "tôi", "của", "cho", "và", "không", "với", "nào", "thế", "gì", "khi", "bị", "những", "các", "một", "này", "đó", "ở", "trong", "để", "phải", "mình", "bạn", "ạ", "nhé", "ơi", "hả", "vậy", "làm"])


@dataclass(frozen=True)
class ClusterSettings:
    """HDBSCAN and merge parameters; the defaults are tuned on Banking77 (bench/intent_dedup.py)."""

    pca_dims: int = 32
    min_cluster_size: int = 5
    min_samples: int = 1
    selection_method: str = "eom"  # or "leaf"
    merge_distance: float = 0.25  # × the median pairwise cosine distance: closer clusters merge
    fit_sample: int = 20_000
    seed: int = 0


@dataclass
class Clustering:
    """Cluster index per point (NOISE for singletons), and per cluster its unit centroid,
    medoid index and radius (95th percentile of member cosine distances to the centroid)."""

    labels: np.ndarray
    centroids: np.ndarray
    medoids: np.ndarray
    radii: np.ndarray

    @property
    def count(self) -> int:
        return len(self.centroids)


def cluster_vectors(vectors: np.ndarray, settings: ClusterSettings = ClusterSettings()) -> Clustering:
    """Cluster normalized vectors; deterministic for a given input and seed."""
    n = len(vectors)
    if n < max(2 * settings.min_cluster_size, 3):
        return _summarize(vectors, np.full(n, NOISE))
    rng = np.random.default_rng(settings.seed)
    sample = np.sort(rng.choice(n, settings.fit_sample, replace=False)) \
        if n > settings.fit_sample else np.arange(n)
    dims = min(settings.pca_dims, vectors.shape[1], len(sample) - 1)
    pca = PCA(n_components=dims, random_state=settings.seed).fit(vectors[sample])
    reduced = pca.transform(vectors)
    model = hdbscan.HDBSCAN(min_cluster_size=settings.min_cluster_size,
                            min_samples=settings.min_samples,
                            cluster_selection_method=settings.selection_method,
                            prediction_data=len(sample) < n, core_dist_n_jobs=1)
    model.fit(reduced[sample])
    labels = np.full(n, NOISE)
    labels[sample] = model.labels_
    if len(sample) < n:
        rest = np.setdiff1d(np.arange(n), sample)
        labels[rest], _ = hdbscan.approximate_predict(model, reduced[rest])
    threshold = settings.merge_distance * typical_distance(vectors, settings.seed)
    return _summarize(vectors, _merge_close_clusters(vectors, labels, threshold))


def typical_distance(vectors: np.ndarray, seed: int = 0, pairs: int = 4000) -> float:
    """Median cosine distance between random pairs of points: the scale of the space."""
    rng = np.random.default_rng(seed)
    first, second = rng.integers(0, len(vectors), (2, pairs))
    distances = 1 - np.einsum("ij,ij->i", vectors[first], vectors[second])
    return float(np.median(distances[first != second]))


def _merge_close_clusters(vectors: np.ndarray, labels: np.ndarray, distance: float) -> np.ndarray:
    count = labels.max() + 1
    if count < 2 or distance <= 0:
        return labels
    centroids = _unit(np.stack([vectors[labels == c].mean(axis=0) for c in range(count)]))
    groups = AgglomerativeClustering(n_clusters=None, distance_threshold=distance,
                                     metric="cosine", linkage="average").fit_predict(centroids)
    # number merged clusters by their first member, so that ids follow the input order
    order = {g: i for i, g in enumerate(dict.fromkeys(groups[labels[labels >= 0]]))}
    return np.array([order[groups[label]] if label >= 0 else NOISE for label in labels])


def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True).clip(1e-12)


def _summarize(vectors: np.ndarray, labels: np.ndarray) -> Clustering:
    count = int(labels.max()) + 1 if len(labels) else 0
    dim = vectors.shape[1] if vectors.ndim == 2 else 0
    centroids, medoids, radii = np.zeros((count, dim), np.float32), [], []
    for c in range(count):
        members = np.flatnonzero(labels == c)
        centroid = _unit(vectors[members].mean(axis=0, keepdims=True))[0]
        similarity = vectors[members] @ centroid
        centroids[c] = centroid
        medoids.append(members[int(np.argmax(similarity))])
        radii.append(float(np.quantile(1 - similarity, 0.95)))
    return Clustering(labels, centroids, np.array(medoids, dtype=int), np.array(radii))


def assign_to_clusters(vectors: np.ndarray, centroids: np.ndarray, radii: np.ndarray,
                       slack: float = 1.5) -> tuple[np.ndarray, np.ndarray]:
    """Nearest cluster of each vector, or NOISE when farther than `slack` × that cluster's
    radius: new traffic is placed without reclustering. Returns (labels, cosine similarity)."""
    if len(centroids) == 0 or len(vectors) == 0:
        return np.full(len(vectors), NOISE), np.zeros(len(vectors))
    similarity = vectors @ centroids.T
    nearest = similarity.argmax(axis=1)
    best = similarity[np.arange(len(vectors)), nearest]
    inside = 1 - best <= slack * np.maximum(radii[nearest], 0.05)
    return np.where(inside, nearest, NOISE), best


def match_clusters(previous: np.ndarray, current: np.ndarray, max_distance: float = 0.2) -> list[int | None]:
    """For each current centroid, the index of the previous centroid it continues, or None.

    One-to-one (Hungarian assignment on cosine distance); pairs farther than `max_distance`
    are not matched, so the current cluster is new.
    """
    if len(previous) == 0 or len(current) == 0:
        return [None] * len(current)
    distance = 1 - current @ previous.T
    rows, cols = linear_sum_assignment(distance)
    matched: list[int | None] = [None] * len(current)
    for r, c in zip(rows, cols):
        if distance[r, c] <= max_distance:
            matched[r] = int(c)
    return matched


def cluster_labels(texts: Sequence[str], labels: np.ndarray, top_terms: int = 3) -> dict[int, str]:
    """A readable label per cluster: its top terms by class-based TF-IDF (as in BERTopic).

    Each cluster's texts form one document; a term weighs tf(t, c) · log(1 + A / f(t)), with
    A the average number of words per cluster and f(t) the term's frequency over all clusters.
    """
    clusters = sorted(set(labels.tolist()) - {NOISE})
    if not clusters:
        return {}
    documents = [" ".join(texts[i] for i in np.flatnonzero(labels == c)) for c in clusters]
    vectorizer = CountVectorizer(lowercase=True, stop_words=_stop_words(),
                                 token_pattern=r"(?u)\b[^\W\d_]{2,}\b")
    try:
        counts = vectorizer.fit_transform(documents).toarray().astype(float)
    except ValueError:  # only stop words
        return {c: "" for c in clusters}
    terms = vectorizer.get_feature_names_out()
    frequency = counts.sum(axis=0)
    average_words = counts.sum() / len(clusters)
    weights = counts * np.log1p(average_words / np.maximum(frequency, 1))
    return {c: " · ".join(terms[j] for j in np.argsort(-weights[i])[:top_terms] if weights[i, j] > 0)
            for i, c in enumerate(clusters)}


def _stop_words() -> list[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
    return sorted(ENGLISH_STOP_WORDS | _VI_STOP_WORDS)


def mix(values: Sequence[Sequence[str]]) -> Mapping[str, int]:
    """How many members carry each value (e.g. each signal), most frequent first."""
    counts: dict[str, int] = {}
    for items in values:
        for item in items:
            counts[item] = counts.get(item, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
