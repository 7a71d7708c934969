"""A figure against its limit: WARN or ERROR, never below the minimum sample or without a value."""

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


def assess(name: str, value: float | None, n: int, limit: Limit, **details: Any) -> Verdict:
    """Compare a figure with its limit, honouring the minimum sample."""
    value = None if value is None else float(value)
    if value is None or np.isnan(value):
        return Verdict(name, None, n, note="no value (no baseline or no data)", details=details)
    if n < limit.min_sample:
        return Verdict(name, value, n, note=f"n={n} below the minimum sample {limit.min_sample}",
                       details=details)
    beyond = (lambda x: value > x) if limit.higher_is_bad else (lambda x: value < x)
    for severity, bound in (("ERROR", limit.error), ("WARN", limit.warn)):
        if bound is not None and beyond(bound):
            side = ">" if limit.higher_is_bad else "<"
            return Verdict(name, value, n, True, severity, f"{value:.4g} {side} {bound:g}", details)
    return Verdict(name, value, n, note="within limits", details=details)
