"""One embedder per language, a default for the rest, every text through the cache."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import duckdb
import numpy as np

from rag_loop.logs import Log, quiet
from rag_loop.text import fold_accents
from rag_loop.vectors.cache import embed_cached
from rag_loop.vectors.embedding import Embedder, load_embedder


class LanguageRouter:
    """One embedder per language, a default for the rest; models load on first use.

    Languages in `fold_accents_for` are embedded without diacritics.
    """

    def __init__(self, default: str | None = None, by_language: Mapping[str, str] | None = None,
                 fold_accents_for: Sequence[str] = (), batch_size: int = 64,
                 loader: Callable[[str | None, int], Embedder] = load_embedder):
        self.default, self.by_language = default, dict(by_language or {})
        self.fold_accents_for = frozenset(fold_accents_for)
        self.batch_size, self._loader = batch_size, loader
        self._loaded: dict[str | None, Embedder] = {}

    def configured(self, language: str | None) -> bool:
        """Whether the language has its own model (else the default model embeds it)."""
        return (language or "") in self.by_language

    def for_language(self, language: str | None) -> Embedder:
        spec = self.by_language.get(language or "", self.default)
        if spec not in self._loaded:
            self._loaded[spec] = self._loader(spec, self.batch_size)
        return self._loaded[spec]

    def prepare(self, text: str, language: str | None) -> str:
        """The text as this language's embedder sees it."""
        return fold_accents(text) if language in self.fold_accents_for else text

    def embed(self, con: duckdb.DuckDBPyConnection, texts: Sequence[str], language: str | None,
              log: Log = quiet) -> tuple[str, np.ndarray]:
        """(model id, vectors) of texts in one language, through the cache."""
        embedder = self.for_language(language)
        prepared = [self.prepare(t, language) for t in texts]
        return embedder.model_id, embed_cached(con, embedder, prepared, log=log)

    def count_truncated(self, texts: Sequence[str], language: str | None) -> int | None:
        """How many texts the language's model truncates to its window (None: not known)."""
        counter = getattr(self.for_language(language), "count_truncated", None)
        return counter([self.prepare(t, language) for t in texts]) if counter else None
