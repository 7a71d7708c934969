"""The suggested failure type follows seed 004 §13's order."""

import pytest

from rag_loop.schema import FailureType
from rag_loop.selection.suggestions import suggest_failure_type

UNFAITHFUL = {"faithfulness_passed": False, "faithfulness_score": 0.2, "contextual_relevancy_passed": True}
IRRELEVANT_CONTEXT = {"faithfulness_passed": True, "contextual_relevancy_passed": False,
                      "contextual_relevancy_score": 0.1}


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
    # the online judge's verdicts, where it judged the trace
    ({"signals": [], **UNFAITHFUL}, FailureType.GENERATION),  # random stream: no signal, judged bad
    ({"signals": [], **IRRELEVANT_CONTEXT}, FailureType.RETRIEVAL),
    ({"signals": ["thumbs_down"], "feedback_category": "outdated_source", **UNFAITHFUL},
     FailureType.GENERATION),  # the judge's evidence comes before the feedback category
    ({"signals": ["stale_source"], **UNFAITHFUL}, FailureType.DATA_FRESHNESS),  # structure first
    ({"signals": [], "faithfulness_passed": None, "contextual_relevancy_passed": float("nan")},
     FailureType.NONE),  # not judged
])
def test_suggested_failure_type_rules(trace, expected):
    assert suggest_failure_type(trace)[0] == expected
