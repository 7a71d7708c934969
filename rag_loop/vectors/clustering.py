"""Intent clusters: PCA + HDBSCAN, near clusters merged, c-TF-IDF labels, stable ids across runs.

HDBSCAN on a few dozen PCA dimensions finds many small, pure clusters; one intent often
comes out as several of them. Clusters whose centroids are close (average linkage on cosine
distance in the embedding space) are merged, so one intent gets one cluster and the curation
budget is not spent on the same question twice. "Close" is relative to the space: a
fraction `merge_distance` of the median cosine distance between two random points, because
models differ in scale (multilingual-e5 puts most pairs within 0.2, MiniLM near 0.8). Points HDBSCAN
leaves as noise stay singletons: they are where novel queries live. Above `fit_sample`
points, HDBSCAN (fast_hdbscan: Numba-compiled, the same clusters as the hdbscan package; with
min_samples 1 on our exact spanning tree, dense Prim on one thread, see spanning_tree) is fitted
on a sample and every other point joins the cluster of its nearest clustered sample point when
it is within that cluster's reach (the largest nearest-neighbour gap inside it), else it is
noise: one matrix product per block of points (hdbscan's approximate_predict loops point by
point). `ClusterSettings.backend` "hdbscan" runs the hdbscan package instead
(exact spanning tree: the same labels, slower; see BACKENDS).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

NOISE = -1
MAX_PCA_DIMS = 30  # fast_hdbscan's exact tree; above it would need an approximate k-NN graph
# a few Vietnamese function words, so that labels show content words
_VI_STOP_WORDS = frozenset(
    ["là", "có", "được", "bao", "nhiêu", "thì", "sao", "tôi", "của", "cho", "và", "không", "với", "nào", "thế", "gì", "khi", "bị", "những", "các", "một", "này", "đó", "ở", "trong", "để", "phải", "mình", "bạn", "ạ", "nhé", "ơi", "hả", "vậy", "làm"])


def _fast_hdbscan_labels(points: np.ndarray, settings: ClusterSettings) -> np.ndarray:
    if settings.min_samples == 1 and len(points) >= 2:
        # single linkage on plain distances: fast_hdbscan's clusters of our exact spanning tree
        # (dense Prim, one thread: many times faster than its Borůvka in 30 dims, see
        # spanning_tree), so the same labels
        from fast_hdbscan.hdbscan import clusters_from_spanning_tree

        from rag_loop.vectors.spanning_tree import minimum_spanning_tree
        labels, *_ = clusters_from_spanning_tree(
            minimum_spanning_tree(points), min_cluster_size=settings.min_cluster_size,
            cluster_selection_method=settings.selection_method)
        return labels
    from fast_hdbscan import HDBSCAN  # compiles on first use (cached on disk after)
    model = HDBSCAN(min_cluster_size=settings.min_cluster_size, min_samples=settings.min_samples,
                    cluster_selection_method=settings.selection_method)
    return model.fit(points).labels_


def _hdbscan_labels(points: np.ndarray, settings: ClusterSettings) -> np.ndarray:
    from hdbscan import HDBSCAN
    # the exact spanning tree (its default approximates it), so that the labels are fast_hdbscan's
    # (with min_samples > 1, tied mutual reachabilities may still split a leaf differently)
    model = HDBSCAN(min_cluster_size=settings.min_cluster_size, min_samples=settings.min_samples,
                    cluster_selection_method=settings.selection_method,
                    approx_min_span_tree=False, core_dist_n_jobs=-1)
    return model.fit(points).labels_


# HDBSCAN implementations by ClusterSettings.backend: fast_hdbscan (parallel, Numba) by default
BACKENDS: dict[str, Callable[[np.ndarray, ClusterSettings], np.ndarray]] = {
    "fast_hdbscan": _fast_hdbscan_labels,
    "hdbscan": _hdbscan_labels,
}


@dataclass(frozen=True)
class ClusterSettings:
    """HDBSCAN and merge parameters, chosen on the mean coverage of shuffled 90 % resamples of
    Banking77 and HWU64 (bench/intent_dedup.py): leaf clusters of 4 best on both."""

    pca_dims: int = 30
    min_cluster_size: int = 4
    min_samples: int = 1
    selection_method: str = "leaf"  # or "eom"
    merge_distance: float = 0.25  # × the median pairwise cosine distance: closer clusters merge
    fit_sample: int = 20_000
    seed: int = 0
    backend: str = "fast_hdbscan"  # or "hdbscan": the same labels, slower (see BACKENDS)

    def __post_init__(self) -> None:
        if not 2 <= self.pca_dims <= MAX_PCA_DIMS:
            raise ValueError(f"pca_dims {self.pca_dims} is not within [2, {MAX_PCA_DIMS}]")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r} is not one of {', '.join(map(repr, BACKENDS))}")


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
    from sklearn.decomposition import PCA  # sklearn is imported where it is used
    n = len(vectors)
    if n < max(2 * settings.min_cluster_size, 3):
        return _summarize(vectors, np.full(n, NOISE))
    rng = np.random.default_rng(settings.seed)
    sample = np.sort(rng.choice(n, settings.fit_sample, replace=False)) \
        if n > settings.fit_sample else np.arange(n)
    dims = min(settings.pca_dims, vectors.shape[1], len(sample) - 1)
    pca = PCA(n_components=dims, random_state=settings.seed).fit(vectors[sample])
    reduced = pca.transform(vectors).astype(np.float32)
    labels = np.full(n, NOISE)
    labels[sample] = hdbscan_labels(reduced[sample], settings)
    if len(sample) < n:
        rest = np.setdiff1d(np.arange(n), sample)
        labels[rest] = join_nearest(reduced[sample], labels[sample], reduced[rest])
    threshold = settings.merge_distance * typical_distance(vectors, settings.seed)
    return _summarize(vectors, _merge_close_clusters(vectors, labels, threshold))


def compile_once() -> None:
    """Compile fast_hdbscan's Numba code and the spanning tree's into their on-disk caches
    (about 30 s, once per install: `make install` runs it), so no run pays for it: both cluster
    selections (the intents' leaf, trace_novelty's eom) compile functions of their own."""
    points = np.random.default_rng(0).normal(size=(200, MAX_PCA_DIMS))
    for method in ("leaf", "eom"):
        hdbscan_labels(points, ClusterSettings(selection_method=method))


def hdbscan_labels(points: np.ndarray, settings: ClusterSettings) -> np.ndarray:
    """HDBSCAN cluster of each point (NOISE for noise), by the settings' backend."""
    if settings.backend == "fast_hdbscan":
        _start_numba_threads()
    return BACKENDS[settings.backend](np.ascontiguousarray(points, dtype=np.float64), settings)


