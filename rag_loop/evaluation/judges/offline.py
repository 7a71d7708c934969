"""The offline judge: DeepEval's five RAG metrics as DeepEval custom metrics (`BaseMetric`).

They keep DeepEval's names and score definitions (seed 000 §06-§10) but decide the semantic
verdicts with the deterministic rules of `evidence.py` and `support.py` instead of an LLM.
Faithfulness, Answer Relevancy and Contextual Relevancy are graded (a mean of per-statement
grades in [0, 1], the k/n verdict count kept in the reason); Recall, Precision and Correctness
still count verdicts. They are a
heuristic instrument for offline runs and CI, not an LLM judge. A GEval criterion named
"Correctness" has an offline stand-in too; other GEval criteria need the LLM judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from deepeval.metrics import BaseMetric
from deepeval.test_case import LLMTestCase, SingleTurnParams

from rag_loop.evaluation.judges.base import Judge, JudgeUsage
from rag_loop.evaluation.judges.evidence import (
    RELEVANCE_SIMILARITY,
    SUPPORT_SIMILARITY,
    Evidence,
    content_words,
    key_tokens,
    statements,
)
from rag_loop.evaluation.judges.support import OVERLAP_SHARE, Context, faithfulness
from rag_loop.evaluation.settings import DEFAULT_GEVAL, METRIC_NAMES, OFFLINE_JUDGE, OFFLINE_THRESHOLDS
from rag_loop.vectors.embedding import BUNDLED_MODEL_ID, Embedder

# A claim counts as "supported" in the reason when its support reaches this (reason only).
CLAIM_SUPPORTED = 0.5
# Graded relevance: 0 below RELEVANCE_FLOOR similarity, 1 from RELEVANCE_CEILING, linear between
# (centred on 0.3; the seed worked examples sit outside the ramp, so keep their k/n figures).
RELEVANCE_FLOOR, RELEVANCE_CEILING = 0.2, 0.4
_DEFAULT = object()


@lru_cache(maxsize=1)
def shared_evidence() -> Evidence:
    """One Evidence (embedding cache, the bundled model) for every metric built without one."""
    return Evidence()


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

    def __init__(self, evidence: Evidence | None = None, threshold: float | None = _DEFAULT,
                 include_reason: bool = True):
        self._evidence = evidence
        self.threshold = OFFLINE_THRESHOLDS.get(self.name, 0.5) if threshold is _DEFAULT else threshold
        self.include_reason = include_reason
        self.evaluation_model = f"{OFFLINE_JUDGE} ({evidence.model_id if evidence else BUNDLED_MODEL_ID})"
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

    @property
    def evidence(self) -> Evidence:
        if self._evidence is None:  # built lazily: Faithfulness never needs the embedder
            self._evidence = shared_evidence()
        return self._evidence

    @evidence.setter
    def evidence(self, value: Evidence) -> None:
        self._evidence = value

    def score_case(self, case: LLMTestCase) -> tuple[float, str]:
        raise NotImplementedError

    @property
    def __name__(self) -> str:
        return self.name


def graded_reason(texts: Sequence[str], grades: Sequence[float], what: str, failing: str,
                  cut: float) -> str:
    """"k/n <what> (mean 0.83)", the verdict count at `cut` kept, then the weakest texts."""
    verdicts = [g >= cut for g in grades]
    mean = sum(grades) / len(grades) if grades else 0.0
    weakest = sorted((g, t) for t, g in zip(texts, grades) if g < cut)[:3]
    return (f"{sum(verdicts)}/{len(texts)} {what} (mean {mean:.2f})"
            + (f"; {failing}: {[f'{t} ({g:.2f})' for g, t in weakest]}" if weakest else ""))


@lru_cache(maxsize=65536)
def codes(text: str) -> frozenset[str]:
    """The identifiers a text names (error codes, ticket ids: key tokens with a letter, such as
    "err-pay-977"), not its plain numbers or e-mail addresses."""
    return frozenset(t for t in key_tokens(text) if "@" not in t and any(c.isalpha() for c in t))


def relevance_grades(evidence: Evidence, texts: Sequence[str], query: str) -> list[float]:
    """Graded relevance of each text to the query: max(cosine, share of the query's content
    words in the text), ramped from 0 at RELEVANCE_FLOOR to 1 at RELEVANCE_CEILING. A text
    about other identifiers than the query's ("ERR-PAY-942 means ..." for "what is
    ERR-PAY-977?") is not relevant, however alike the two read."""
    if not texts:
        return []
    cosine = (evidence.vectors(list(texts)) @ evidence.vectors([query]).T)[:, 0]
    wanted, asked = content_words(query), codes(query)
    coverage = np.array([len(wanted & content_words(t)) / len(wanted) if wanted else 0.0 for t in texts])
    similarity = np.maximum(cosine, coverage)
    ramp = np.clip((similarity - RELEVANCE_FLOOR) / (RELEVANCE_CEILING - RELEVANCE_FLOOR), 0.0, 1.0)
    named = [codes(t) for t in texts]
    return [0.0 if asked and found and not found & asked else float(g) for g, found in zip(ramp, named)]


