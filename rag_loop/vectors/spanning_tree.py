"""Exact Euclidean minimum spanning tree of a few ten thousand points: dense Prim, one thread.

HDBSCAN with min_samples 1 is single linkage on plain distances, so its hierarchy is this
tree's. fast_hdbscan builds it by Borůvka over a k-d tree, which in 30 PCA dimensions prunes
little and, with its threads meeting at every round, slows down many times over when the
machine's cores are busy (20,000 Banking77 points: 24 s against 1.4 s here at a load average
of 6 on 2 cores). Prim's n²/2 distances, laid out dimension by dimension so that the inner
loop runs over contiguous points, cost about 1 s per 20,000 points at 30 dimensions. Imported
where used: Numba compiles it on first use (cached on disk after, see clustering.compile_once).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True, fastmath={"contract"})
def _prim(points: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    n, dims = points.shape
    columns = np.ascontiguousarray(points.T)  # dims × n; the tree's part is kept at the end
    ids = np.arange(n)
    best = np.full(n, np.float32(np.finfo(np.float32).max))  # squared distance to the tree
    source = np.zeros(n, np.int64)  # the tree point it is from
    squared = np.empty(n, np.float32)
    edges = np.empty((n - 1, 3), np.float64)
    current = np.empty(dims, np.float32)
    outside = n - 1
    for k in range(dims):  # point 0 starts the tree
        current[k] = columns[k, 0]
        columns[k, 0] = columns[k, outside]
    current_id = ids[0]
    ids[0] = ids[outside]
    for step in range(n - 1):
        squared[:outside] = 0
        for k in range(dims):
            value = current[k]
            column = columns[k]
            for j in range(outside):
                difference = column[j] - value
                squared[j] += difference * difference
        closest, closest_squared = 0, np.float32(np.inf)
        for j in range(outside):
            if squared[j] < best[j]:
                best[j] = squared[j]
                source[j] = current_id
            if best[j] < closest_squared:
                closest, closest_squared = j, best[j]
        edges[step, 0] = source[closest]
        edges[step, 1] = ids[closest]
        edges[step, 2] = np.sqrt(np.float64(closest_squared))
        outside -= 1  # the closest point joins the tree: swap it out of the live range
        current_id = ids[closest]
        for k in range(dims):
            current[k] = columns[k, closest]
            columns[k, closest] = columns[k, outside]
        ids[closest], best[closest], source[closest] = ids[outside], best[outside], source[outside]
    return edges


def minimum_spanning_tree(points: np.ndarray) -> np.ndarray:
    """The n - 1 edges (from, to, Euclidean distance) of an exact minimum spanning tree, in the
    order Prim adds them (fast_hdbscan's `clusters_from_spanning_tree` sorts them)."""
    points = np.ascontiguousarray(points, dtype=np.float32)
    if len(points) < 2:
        return np.empty((0, 3), np.float64)
    return _prim(points)
