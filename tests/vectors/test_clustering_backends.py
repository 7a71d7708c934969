"""HDBSCAN backends: fast_hdbscan (the default) and the hdbscan package give the same clusters."""

from dataclasses import replace

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.metrics import adjusted_rand_score

from rag_loop.vectors.clustering import (
    BACKENDS,
    NOISE,
    ClusterSettings,
    cluster_vectors,
    hdbscan_labels,
)
from tests.helpers import labelled_queries
from tests.helpers.fakes import HashingEmbedder

# the intents' settings (leaf clusters of 4) and trace_novelty's (eom clusters of 5)
SETTINGS = [ClusterSettings(), ClusterSettings(min_cluster_size=5, selection_method="eom")]


def assert_same_clusters(first: np.ndarray, second: np.ndarray) -> None:
    """The same partition up to renumbering: the same noise, and a one-to-one label mapping."""
    assert ((first == NOISE) == (second == NOISE)).all()
    pairs = set(zip(first[first != NOISE].tolist(), second[second != NOISE].tolist()))
    assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs})
    assert adjusted_rand_score(first, second) == 1.0


def gaussian_blobs(seed: int = 0) -> np.ndarray:
    """600 points of 10 well separated blobs in 30 dims, then 40 scattered noise points."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 10, (10, 30))
    blobs = centres[rng.integers(0, 10, 600)] + rng.normal(0, 1, (600, 30))
    return np.vstack([blobs, rng.uniform(-30, 30, (40, 30))])


def query_vectors() -> tuple[np.ndarray, np.ndarray]:
    """Paraphrased demo queries of 8 intents (50 each), hashed into 512 dims, and their intents."""
    texts, intents = labelled_queries(intent_count=8, per_intent=50)
    return HashingEmbedder().embed(texts), intents


def both(function, data, settings: ClusterSettings) -> tuple:
    return tuple(function(data, replace(settings, backend=backend)) for backend in ("fast_hdbscan", "hdbscan"))


@pytest.mark.parametrize("settings", SETTINGS, ids=["leaf", "eom"])
def test_backends_label_gaussian_blobs_alike(settings):
    points = gaussian_blobs()
    fast, reference = both(hdbscan_labels, points, settings)
    assert_same_clusters(fast, reference)
    assert fast.max() + 1 >= 10 and (fast[600:] == NOISE).all()  # not all noise: a real comparison


@pytest.mark.parametrize("settings", SETTINGS, ids=["leaf", "eom"])
def test_backends_label_pca_reduced_queries_alike(settings):
    vectors, _ = query_vectors()
    reduced = PCA(n_components=30, random_state=0).fit_transform(vectors).astype(np.float32)
    fast, reference = both(hdbscan_labels, reduced, settings)
    assert_same_clusters(fast, reference)
    assert fast.max() + 1 >= 4


@pytest.mark.parametrize("settings", SETTINGS + [ClusterSettings(fit_sample=150)],
                         ids=["leaf", "eom", "leaf-sampled"])
def test_cluster_vectors_gives_the_same_clustering_on_either_backend(settings):
    vectors, _ = query_vectors()
    fast, reference = both(cluster_vectors, vectors, settings)
    assert_same_clusters(fast.labels, reference.labels)
    assert fast.count == reference.count >= 4
    order = [int(reference.labels[fast.medoids[c]]) for c in range(fast.count)]  # fast's → reference's
    assert sorted(order) == list(range(reference.count))
    assert np.allclose(fast.centroids, reference.centroids[order], atol=1e-6)
    assert (reference.medoids[order] == fast.medoids).all()


def test_cluster_vectors_on_gaussian_blobs_through_either_backend():
    points = gaussian_blobs(1)
    vectors = (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)
    fast, reference = both(cluster_vectors, vectors, ClusterSettings())
    assert_same_clusters(fast.labels, reference.labels)


def test_fast_hdbscan_is_the_default_and_unknown_backends_are_refused():
    assert ClusterSettings().backend == "fast_hdbscan"
    assert set(BACKENDS) == {"fast_hdbscan", "hdbscan"}
    with pytest.raises(ValueError, match=r"backend 'sklearn' is not one of 'fast_hdbscan', 'hdbscan'"):
        ClusterSettings(backend="sklearn")
    with pytest.raises(ValueError, match="backend"):
        replace(ClusterSettings(), backend="HDBSCAN")  # names are exact
