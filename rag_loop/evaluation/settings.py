"""What an evaluation is configured with: metrics, thresholds, gates, the judge, the system
under test. Free of DeepEval, so that loading the Dagster definitions does not import it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rag_loop.evaluation.gates import Gate
from rag_loop.evaluation.trust import TrustSettings

if TYPE_CHECKING:
    from rag_loop.evaluation.alignment import Alignment

OFFLINE_JUDGE = "offline-evidence-rules-v4"  # bump when a rule changes: online judging re-judges

# The one place for the metrics' pass thresholds: each offline class's default, and the
# pipeline's (DEFAULT_THRESHOLDS below reads them); None = monitoring only, no verdict.
# Faithfulness 0.75: chosen on the BEGIN CMU-DoG dev set (337 human labels) by the maximum of
# Cohen's kappa over cuts 0.05..1.0 (judge v3: kappa 0.831). With judge v4's overlap blend,
# CMU-DoG would pick 0.70 (kappa 0.816; 0.800 at 0.75) and Topical-Chat dev gives 0.733 at 0.70,
# 0.761 at 0.75: kept at 0.75, which does no worse across both sets. Re-check with
# `python bench/judge.py` (or `rag-loop calibrate` on your own labels).
OFFLINE_THRESHOLDS: dict[str, float | None] = {
    "Faithfulness": 0.75, "Answer Relevancy": 0.7, "Contextual Recall": 0.7,
    "Contextual Precision": 0.5, "Contextual Relevancy": None, "Correctness [GEval]": 0.5}

METRIC_NAMES = ("Faithfulness", "Answer Relevancy", "Contextual Recall", "Contextual Precision",
                "Contextual Relevancy")
CORRECTNESS = {
    "name": "Correctness", "threshold": 0.7,
    "criteria": "Determine whether the actual output states the facts of the expected output "
                "(numbers, dates, codes and names must match); extra unrelated facts count against it.",
    "evaluation_params": ["input", "actual_output", "expected_output"]}

# one threshold per metric, in one place (OFFLINE_THRESHOLDS above, chosen on human labels);
# None: monitoring, no verdict. GEval criteria carry their own threshold.
DEFAULT_THRESHOLDS: dict[str, float | None] = {
    name: OFFLINE_THRESHOLDS[name] for name in METRIC_NAMES}
DEFAULT_GATES = (
    Gate("Correctness [GEval]", max_drop=0.10, slices=("all", "language", "query_type")),
    Gate("Faithfulness", min_pass_rate=0.8),
    Gate("Answer Relevancy", max_drop=0.10, slices=("all", "language", "query_type")),
    Gate("Contextual Recall", min_pass_rate=0.6),
    Gate("Contextual Precision", min_mean=0.5, blocking=False),
    Gate("Contextual Relevancy", min_mean=0.3, blocking=False),
)


@dataclass
class EvalSettings:
    release: str = "latest"
    mode: str = "live"  # or "replay": score what production answered
    rag_app: str = ""  # what is evaluated, as recorded with the run (an import path or a URL)
    rag_config: Mapping[str, Any] = field(default_factory=dict)
    thresholds: Mapping[str, float | None] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    gates: Sequence[Gate] = DEFAULT_GATES
    baseline_run: str | None = None
    concurrency: int = 8
    max_error_rate: float = 0.05
    severe_below: float = 0.3
    deadline_seconds: float | None = None  # the run ends at this limit with what it has scored
    trust: TrustSettings | None = None  # a trust floor for the gates' judge (None: every gate blocks as set)
    # thresholds fitted to curators' grades (as online judging's `alignment`): a new judge version,
    # whose agreement the trust floor looks up
    alignment: Alignment | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("live", "replay"):
            raise ValueError(f"mode {self.mode!r}: expected 'live' or 'replay'")
        if not 0 <= self.max_error_rate <= 1:
            raise ValueError(f"max_error_rate {self.max_error_rate} is not within [0, 1]")
        unknown = {g.metric for g in self.gates if not g.metric.endswith(" [GEval]")} - set(self.thresholds)
        if unknown:
            raise ValueError(f"gates on unknown metrics {sorted(unknown)}; metrics: "
                             f"{sorted(self.thresholds)} and GEval criteria as '<name> [GEval]'")

    def thresholds_for(self, language: str | None) -> Mapping[str, float | None]:
        """The pass thresholds of a golden in `language`: the alignment's (its language's own,
        else the metric's) where it fitted one, else the configured ones; a monitoring metric
        (None) stays one, as the regression eval configures it."""
        if self.alignment is None:
            return self.thresholds
        return {metric: None if threshold is None else self.alignment.threshold(metric, language, threshold)
                for metric, threshold in self.thresholds.items()}


# GEval criteria a judge scores: name, criteria or evaluation_steps, rubric, threshold,
# evaluation_params (offline, only "Correctness" has a stand-in)
DEFAULT_GEVAL: tuple[Mapping[str, Any], ...] = (CORRECTNESS,)


@dataclass(frozen=True)
class LlmJudgeSettings:
    """Where the LLM judge is and what its calls cost: the one home of these defaults."""

    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: float = 60.0
    # 429, 5xx, timeouts and dropped connections are retried with the OpenAI client's rules
    # (exponential backoff, at most 8 s a wait, Retry-After honoured; the judge's own loop, so
    # that a wait frees its slot of the bound); a call still failing errors its metric
    max_retries: int = 4
    max_in_flight: int = 16  # judge calls at once, over every case and metric of a run
    input_cost_per_million: float = 0.0
    output_cost_per_million: float = 0.0
    # an attempt is given up and tried again after this many times the 95th percentile of the
    # run's answered attempts (at least `min_attempt_seconds`; the last attempt waits the full
    # timeout), so a stalled call does not hold a slot of the bound for the whole timeout;
    # None: every attempt waits the full timeout
    attempt_deadline_factor: float | None = 3.0
    min_attempt_seconds: float = 1.0


class EvalError(RuntimeError):
    """The run cannot be trusted (e.g. too many judge errors); its results are still stored."""


def load_app(import_path: str) -> Callable[..., Mapping[str, Any]]:
    """The function an import path `package.module:function` names: the system under test."""
    if not import_path:
        raise ValueError("no system under test: set the rag_app resource's import_path "
                         "(`package.module:function`), or RAG_LOOP_RAG_APP_URL for a service "
                         "over HTTP")
    module, _, name = import_path.partition(":")
    if not module or not name:
        raise ValueError(f"rag_app import path {import_path!r} is not 'package.module:function'")
    return getattr(importlib.import_module(module), name)
