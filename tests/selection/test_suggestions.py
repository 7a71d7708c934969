"""The suggested failure type follows seed 004 §13's order."""

import pytest

from rag_loop.schema import FailureType
from rag_loop.selection.suggestions import suggest_failure_type


@pytest.mark.parametrize("trace, expected", [
    ({"signals": []}, FailureType.NONE),
    ({"signals": ["timeout", "latency_over_budget"]}, FailureType.NONE),
    ({"signals": ["stale_source", "thumbs_down"]}, FailureType.DATA_FRESHNESS),
    ({"signals": ["low_rerank_score", "fallback"], "turn_id": 2}, FailureType.QUERY_REWRITE),
    ({"signals": ["low_rerank_score"], "turn_id": 2, "rewritten_query": "leave in SG"},
     FailureType.RETRIEVAL),
    ({"signals": ["empty_retrieval", "fallback"]}, FailureType.RETRIEVAL),
    ({"signals": ["thumbs_down"], "top_chunk_reranked_out": True}, FailureType.RERANKING),
    ({"signals": ["no_citation"]}, FailureType.GENERATION),
    ({"signals": ["thumbs_down"], "feedback_category": "outdated_source"}, FailureType.DATA_FRESHNESS),
    ({"signals": ["thumbs_down"], "feedback_category": "missing_info"}, FailureType.RETRIEVAL),
    ({"signals": ["thumbs_down"]}, FailureType.GENERATION),
])
def test_suggested_failure_type_rules(trace, expected):
    assert suggest_failure_type(trace)[0] == expected
