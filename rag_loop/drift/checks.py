"""A figure against its limit: WARN or ERROR, never below the minimum sample or without a value
(then the verdict says it was not evaluated, which is not a pass)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Limit:
    """When a figure fires: above (or below) `warn` → WARN, beyond `error` → ERROR."""

    warn: float | None = None
    error: float | None = None
    higher_is_bad: bool = True
    min_sample: int = 30


@dataclass
class Verdict:
    name: str
    value: float | None
    n: int
    fired: bool = False
    severity: str | None = None  # "WARN" | "ERROR"
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    evaluated: bool = True  # False: no value, no baseline or too small a sample to judge


def assess(name: str, value: float | None, n: int, limit: Limit, **details: Any) -> Verdict:
    """Compare a figure with its limit, honouring the minimum sample."""
    value = None if value is None else float(value)
    if value is None or np.isnan(value):
        return Verdict(name, None, n, note="no value (no baseline or no data)", details=details, evaluated=False)
    if n < limit.min_sample:
        return Verdict(name, value, n, note=f"n={n} below the minimum sample {limit.min_sample}",
                       details=details, evaluated=False)
    beyond = (lambda x: value > x) if limit.higher_is_bad else (lambda x: value < x)
    for severity, bound in (("ERROR", limit.error), ("WARN", limit.warn)):
        if bound is not None and beyond(bound):
            side = ">" if limit.higher_is_bad else "<"
            return Verdict(name, value, n, True, severity, f"{value:.4g} {side} {bound:g}", details)
    return Verdict(name, value, n, note="within limits", details=details)


@dataclass(frozen=True)
class Outcome:
    """One check over the days of a run: passed or not, at which severity, and why."""

    passed: bool
    severity: str  # "WARN" | "ERROR"
    note: str


def over_days(verdicts: list[Verdict]) -> Outcome:
    """A check over several days' verdicts: it fails at the worst severity fired; when no day
    could be evaluated (no value, no baseline, too small a sample) it fails at WARN and says
    so, since missing data is not a pass; otherwise it passes."""
    fired = [v for v in verdicts if v.fired]
    if fired:
        worst = "ERROR" if any(v.severity == "ERROR" for v in fired) else "WARN"
        return Outcome(False, worst, f"fired on {len(fired)} of {len(verdicts)} days")
    evaluated = sum(v.evaluated for v in verdicts)
    if not evaluated:
        notes = sorted({v.note for v in verdicts})
        return Outcome(False, "WARN", "not evaluated: " + ("; ".join(notes) if notes else "no day in the run"))
    return Outcome(True, "WARN", f"within limits on {evaluated} of {len(verdicts)} days "
                                 f"({len(verdicts) - evaluated} not evaluated)")
