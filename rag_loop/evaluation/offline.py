"""The offline judge: DeepEval's five RAG metrics as DeepEval custom metrics (`BaseMetric`).

They keep DeepEval's names and score definitions (seed 000 §06-§10) but decide the semantic
verdicts with the deterministic rules of `evidence.py` instead of an LLM. They are a
heuristic instrument for offline runs and CI, not an LLM judge. A GEval criterion named
"Correctness" has an offline stand-in too; other GEval criteria need the LLM judge.
"""

from __future__ import annotations

from collections.abc import Sequence

from deepeval.metrics import BaseMetric
from deepeval.test_case import LLMTestCase, SingleTurnParams

from rag_loop.evaluation.evidence import Evidence, statements

OFFLINE_JUDGE = "offline-evidence-rules-v1"


def average_precision(relevant: Sequence[bool]) -> float:
    """DeepEval's contextual precision: (1/R) Σ_k (R_k / k) · r_k over the ranked nodes."""
    hits, total = 0, 0.0
    for k, is_relevant in enumerate(relevant, start=1):
        if is_relevant:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


def ratio(verdicts: Sequence[bool], empty: float = 0.0) -> float:
    return sum(verdicts) / len(verdicts) if verdicts else empty


class OfflineMetric(BaseMetric):
    """Shared plumbing: threshold, verdicts kept for the reason, sync and async alike."""

    name = "Offline"
    _required_params: list[SingleTurnParams] = []

    def __init__(self, evidence: Evidence, threshold: float | None = 0.5, include_reason: bool = True):
        self.evidence = evidence
        self.threshold = threshold
        self.include_reason = include_reason
        self.evaluation_model = f"{OFFLINE_JUDGE} ({evidence.model_id})"
        self.async_mode = False
        self.strict_mode = False
        self.verbose_mode = False

    def measure(self, test_case: LLMTestCase, *args, **kwargs) -> float:
        self.error = None
        self.score, self.reason = self.score_case(test_case)
        self.success = self.is_successful()
        return self.score

    async def a_measure(self, test_case: LLMTestCase, *args, **kwargs) -> float:
        return self.measure(test_case)

    def score_case(self, case: LLMTestCase) -> tuple[float, str]:
        raise NotImplementedError

    @property
    def __name__(self) -> str:
        return self.name


class OfflineFaithfulness(OfflineMetric):
    """Claims of the answer supported by the retrieval context / all claims."""

    name = "Faithfulness"

    def score_case(self, case):
        claims = statements(case.actual_output)
        evidence = [s for node in case.retrieval_context or [] for s in statements(node)]
        verdicts = self.evidence.supported(claims, evidence)
        unsupported = [c for c, ok in zip(claims, verdicts) if not ok]
        return ratio(verdicts, empty=1.0), (f"{sum(verdicts)}/{len(claims)} claims supported"
                                            + (f"; unsupported: {unsupported[:3]}" if unsupported else ""))


class OfflineAnswerRelevancy(OfflineMetric):
    """Statements of the answer relevant to the input / all statements."""

    name = "Answer Relevancy"

    def score_case(self, case):
        found = statements(case.actual_output)
        verdicts = self.evidence.relevant(found, case.input)
        off_topic = [s for s, ok in zip(found, verdicts) if not ok]
        return ratio(verdicts), (f"{sum(verdicts)}/{len(found)} statements relevant to the input"
                                 + (f"; irrelevant: {off_topic[:3]}" if off_topic else ""))


class OfflineContextualRecall(OfflineMetric):
    """Statements of the expected output attributable to the retrieval context / all."""

    name = "Contextual Recall"

    def score_case(self, case):
        expected = statements(case.expected_output)
        evidence = [s for node in case.retrieval_context or [] for s in statements(node)]
        verdicts = self.evidence.supported(expected, evidence)
        missing = [s for s, ok in zip(expected, verdicts) if not ok]
        return ratio(verdicts), (f"{sum(verdicts)}/{len(expected)} expected statements found in "
                                 f"the context" + (f"; missing: {missing[:3]}" if missing else ""))


class OfflineContextualPrecision(OfflineMetric):
    """Average precision of the ranked context nodes; a node is relevant when it supports a
    statement of the expected output."""

    name = "Contextual Precision"

    def score_case(self, case):
        expected = statements(case.expected_output)
        relevant = [any(self.evidence.supported(expected, statements(node)))
                    for node in case.retrieval_context or []]
        marks = "".join("R" if r else "-" for r in relevant)
        return average_precision(relevant), f"relevance by rank: {marks or 'no context'}"


class OfflineContextualRelevancy(OfflineMetric):
    """Statements of the retrieval context relevant to the input / all context statements."""

    name = "Contextual Relevancy"

    def score_case(self, case):
        found = [s for node in case.retrieval_context or [] for s in statements(node)]
        verdicts = self.evidence.relevant(found, case.input)
        return ratio(verdicts), f"{sum(verdicts)}/{len(found)} context statements relevant to the input"


class OfflineCorrectness(OfflineMetric):
    """Stand-in for a GEval "Correctness" criterion: statements of the expected output that
    the actual output supports / all expected statements (reference-based)."""

    name = "Correctness [GEval]"

    def score_case(self, case):
        expected = statements(case.expected_output)
        verdicts = self.evidence.supported(expected, statements(case.actual_output))
        missing = [s for s, ok in zip(expected, verdicts) if not ok]
        return ratio(verdicts), (f"{sum(verdicts)}/{len(expected)} expected statements in the answer"
                                 + (f"; missing: {missing[:3]}" if missing else ""))


OFFLINE_METRICS = (OfflineFaithfulness, OfflineAnswerRelevancy, OfflineContextualRecall,
                   OfflineContextualPrecision, OfflineContextualRelevancy, OfflineCorrectness)
