"""The dense Prim spanning tree behind the fast_hdbscan backend, and the blocked nearest search."""

import numpy as np
import pytest
from scipy.sparse.csgraph import minimum_spanning_tree as scipy_tree
from scipy.spatial.distance import cdist

from rag_loop.vectors.clustering import nearest
from rag_loop.vectors.spanning_tree import minimum_spanning_tree


@pytest.mark.parametrize("dims", [2, 30])
def test_prim_spans_every_point_at_the_exact_minimum_weight(dims):
    rng = np.random.default_rng(dims)
    points = np.vstack([rng.normal(c, 1, (100, dims)) for c in (0, 8, 20)]).astype(np.float32)
    edges = minimum_spanning_tree(points)
    assert edges.shape == (len(points) - 1, 3)
    distances = cdist(points.astype(np.float64), points.astype(np.float64))
    sources, targets = edges[:, 0].astype(int), edges[:, 1].astype(int)
    assert np.allclose(edges[:, 2], distances[sources, targets], rtol=1e-5, atol=1e-5)
    # a tree: n - 1 edges joining every point, so connected without a cycle
    assert len({(min(a, b), max(a, b)) for a, b in zip(sources, targets)}) == len(points) - 1
    assert set(sources) | set(targets) == set(range(len(points)))
    assert edges[:, 2].sum() == pytest.approx(scipy_tree(distances).sum(), rel=1e-5)


def test_prim_on_too_few_or_identical_points():
    assert minimum_spanning_tree(np.zeros((1, 3))).shape == (0, 3)
    edges = minimum_spanning_tree(np.zeros((5, 3)))
    assert edges.shape == (4, 3) and (edges[:, 2] == 0).all()


def test_nearest_matches_a_direct_computation_across_blocks_and_threads():
    rng = np.random.default_rng(3)
    queries, points = rng.normal(size=(700, 30)), rng.normal(size=(300, 30))
    expected = cdist(queries, points)
    index, distance = nearest(queries, points, block=64)  # 11 blocks on up to 2 threads
    assert (index == expected.argmin(axis=1)).all()
    assert np.allclose(distance, expected.min(axis=1), atol=1e-4)
    index, distance = nearest(points, points, exclude_self=True, block=64)
    np.fill_diagonal(within := cdist(points, points), np.inf)
    assert (index == within.argmin(axis=1)).all()
    assert np.allclose(distance, within.min(axis=1), atol=1e-4)
    index, distance = nearest(queries[:0], points)
    assert index.shape == distance.shape == (0,)
