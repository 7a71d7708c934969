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


def context_statements(case: LLMTestCase) -> list[str]:
    return [s for node in case.retrieval_context or [] for s in statements(node)]


def reason(texts: Sequence[str], verdicts: Sequence[bool], what: str, failing: str) -> str:
    """"k/n <what>", then the first few texts that failed, e.g. "; missing: [...]"."""
    failed = [t for t, ok in zip(texts, verdicts) if not ok]
    return f"{sum(verdicts)}/{len(texts)} {what}" + (f"; {failing}: {failed[:3]}" if failed else "")


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
        verdicts = self.evidence.supported(claims, context_statements(case))
        return ratio(verdicts, empty=1.0), reason(claims, verdicts, "claims supported", "unsupported")


class OfflineAnswerRelevancy(OfflineMetric):
    """Statements of the answer relevant to the input / all statements."""

    name = "Answer Relevancy"

    def score_case(self, case):
        found = statements(case.actual_output)
        verdicts = self.evidence.relevant(found, case.input)
        return ratio(verdicts), reason(found, verdicts, "statements relevant to the input", "irrelevant")


class OfflineContextualRecall(OfflineMetric):
    """Statements of the expected output attributable to the retrieval context / all."""

    name = "Contextual Recall"

    def score_case(self, case):
        expected = statements(case.expected_output)
        verdicts = self.evidence.supported(expected, context_statements(case))
        return ratio(verdicts), reason(expected, verdicts, "expected statements found in the context",
                                       "missing")


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
        found = context_statements(case)
        verdicts = self.evidence.relevant(found, case.input)
        return ratio(verdicts), f"{sum(verdicts)}/{len(found)} context statements relevant to the input"


class OfflineCorrectness(OfflineMetric):
    """Stand-in for a GEval "Correctness" criterion: statements of the expected output that
    the actual output supports / all expected statements (reference-based)."""

    name = "Correctness [GEval]"

    def score_case(self, case):
        expected = statements(case.expected_output)
        verdicts = self.evidence.supported(expected, statements(case.actual_output))
        return ratio(verdicts), reason(expected, verdicts, "expected statements in the answer", "missing")


OFFLINE_METRICS = (OfflineFaithfulness, OfflineAnswerRelevancy, OfflineContextualRecall,
                   OfflineContextualPrecision, OfflineContextualRelevancy, OfflineCorrectness)
