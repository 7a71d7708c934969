"""The reference RAG app over the demo knowledge base: the system under test.

A real retriever (character n-gram TF-IDF, accent-insensitive so Vietnamese typed without
diacritics still matches), a word-level reranker, and an extractive generator that answers
with the best context chunk and cites it. Configurations differ in the ways production RAG
systems do: prompt version, index build (chunking), thresholds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_loop.demo.intent_catalog import strip_diacritics
from rag_loop.demo.knowledge import DocVersion, newest_versions

if TYPE_CHECKING:
    from sklearn.feature_extraction.text import TfidfVectorizer

FALLBACK_ANSWER = {"en": "Sorry, I could not find this in the knowledge base.",
                   "vi": "Xin lỗi, mình không tìm thấy thông tin này trong tài liệu."}


@dataclass(frozen=True)
class RagConfig:
    """One deployable configuration of the app."""

    rag_version: str = "rag-v12"
    prompt_version: str = "qa-v3"
    top_k: int = 5
    context_k: int = 2
    min_retrieval_score: float = 0.08  # below: nothing is retrieved
    rerank_threshold: float = 0.12  # top rerank score below: fallback answer
    model_name: str = "extractive-v1"
    embedding_model: str = "tfidf-char-2-4"
    reranker_model: str = "tfidf-word-rerank"
    retrieval_config_version: str = "ret-v3"


CONFIGS = {
    "baseline": RagConfig(),
    # the planted prompt regression: hurts Vietnamese policy answers
    "candidate": RagConfig(rag_version="rag-v13", prompt_version="qa-v4"),
}


@dataclass
class Chunk:
    chunk_id: str
    doc_id: str
    doc_version: str
    language: str
    facts: tuple[str, ...]
    text: str


@dataclass
class Candidate:
    chunk: Chunk
    score: float
    rank: int
    rerank_score: float | None = None
    rerank_rank: int | None = None
    selected: bool = False


@dataclass
class RagResult:
    answer: str
    candidates: list[Candidate]
    rewritten_query: str
    is_fallback: bool
    citations: list[str] = field(default_factory=list)

    @property
    def context(self) -> list[Candidate]:
        return [c for c in self.candidates if c.selected]


def _normalize(text: str) -> str:
    return strip_diacritics(text.lower())


def build_chunks(docs: list[DocVersion], chunking_version: str) -> list[Chunk]:
    """One chunk per fact and language (chunk-v1), or per three facts (chunk-v2: longer, vaguer)."""
    chunks = []
    for doc in docs:
        facts = list(doc.facts)
        groups = [facts[i:i + 3] for i in range(0, len(facts), 3)] if chunking_version == "chunk-v2" \
            else [[f] for f in facts]
        for group in groups:
            for lang_index, language in enumerate(("en", "vi")):
                text = " ".join(doc.facts[f][lang_index] for f in group)
                chunks.append(Chunk(doc.chunk_id("+".join(group), language), doc.doc_id,
                                    doc.version, language, tuple(group), text))
    return chunks


class Index:
    """A searchable snapshot of the knowledge base, as a given index build sees it."""

    def __init__(self, docs: list[DocVersion], chunking_version: str, index_version: str):
        # sklearn is imported where it is used: the demo's curator reads the truth beside it
        from sklearn.feature_extraction.text import TfidfVectorizer
        self.index_version = index_version
        self.chunks = build_chunks(docs, chunking_version)
        self._char = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True,
                                     preprocessor=_normalize)
        self._word = TfidfVectorizer(analyzer="word", preprocessor=_normalize,
                                     token_pattern=r"[\w-]+")
        texts = [c.text for c in self.chunks]
        self._char_matrix = self._char.fit_transform(texts)
        self._word_matrix = self._word.fit_transform(texts)
        self._vectors: dict[tuple[bool, str], Any] = {}

    def search(self, query: str, top_k: int) -> list[tuple[int, float]]:
        scores = self._char_matrix @ self._vector(query, word=False)
        order = np.argsort(-scores, kind="stable")[:top_k]
        return [(int(i), float(scores[i])) for i in order]

    def rerank_scores(self, query: str, indices: list[int]) -> list[float]:
        scores = self._word_matrix @ self._vector(query, word=True)  # every row: cheaper than selecting some
        return [float(scores[i]) for i in indices]

    def _vector(self, query: str, word: bool) -> np.ndarray:
        """The query's TF-IDF vector (dense), its nonzeros kept: the demo's sessions ask the same
        queries again."""
        key = (word, query)
        if key not in self._vectors:
            if len(self._vectors) >= 20_000:
                self._vectors.clear()
            self._vectors[key] = tfidf_row(self._word if word else self._char, query)
        indices, weights = self._vectors[key]
        vector = np.zeros(len(self._word.idf_ if word else self._char.idf_))
        vector[indices] = weights
        return vector


def tfidf_row(vectorizer: TfidfVectorizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    """The nonzeros (sorted indices, weights) of a fitted vectorizer's `transform([text])`, bit
    for bit: its counts, sublinear tf, idf and L2 norm in the order scikit-learn computes them.
    `transform` validates its input at ~1 ms a call, 80 % of the demo's simulation."""
    vocabulary = vectorizer.vocabulary_
    counts = Counter(vocabulary[t] for t in vectorizer.build_analyzer()(text) if t in vocabulary)
    indices = np.array(sorted(counts), dtype=np.intp)
    weights = np.array([counts[i] for i in indices.tolist()], dtype=np.float64)
    if vectorizer.sublinear_tf:
        np.log(weights, weights)
        weights += 1.0
    weights *= vectorizer.idf_[indices]
    if vectorizer.norm == "l2":
        total = 0.0
        for weight in weights.tolist():  # summed in order, as sklearn's row normalization does
            total += weight * weight
        if total:
            weights /= math.sqrt(total)
    elif vectorizer.norm is not None:
        raise ValueError(f"norm {vectorizer.norm!r} is not supported")
    return indices, weights