@cache
def _start_numba_threads() -> None:
    """Start Numba's threading layer (once per process) leaving this thread's OpenMP thread
    count as configured.

    Numba's OpenMP layer binds to the libgomp already loaded (torch's) and, when it starts, sets
    the starting thread's OpenMP count to NUMBA_NUM_THREADS: torch would then embed on that many
    threads whatever OMP_NUM_THREADS or torch.set_num_threads said. Numba's own loops keep their
    count (they pass it to each parallel region), so only the other OpenMP users' is restored:
    a runtime loaded before keeps its count, one Numba loads gets OMP_NUM_THREADS'. Where the
    layer had started already (importing fast_hdbscan starts it), the counts seen now are Numba's,
    so every runtime gets OMP_NUM_THREADS'."""
    import numba
    from numba.np.ufunc import parallel
    from threadpoolctl import ThreadpoolController  # scikit-learn's dependency

    before = {} if getattr(parallel, "_is_initialized", False) else {
        lib.filepath: lib.num_threads for lib in ThreadpoolController().select(user_api="openmp").lib_controllers}
    numba.get_num_threads()  # starts the layer
    configured = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    for lib in ThreadpoolController().select(user_api="openmp").lib_controllers:
        count = before.get(lib.filepath, int(configured) if configured.isdigit() else None)
        if count and lib.num_threads != count:
            lib.set_num_threads(count)


