"""The reference app's query vectors are scikit-learn's, bit for bit (the committed demo data
is what they make: tests/demo/test_generate.py)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_loop.demo.intent_catalog import INTENTS, paraphrase
from rag_loop.demo.rag_app import IndexCatalog, tfidf_row

INDEXES = (IndexCatalog().at("2026-11-01T00:00:00Z"), IndexCatalog().latest)  # chunk-v1 and chunk-v2
TEMPLATES = [(t, "en") for i in INTENTS for t in i.en] + [(t, "vi") for i in INTENTS for t in i.vi]
# what users type: the catalog's paraphrases, or any text (accents, digits, punctuation, nothing known)
QUERIES = st.tuples(st.sampled_from(TEMPLATES), st.randoms(use_true_random=False)).map(
    lambda t: paraphrase(t[0][0], t[0][1], t[1])) | st.text(st.sampled_from("aăâeêioôơuưy dđnghtk?-0123 ÁỒ"))


@settings(max_examples=200, deadline=None)
@given(query=QUERIES, index=st.sampled_from(INDEXES), word=st.booleans())
def test_a_query_vector_is_sklearns_transform_bit_for_bit(query, index, word):
    vectorizer = index._word if word else index._char
    expected = vectorizer.transform([query])
    indices, weights = tfidf_row(vectorizer, query)
    assert indices.tolist() == expected.indices.tolist()
    assert weights.tobytes() == expected.data.tobytes()
    assert np.array_equal(index._vector(query, word), expected.toarray().ravel())