class OfflineFaithfulness(OfflineMetric):
    """Mean grade of the answer's claims by the retrieval context (`support.py`: the rules'
    support blended with the claim's bare word overlap, so that the score keeps overlap's
    ranking where a rule misjudges unseen data): a continuous score in [0, 1]; a question in
    the answer counts as an unsupported claim, and an answer with no claims scores 0."""

    name = "Faithfulness"

    def score_case(self, case):
        judged = faithfulness(statements(case.actual_output), Context(case.retrieval_context or []),
                              case.input or "")
        if not judged:
            return 0.0, "no claims in the answer"
        claims, grades = zip(*judged)
        return (sum(grades) / len(grades),
                graded_reason(claims, grades, "claims supported", "unsupported", CLAIM_SUPPORTED))


class OfflineAnswerRelevancy(OfflineMetric):
    """Mean graded relevance of the answer's statements to the input."""

    name = "Answer Relevancy"

    def score_case(self, case):
        found = statements(case.actual_output)
        grades = relevance_grades(self.evidence, found, case.input)
        return (sum(grades) / len(grades) if grades else 0.0,
                graded_reason(found, grades, "statements relevant to the input", "irrelevant", 0.5))


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
    """Mean graded relevance of the retrieval context's statements to the input."""

    name = "Contextual Relevancy"

    def score_case(self, case):
        found = context_statements(case)
        grades = relevance_grades(self.evidence, found, case.input)
        return (sum(grades) / len(grades) if grades else 0.0,
                graded_reason(found, grades, "context statements relevant to the input", "irrelevant", 0.5))


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


class OfflineJudge(Judge):
    """The offline instrument: no key, no network, deterministic; relevancy metrics embed with
    `embedder` (the embedder resource's default model). A GEval criterion other than
    "Correctness" has no offline stand-in and is listed as skipped."""

    def __init__(self, embedder: Embedder | None = None, geval: Sequence[Mapping[str, Any]] = DEFAULT_GEVAL):
        self.evidence = Evidence(embedder)
        self.geval = [dict(g) for g in geval]
        self.usage = JudgeUsage()

    def metrics(self, thresholds: Mapping[str, float | None],
                geval: Sequence[Mapping[str, Any]] | None = None) -> list[BaseMetric]:
        classes = {c.name: c for c in OFFLINE_METRICS}
        metrics: list[BaseMetric] = [
            classes[name](self.evidence, threshold=thresholds.get(name, OFFLINE_THRESHOLDS[name]))
            for name in METRIC_NAMES if name in thresholds]
        return metrics + [OfflineCorrectness(self.evidence, threshold=spec.get("threshold", 0.5))
                          for spec in (self.geval if geval is None else geval)
                          if spec["name"] == "Correctness"]

    def prepare(self, cases: Sequence[LLMTestCase]) -> None:
        """Embed every text the relevancy metrics will compare, in one batch."""
        texts = [t for case in cases for t in (case.input or "", *statements(case.actual_output),
                                               *context_statements(case)) if t]
        self.evidence.vectors(list(dict.fromkeys(texts)))

    def describe(self) -> dict[str, Any]:
        return {"kind": "offline", "model": f"{OFFLINE_JUDGE} ({self.evidence.model_id})",
                "geval": [s["name"] for s in self.geval if s["name"] == "Correctness"],
                "geval_skipped_offline": [s["name"] for s in self.geval if s["name"] != "Correctness"],
                "rules": {"support_similarity": SUPPORT_SIMILARITY,
                          "relevance_similarity": RELEVANCE_SIMILARITY,
                          "faithfulness_overlap_share": OVERLAP_SHARE}}