def nearest(queries: np.ndarray, points: np.ndarray, exclude_self: bool = False,
            block: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """Index of and Euclidean distance to each query's nearest point.

    Per block of queries one float32 product with the points augmented by a column -|p|²/2
    (q·p - |p|²/2 orders the points as the distance does), so that one argmax is the only
    other pass over it; blocks small enough to stay in cache, shared by up to 2 threads that
    each run BLAS on one thread (its own threads meeting on every small product stall when the
    cores are busy). The distance is then computed from the nearest point itself."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    points = np.asarray(points, dtype=np.float32)
    augmented = np.hstack([points, -0.5 * np.einsum("ij,ij->i", points, points)[:, None]])
    index = np.empty(len(queries), np.int64)
    if len(queries) == 0:
        return index, np.empty(0, np.float32)
    ones = np.ones((len(queries), 1), np.float32)

    def run(start: int, stop: int) -> None:
        buffer = np.empty((min(block, stop - start), len(points)), np.float32)
        for first in range(start, stop, block):
            last = min(first + block, stop)
            scores = buffer[:last - first]
            np.matmul(np.hstack([queries[first:last], ones[first:last]]), augmented.T, out=scores)
            if exclude_self:
                rows = np.arange(last - first)
                scores[rows, first + rows] = -np.inf
            index[first:last] = scores.argmax(axis=1)

    blocks = -(-len(queries) // block)
    threads = min(2, os.cpu_count() or 1, blocks)
    if threads == 1:
        run(0, len(queries))
    else:
        from concurrent.futures import ThreadPoolExecutor

        from threadpoolctl import threadpool_limits  # scikit-learn's dependency
        bounds = [block * (blocks * t // threads) for t in range(threads)] + [len(queries)]
        with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
            for done in [pool.submit(run, a, b) for a, b in zip(bounds, bounds[1:])]:
                done.result()
    difference = queries - points[index]
    return index, np.sqrt(np.einsum("ij,ij->i", difference, difference))


def join_nearest(sample: np.ndarray, sample_labels: np.ndarray, rest: np.ndarray) -> np.ndarray:
    """Clusters of points outside the fitted sample: the nearest sample point's, when no
    farther from it than that cluster's reach, else NOISE.

    The reach is the largest distance from a member to its nearest sample neighbour: with
    min_samples 1 HDBSCAN links points by plain distance, and a cluster holds what links to it
    at most that far (a lower bound of its longest internal link)."""
    clustered = sample_labels >= 0
    if not clustered.any():
        return np.full(len(rest), NOISE)
    members, member_labels = sample[clustered], sample_labels[clustered]
    _, gaps = nearest(members, members, exclude_self=True)
    reach = np.zeros(member_labels.max() + 1, np.float32)
    np.maximum.at(reach, member_labels, gaps)
    index, distance = nearest(rest, members)
    joined = member_labels[index]
    return np.where(distance <= reach[joined], joined, NOISE)


def _cluster_means(vectors: np.ndarray, labels: np.ndarray, count: int) -> np.ndarray:
    """Mean vector per cluster (NOISE left out), as one sparse product."""
    from scipy import sparse
    inside = np.flatnonzero(labels >= 0)
    membership = sparse.csr_matrix((np.ones(len(inside), np.float32), (labels[inside], inside)),
                                   shape=(count, len(labels)))
    sizes = np.asarray(membership.sum(axis=1)).ravel()
    return np.asarray(membership @ vectors) / np.maximum(sizes, 1)[:, None]


def typical_distance(vectors: np.ndarray, seed: int = 0, pairs: int = 4000) -> float:
    """Median cosine distance between random pairs of points: the scale of the space."""
    rng = np.random.default_rng(seed)
    first, second = rng.integers(0, len(vectors), (2, pairs))
    # per block of pairs, so that the gathered rows stay in cache (a third of the CPU of
    # gathering all 4,000 at once); each pair's product is computed as before
    distances = np.concatenate([
        1 - np.einsum("ij,ij->i", vectors[first[start:start + 256]], vectors[second[start:start + 256]])
        for start in range(0, pairs, 256)])
    return float(np.median(distances[first != second]))


def _merge_close_clusters(vectors: np.ndarray, labels: np.ndarray, distance: float) -> np.ndarray:
    from sklearn.cluster import AgglomerativeClustering
    count = labels.max() + 1
    if count < 2 or distance <= 0:
        return labels
    centroids = _unit(_cluster_means(vectors, labels, count))
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
    if count == 0:
        return Clustering(labels, np.zeros((0, dim), np.float32), np.array([], dtype=int),
                          np.array([]))
    centroids = _unit(_cluster_means(vectors, labels, count)).astype(np.float32)
    inside = np.flatnonzero(labels >= 0)
    member_labels = labels[inside]
    similarity = np.concatenate([
        np.einsum("ij,ij->i", vectors[block], centroids[member_labels[i:i + len(block)]])
        for i, block in ((i, inside[i:i + 65536]) for i in range(0, len(inside), 65536))])
    # per cluster, members by falling similarity: the first is the medoid, the 95th percentile
    # of 1 - similarity (linear interpolation, as numpy's) is the radius
    order = np.lexsort((-similarity, member_labels))
    starts = np.searchsorted(member_labels[order], np.arange(count))
    sizes = np.bincount(member_labels, minlength=count)
    medoids = inside[order[starts]]
    distance = 1 - similarity[order]  # rising within each cluster
    position = 0.95 * (sizes - 1)
    low, high = np.floor(position).astype(int), np.ceil(position).astype(int)
    radii = distance[starts + low] + (distance[starts + high] - distance[starts + low]) * (position - low)
    return Clustering(labels, centroids, medoids.astype(int), radii.astype(float))


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
    from scipy.optimize import linear_sum_assignment
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
    from sklearn.feature_extraction.text import CountVectorizer
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
