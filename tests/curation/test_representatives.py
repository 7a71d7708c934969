"""Representatives: near duplicates collapsed, diverse picks, singletons farthest first."""

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_loop.curation.representatives import (
    QueueSettings,
    collapse_near_duplicates,
    order_farthest_first,
    select_representatives,
)
from rag_loop.vectors.clustering import NOISE, Clustering


def test_near_duplicates_collapse_into_one_variant():
    vectors = np.array([[1, 0], [0.999, 0.04], [0, 1], [0.03, 0.9995]], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    assert collapse_near_duplicates(vectors, [0, 1, 2, 3], 0.95) == [[0, 1], [2, 3]]


def test_large_and_mixed_clusters_get_diverse_representatives():
    rng = np.random.default_rng(0)
    centre = np.array([1.0, 0, 0, 0])
    vectors = centre + rng.normal(0, 0.2, (30, 4))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    members = pd.DataFrame({"trace_id": [f"t{i}" for i in range(30)], "query": [f"q{i}" for i in range(30)],
                            "priority": "P3",
                            "weight": 2.0, "suggested_failure_type": ["retrieval"] * 20 + ["generation"] * 10})
    from rag_loop.vectors.clustering import Clustering
    clustering = Clustering(np.zeros(30, int), centre[None].astype(np.float32), np.array([0]), np.array([0.1]))
    queue = select_representatives(members, vectors, clustering, QueueSettings(duplicate_similarity=0.999))
    assert len(queue) == 3  # large (+1) and mixed (+1)
    assert set(members["suggested_failure_type"][queue["point"]]) == {"retrieval", "generation"}
    assert (queue["cluster_weight"] == 60.0).all()


def test_singletons_are_queued_farthest_first_after_the_clusters():
    rng = np.random.default_rng(1)
    directions = np.eye(8)[:4]  # one cluster (direction 0), then singletons grouped by topic 1-3
    topic = np.array([0] * 6 + [1, 1, 1, 2, 2, 2, 3, 3, 3])
    vectors = directions[topic] + rng.normal(0, 0.05, (len(topic), 8))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    members = pd.DataFrame({"trace_id": [f"t{i}" for i in range(len(topic))],
                            "query": [f"q{i}" for i in range(len(topic))], "priority": "P3",
                            "weight": 1.0, "suggested_failure_type": "none"})
    from rag_loop.vectors.clustering import Clustering
    labels = np.where(topic == 0, 0, -1)
    clustering = Clustering(labels, directions[:1].astype(np.float32), np.array([0]), np.array([0.1]))
    queue = select_representatives(members, vectors, clustering, QueueSettings(duplicate_similarity=0.999))
    assert queue["cluster"].iloc[0] == 0 and not queue["singleton"].iloc[0]
    # input order would give topics 1, 1, 1: farthest first gives each topic before any repeats
    assert sorted(topic[queue["point"].iloc[1:4]]) == [1, 2, 3]
    assert queue["diversity_rank"].iloc[1:].tolist() == list(range(len(topic) - 6))


def test_farthest_first_orders_at_most_limit_points_from_a_bounded_pool():
    topic = np.repeat(np.arange(4), 5)  # grouped input: 5 points per topic
    vectors = np.eye(4, dtype=np.float32)[topic] + np.random.default_rng(2).normal(0, 0.05, (20, 4))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    points = np.arange(20)
    order = order_farthest_first(vectors, points, before=[0], limit=3)
    assert sorted(order.tolist()) == list(range(20))
    assert sorted(topic[order[:3]]) == [1, 2, 3]  # topic 0 is already queued
    assert order[3:].tolist() == sorted(order[3:].tolist())  # the rest keep their given order
    pooled = order_farthest_first(vectors, points, before=[], limit=4, pool=12)
    assert sorted(pooled.tolist()) == list(range(20)) and len(set(topic[pooled[:4]])) >= 2
    assert order_farthest_first(vectors, np.array([], dtype=int), before=[0]).size == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=40), st.integers(0, 2**32 - 1),
       st.sampled_from([NOISE, 0]))
def test_the_same_text_asked_again_is_one_queue_row_carrying_every_trace(texts, seed, label):
    """Identical texts embed to the same cached vector: as singletons or in a cluster, one row
    with every trace that asked it and their weight. Real 384-d vectors, where a product of the
    same row at two positions can differ in its last bits; a text in other case is the same text."""
    rng = np.random.default_rng(seed)
    distinct = rng.normal(size=(6, 384)).astype(np.float32)
    distinct /= np.linalg.norm(distinct, axis=1, keepdims=True)
    vectors = distinct[texts]
    queries = [f"Question number {t}?" if i % 2 else f"question  NUMBER {t}?" for i, t in enumerate(texts)]
    members = pd.DataFrame({"trace_id": [f"t{i}" for i in range(len(texts))], "query": queries, "priority": "P3",
                            "weight": [1.5 + i for i in range(len(texts))], "suggested_failure_type": "retrieval"})
    labels = np.full(len(texts), label)
    clustering = (Clustering(labels, np.zeros((0, 384), np.float32), np.array([], int), np.array([]))
                  if label == NOISE else
                  Clustering(labels, distinct.mean(axis=0, keepdims=True), np.array([0]), np.array([1.0])))
    queue = select_representatives(members, vectors, clustering, QueueSettings(duplicate_similarity=0.999,
                                                                                max_representatives=6,
                                                                                large_cluster=2))
    assert len(queue) == (len(set(texts)) if label == NOISE else min(1 + (len(texts) >= 2), len(set(texts))))
    for row in queue.to_dict("records"):
        same = [i for i, t in enumerate(texts) if t == texts[row["point"]]]
        assert sorted(row["variant_trace_ids"]) == sorted(f"t{i}" for i in same)
        assert row["variant_weight"] == sum(1.5 + i for i in same)
        if label == NOISE:
            assert row["cluster_size"] == len(same)
