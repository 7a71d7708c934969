"""TODO docstring."""

import pytest

from rag_loop.vectors.embedding import (
    SentenceTransformerEmbedder,
)


@pytest.fixture(scope="module")
def minilm():
    return SentenceTransformerEmbedder()
