"""Test resources: a model-free embedder that stands in for the bundled models."""

from collections.abc import Sequence

import numpy as np

from rag_loop.vectors.embedding import Embedder
from rag_loop.vectors.router import LanguageRouter
from rag_loop_dagster.assets.resources import EmbedderResource


class HashingEmbedder:
    """Hashed word and character n-gram counts: no model, deterministic, fast.

    Paraphrases that share words or spellings land close; synonyms do not. For tests and
    smoke runs where the real models would dominate the time, never for production dedup.
    """

    model_id = "hashing-words-chars-v1"

    def __init__(self, dim: int = 512) -> None:
        from sklearn.feature_extraction.text import HashingVectorizer
        self.dim = dim
        self.words = HashingVectorizer(n_features=dim, alternate_sign=False, norm=None)
        self.chars = HashingVectorizer(n_features=dim, alternate_sign=False, norm=None,
                                       analyzer="char_wb", ngram_range=(3, 3))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        counts = self.words.transform(texts) * 2.0 + self.chars.transform(texts)
        vectors = np.asarray(counts.toarray(), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)



def hashing_router(fold_accents_for: Sequence[str] = ("vi",)) -> LanguageRouter:
    """Every language embedded by the hashing embedder."""
    return LanguageRouter(None, {}, fold_accents_for, loader=lambda spec, batch_size: HashingEmbedder())


class HashingEmbedderResource(EmbedderResource):
    """The embedder resource of asset tests: deterministic, model-free."""

    fold_accents_for: list[str] = ["vi"]

    def router(self) -> LanguageRouter:
        return hashing_router(self.fold_accents_for)

    def default_embedder(self) -> Embedder:
        return HashingEmbedder()
