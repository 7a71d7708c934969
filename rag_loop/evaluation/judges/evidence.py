"""The offline judge's evidence rules: deterministic, documented, and a heuristic instrument.

- Statements: text split into sentences (., !, ?, ;, line breaks); bracketed citations such
  as `[leave-policy@2026#annual-en]` are dropped first.
- Key tokens: numbers (with their unit-free digits: "15", "7.5", "90"), codes with a digit
  or a dash between capitals ("ERR-PAY-942", "MFA2"), and e-mail addresses. A claim whose key
  tokens are not all in the evidence is never supported: "12 days" is not "15 days".
- Similarity: the larger of the cosine of the two texts' embeddings (the `embedder`
  resource's default model, the bundled all-MiniLM-L6-v2 unless configured; accents folded)
  and the share of content words found in the other text (the claim's words in the evidence
  for support; the query's words in the statement for relevance).
- A claim is *supported* by an evidence sentence when the key tokens match and similarity
  >= 0.6; a statement is *relevant* to a query when similarity >= 0.35.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from rag_loop.text import fold_accents
from rag_loop.vectors.embedding import Embedder, bundled_embedder

SUPPORT_SIMILARITY = 0.6
RELEVANCE_SIMILARITY = 0.35
MAX_CACHED_VECTORS = 100_000  # about 150 MB of 384-dimensional vectors
_CITATION = re.compile(r"\[[^\]\s]+\]")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_KEY = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|\b(?=[\w-]*\d)[\w-]+\b|\b[A-Z]{2,}(?:-[A-Z0-9]+)+\b")
_WORD = re.compile(r"\w+")
_STOP = frozenset(["a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "is", "are", "be", "was", "were", "it", "its", "this", "that", "with", "as", "at", "by", "from", "do", "does", "did", "i", "you", "we", "they", "my", "your", "our", "can", "how", "what", "when", "where", "which", "who", "why", "per", "up", "la", "co", "duoc", "cho", "va", "khong", "voi", "cua", "toi", "ban", "minh", "thi", "nao", "the", "gi"])


# The rules below are pure functions of a text, and a judging run asks them of the same texts
# over and over (a knowledge base's sentences recur in every trace that retrieved them, a
# query is compared with each of its statements): they are cached per text.
_TEXTS_CACHED = 65536


def statements(text: str | None) -> list[str]:
    """Sentences of a text, citations removed, empty ones dropped."""
    return list(_statements(text)) if text else []


@lru_cache(maxsize=_TEXTS_CACHED // 4)  # whole answers and chunks: fewer, longer texts
def _statements(text: str) -> tuple[str, ...]:
    cleaned = _CITATION.sub(" ", text)
    return tuple(s.strip(" .;") for s in _SENTENCE_END.split(cleaned) if s.strip(" .;"))


@lru_cache(maxsize=_TEXTS_CACHED)
def key_tokens(text: str) -> frozenset[str]:
    """Numbers, codes and e-mail addresses: what must match exactly."""
    return frozenset(t.lower().strip(".") for t in _KEY.findall(text))


@lru_cache(maxsize=_TEXTS_CACHED)
def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(fold_accents(text).lower()) if w not in _STOP and len(w) > 1)


class Evidence:
    """Similarity, support and relevance between short texts, with an embedding cache."""

    def __init__(self, embedder: Embedder | None = None):
        self.embedder = embedder or bundled_embedder()
        self._cache: dict[str, np.ndarray] = {}

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if len(self._cache) + len(missing) > MAX_CACHED_VECTORS:  # a long online run stays bounded
            self._cache.clear()
            missing = list(dict.fromkeys(texts))
        if missing:
            for text, vector in zip(missing, self.embedder.embed([fold_accents(t) for t in missing]),
                                    strict=True):
                self._cache[text] = vector
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 1))

    def similarity(self, claims: Sequence[str], evidence: Sequence[str]) -> np.ndarray:
        """claims × evidence: max(cosine, share of the claim's content words in the evidence)."""
        if not claims or not evidence:
            return np.zeros((len(claims), len(evidence)))
        cosine = self.vectors(list(claims)) @ self.vectors(list(evidence)).T
        words = [content_words(c) for c in claims]
        other = [content_words(e) for e in evidence]
        coverage = np.array([[len(w & o) / len(w) if w else 0.0 for o in other] for w in words])
        return np.maximum(cosine, coverage)

    def supported(self, claims: Sequence[str], evidence: Sequence[str]) -> list[bool]:
        """Is each claim supported by one evidence sentence (key tokens match, similar enough)?"""
        if not evidence:
            return [False] * len(claims)
        similarity = self.similarity(claims, evidence)
        keys = [key_tokens(e) for e in evidence]
        return [any(similarity[i, j] >= SUPPORT_SIMILARITY and key_tokens(c) <= keys[j]
                    for j in range(len(evidence))) for i, c in enumerate(claims)]

    def relevant(self, texts: Sequence[str], query: str) -> list[bool]:
        """Is each text about the query (cosine, or the share of the query's words it has)?"""
        if not texts:
            return []
        cosine = (self.vectors(list(texts)) @ self.vectors([query]).T)[:, 0]
        wanted = content_words(query)
        coverage = [len(wanted & content_words(t)) / len(wanted) if wanted else 0.0 for t in texts]
        return [bool(max(c, w) >= RELEVANCE_SIMILARITY) for c, w in zip(cosine, coverage)]

