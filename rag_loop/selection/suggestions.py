"""A first guess at a selected trace's failure layer and origin from its signals (seed 004
§13), shown to curators and mixed into each intent cluster's failure_mix."""

from __future__ import annotations

from collections.abc import Sequence

from rag_loop.schema import FailureType, Origin

_AVAILABILITY_SIGNALS = frozenset({"timeout", "error", "latency_over_budget"})


_FEEDBACK_FAILURE = {
    "outdated_source": FailureType.DATA_FRESHNESS, "wrong_source": FailureType.RETRIEVAL,
    "missing_info": FailureType.RETRIEVAL, "irrelevant": FailureType.RETRIEVAL,
    "hallucination": FailureType.GENERATION, "incorrect": FailureType.GENERATION,
    "too_verbose": FailureType.GENERATION, "too_slow": FailureType.NONE,
}


def _verdict(value: object) -> bool | None:
    return None if value is None or value != value else bool(value)  # NaN / NA: not judged


def judged_failure(trace: dict) -> tuple[FailureType, str] | None:
    """What the online judge's verdicts suggest: an answer the context does not support, or
    that misses the query, on a relevant context is `generation`; an irrelevant context is
    `retrieval`. None where the judge found nothing (or did not judge)."""
    faithful = _verdict(trace.get("faithfulness_passed"))
    relevant_context = _verdict(trace.get("contextual_relevancy_passed"))
    on_topic = _verdict(trace.get("answer_relevancy_passed"))
    if relevant_context is False:
        return FailureType.RETRIEVAL, (f"judge: the context is not relevant to the query (contextual "
                                       f"relevancy {trace['contextual_relevancy_score']:.2f})")
    if faithful is False:
        return FailureType.GENERATION, (f"judge: the answer is not supported by the context "
                                        f"(faithfulness {trace['faithfulness_score']:.2f})")
    if on_topic is False:
        return FailureType.GENERATION, (f"judge: the answer does not address the query (answer "
                                        f"relevancy {trace['answer_relevancy_score']:.2f})")
    return None


def suggest_failure_type(trace: dict) -> tuple[FailureType, str]:
    """A first guess at the failure layer from the trace's signals (seed 004 §13) and the online
    judge's verdicts where it judged the trace, with why.

    Checked in the seed's order, from data to generation: an outdated source, a follow-up the
    rewriter did not resolve, nothing retrieved, the retriever's best chunk dropped by the
    reranker, weak retrieval, what the judge found, then a good context with a bad answer.
    """
    signals = set(trace.get("signals") or [])
    judged = judged_failure(trace)
    if not signals:
        return judged or (FailureType.NONE, "no failure signal (random quality control)")
    if not signals - _AVAILABILITY_SIGNALS:
        return FailureType.NONE, "availability only: " + ", ".join(sorted(signals))
    if "stale_source" in signals:
        return FailureType.DATA_FRESHNESS, "a context chunk's document version was outdated"
    weak = signals & {"empty_retrieval", "low_rerank_score", "fallback"}
    if weak and (trace.get("turn_id") or 1) > 1 and not trace.get("rewritten_query"):
        return FailureType.QUERY_REWRITE, "a follow-up turn, not rewritten, retrieved poorly"
    if "empty_retrieval" in signals:
        return FailureType.RETRIEVAL, "nothing was retrieved"
    if trace.get("top_chunk_reranked_out"):
        return FailureType.RERANKING, "the retriever's top chunk was ranked out of the context"
    if weak:
        return FailureType.RETRIEVAL, "low rerank score or fallback: no good evidence found"
    if judged:
        return judged
    if "no_citation" in signals:
        return FailureType.GENERATION, "good retrieval, but the answer cites nothing"
    category = trace.get("feedback_category")
    if "thumbs_down" in signals and category in _FEEDBACK_FAILURE:
        return _FEEDBACK_FAILURE[category], f"thumbs-down: {category}"
    if "thumbs_down" in signals:
        return FailureType.GENERATION, "thumbs-down with good retrieval"
    return FailureType.GENERATION, "rephrased at once although retrieval looked fine"


def suggest_origin(signals: Sequence[str]) -> Origin:
    return Origin.PRODUCTION_FAILURE if len(signals) else Origin.PRODUCTION_SAMPLE
