"""The embedding cache: vectors by model and normalized-text hash, so no text is embedded twice."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import duckdb
import numpy as np
import pyarrow as pa

from rag_loop.logs import Log, quiet
from rag_loop.store.ddl import EMBEDDING_CACHE_DDL
from rag_loop.text import normalize_text
from rag_loop.vectors.embedding import Embedder


def text_hash(text: str) -> str:
    return hashlib.sha256(normalize_text(text).encode()).hexdigest()[:32]


def embed_cached(con: duckdb.DuckDBPyConnection, embedder: Embedder, texts: Sequence[str],
                 batch_rows: int = 2048, log: Log = quiet) -> np.ndarray:
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
