"""Curators' graded examples as an LLM judge shows them (issue 45): what a `FewShot` holds and the
text it puts before a verdict prompt. Apart from `rag_loop.evaluation.few_shot` (which chooses
and measures them) so that the judges depend on this and not on the measurement."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EXAMPLE_CHARACTERS = 600  # each text of an example at most (the prompt grows with every example)
FEW_SHOT_HEADER = "Curators graded earlier verdicts of this judge"
# the prompts that decide a verdict, per metric (DeepEval's template methods)
VERDICT_PROMPTS = frozenset({"generate_verdicts"})


@dataclass(frozen=True)
class GradeExample:
    """One graded trace shown to the judge: what the metric looks at and the curator's verdict."""

    trace_id: str
    query: str
    answer: str
    context: tuple[str, ...]
    passed: bool


@dataclass(frozen=True)
class FewShot:
    """Published examples per metric; `few_shot_id` names them and the judge version they came from."""

    few_shot_id: str
    source_version: str
    examples: Mapping[str, tuple[GradeExample, ...]] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """What a judge version records of it (the examples' traces and verdicts)."""
        return {"few_shot_id": self.few_shot_id,
                "examples": {m: [[e.trace_id, e.passed] for e in ex] for m, ex in sorted(self.examples.items())}}

    def block(self, metric: str) -> str:
        """The text put before a verdict prompt of `metric` ("" without examples)."""
        examples = self.examples.get(metric, ())
        if not examples:
            return ""
        lines = [f"{FEW_SHOT_HEADER} ({metric}). Judge as they did:"]
        for number, example in enumerate(examples, 1):
            lines += [f"Example {number}:", f"  Question: {_cut(example.query)}", f"  Answer: {_cut(example.answer)}"]
            lines += [f"  Context: {_cut(' '.join(example.context))}"] if example.context else []
            lines.append(f"  Curators' verdict: {'pass' if example.passed else 'fail'}")
        return "\n".join(lines) + "\n\n"


def _cut(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= EXAMPLE_CHARACTERS else text[:EXAMPLE_CHARACTERS - 1] + "…"