class ReferenceRag:
    """Answer queries with one configuration over one index."""

    def __init__(self, config: RagConfig, index: Index):
        self.config = config
        self.index = index

    def rewrite(self, query: str, previous_query: str | None) -> str:
        """Short follow-ups ("what about SG?") borrow the previous turn's words."""
        if previous_query and len(query.split()) <= 4:
            return f"{previous_query} {query}"
        return query

    def answer(self, query: str, language: str, query_type: str | None = None,
               previous_query: str | None = None) -> RagResult:
        cfg = self.config
        rewritten = self.rewrite(query, previous_query)
        hits = [(i, s) for i, s in self.index.search(rewritten, cfg.top_k)
                if s >= cfg.min_retrieval_score]
        candidates = [Candidate(self.index.chunks[i], s, rank + 1) for rank, (i, s) in enumerate(hits)]
        if not candidates:
            return RagResult(FALLBACK_ANSWER.get(language, FALLBACK_ANSWER["en"]), [], rewritten, True)
        rerank = self.index.rerank_scores(rewritten, [i for i, _ in hits])
        for candidate, score in zip(candidates, rerank):
            bonus = 0.05 if candidate.chunk.language == language else 0.0
            candidate.rerank_score = round(min(1.0, score + bonus), 4)
        for position, candidate in enumerate(sorted(candidates, key=lambda c: -c.rerank_score)):
            candidate.rerank_rank = position + 1
        context = sorted(candidates, key=lambda c: c.rerank_rank)[:cfg.context_k]
        for candidate in context:
            candidate.selected = True
        if context[0].rerank_score < cfg.rerank_threshold:
            return RagResult(FALLBACK_ANSWER.get(language, FALLBACK_ANSWER["en"]), candidates,
                             rewritten, True)
        best = context[0]
        if cfg.prompt_version == "qa-v4" and language == "vi" and query_type == "policy" \
                and len(context) > 1:
            # the regression: the new prompt drops the citation and answers from the wrong chunk
            return RagResult(context[1].chunk.text, candidates, rewritten, False, [])
        answer = f"{best.chunk.text} [{best.chunk.chunk_id}]"
        return RagResult(answer, candidates, rewritten, False, [best.chunk.chunk_id])


class IndexCatalog:
    """The index builds of the demo's timeline, and which one serves a given moment."""

    REBUILD_AT = "2026-11-09T00:00:00Z"  # planted: chunk-v2 rebuild lowers retrieval scores

    def __init__(self):
        self._cache: dict[tuple[str, str], Index] = {}

    def index_version(self, at_iso: str) -> tuple[str, str]:
        if at_iso >= self.REBUILD_AT:
            return "kb-2026-11-09", "chunk-v2"
        return "kb-2026-10-01", "chunk-v1"

    def at(self, at_iso: str) -> Index:
        """The index serving at `at_iso`: newest *indexed* version of every document."""
        version, chunking = self.index_version(at_iso)
        docs = newest_versions(at_iso, "indexed_at")
        key = (version, ",".join(f"{d.doc_id}@{d.version}" for d in docs.values()))
        if key not in self._cache:
            self._cache[key] = Index(list(docs.values()), chunking, version)
        return self._cache[key]

    @cached_property
    def latest(self) -> Index:
        return self.at("2099-01-01T00:00:00Z")


def demo_app(config_name: str = "baseline") -> ReferenceRag:
    """The app as deployed now, for the regression eval: `rag_loop.demo.rag_app:demo_app`."""
    return ReferenceRag(CONFIGS[config_name], IndexCatalog().latest)


@lru_cache(maxsize=4)
def _deployed(config_name: str) -> ReferenceRag:
    return demo_app(config_name)


def answer_for_eval(query: str, attributes: Mapping[str, Any] | None = None,
                    config: str = "baseline") -> dict[str, Any]:
    """The regression eval's system under test (`rag_loop.demo.rag_app:answer_for_eval`).

    `attributes` are the request's routing fields (language, query_type); returns the answer
    and the context given to generation as chunk ids and text.
    """
    attributes = attributes or {}
    result = _deployed(config).answer(query, attributes.get("language") or "en",
                                      attributes.get("query_type"))
    return {"answer": result.answer,
            "retrieval_context": [{"chunk_id": c.chunk.chunk_id, "text": c.chunk.text}
                                  for c in result.context]}
