"""Intent clustering: labelled intents recovered, sampled fits, summaries, stable matching."""

from dataclasses import replace

import numpy as np
import pytest
from sklearn.metrics import homogeneity_score

from rag_loop.vectors.clustering import (
    NOISE,
    ClusterSettings,
    assign_to_clusters,
    cluster_labels,
    cluster_vectors,
    match_clusters,
)
from tests.helpers import labelled_queries


@pytest.mark.slow
def test_clustering_recovers_labelled_intents(minilm):
    texts, intents = labelled_queries()
    vectors = minilm.embed(texts)
    clustering = cluster_vectors(vectors, ClusterSettings())
    clustered = clustering.labels != NOISE
    assert clustered.mean() > 0.6
    assert homogeneity_score(intents[clustered], clustering.labels[clustered]) > 0.9
    assert len(set(intents[clustered])) == 6 and clustering.count <= 4 * 6
    for cluster in range(clustering.count):  # clusters are pure
        members = intents[clustering.labels == cluster]
        assert (members == members[0]).mean() > 0.9
    labels = cluster_labels(texts, clustering.labels)
    assert all(labels.values())
    placed, _ = assign_to_clusters(vectors[clustered], clustering.centroids, clustering.radii)
    assert (placed == clustering.labels[clustered]).mean() > 0.9


def test_too_few_points_are_all_singletons():
    vectors = np.eye(4, dtype=np.float32)
    assert (cluster_vectors(vectors).labels == NOISE).all()


def test_points_outside_the_fitted_sample_join_as_a_fit_on_every_point_places_them():
    rng = np.random.default_rng(1)
    centres = np.eye(3, 64, dtype=np.float32) * 10
    blobs = np.repeat(centres, 400, axis=0) + rng.normal(0, 0.3, (1200, 64)).astype(np.float32)
    outliers = rng.normal(0, 1, (5, 64)).astype(np.float32) * 10  # lone random directions
    vectors = np.vstack([blobs, outliers])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # eom: one cluster per blob, so that "placed as a whole fit places them" is exact
    settings = ClusterSettings(selection_method="eom")
    sampled = cluster_vectors(vectors, replace(settings, fit_sample=300))  # 905 points joined
    whole = cluster_vectors(vectors, settings)
    for clustering in (sampled, whole):
        labels = clustering.labels
        blob_labels = [set(labels[i * 400:(i + 1) * 400]) for i in range(3)]
        assert all(len(b) == 1 and NOISE not in b for b in blob_labels)
        assert len(set().union(*blob_labels)) == 3
    # the lone directions fare as HDBSCAN on every point has them (noise, or attached at the
    # distance single linkage reaches them)
    assert (sampled.labels[1200:] == whole.labels[1200:]).all()
    assert (sampled.labels[1200:] == NOISE).sum() >= 4
    assert np.allclose(np.sort(sampled.radii), np.sort(whole.radii), atol=0.01)


def test_cluster_summaries_match_a_direct_computation():
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(60, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    labels = rng.integers(-1, 4, 60)
    from rag_loop.vectors.clustering import _summarize
    summary = _summarize(vectors, labels)
    for c in range(4):
        members = np.flatnonzero(labels == c)
        centroid = vectors[members].mean(axis=0)
        centroid /= np.linalg.norm(centroid)
        similarity = vectors[members] @ centroid
        assert np.allclose(summary.centroids[c], centroid, atol=1e-5)
        assert summary.medoids[c] == members[np.argmax(similarity)]
        assert summary.radii[c] == pytest.approx(np.quantile(1 - similarity, 0.95), abs=1e-5)


def test_match_clusters_is_one_to_one_within_a_distance():
    previous = np.eye(3, dtype=np.float32)
    current = np.array([[0, 1, 0], [1, 0, 0], [0.6, 0.6, 0.53]], dtype=np.float32)
    current /= np.linalg.norm(current, axis=1, keepdims=True)
    assert match_clusters(previous, current) == [1, 0, None]
