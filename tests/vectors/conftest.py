"""The bundled MiniLM, loaded once per module that asks for it."""

import pytest

from rag_loop.vectors.embedding import (
    SentenceTransformerEmbedder,
)


@pytest.fixture(scope="module")
def minilm():
    return SentenceTransformerEmbedder()
