"""Redaction of personal data and secrets before goldens leave the building (seed 004 §17).

Kinds: `secret` (API keys and tokens: sk-…, AKIA…, ghp_…, xox…-, Bearer …, key=value
assignments), `email`, `card` (13-19 digits that pass the Luhn check) and `phone` (9-15
digits, optionally with +, spaces, dots, dashes, parentheses). Each match becomes
`[REDACTED_<KIND>]` and is counted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

KINDS = ("secret", "email", "card", "phone")
_PATTERNS = {
    "secret": re.compile(
        r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}|\bAKIA[0-9A-Z]{16}\b|\bgh[pousr]_[A-Za-z0-9]{30,}"
        r"|\bxox[abpr]-[A-Za-z0-9-]{10,}|\b[Bb]earer\s+[A-Za-z0-9._~+/-]{20,}=*"
        r"|\b(?:api[_-]?key|access[_-]?token|secret|password|token)\s*[:=]\s*[\"']?[^\s\"',;]{8,}",
        re.IGNORECASE),
    "email": re.compile(r"\b[A-Za-z0-9._%+-]+@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})\b"),
    "card": re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])"),
    "phone": re.compile(r"(?<![\w+])\+?\(?\d[\d ().-]{7,}\d(?![\w-])"),
}


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


class Redactor:
    """Replaces the configured kinds and counts what it replaced across calls."""

    def __init__(self, kinds: Sequence[str] = KINDS, keep_email_domains: Sequence[str] = ()):
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown redaction kinds {sorted(unknown)}; known: {list(KINDS)}")
        self.kinds = [k for k in KINDS if k in kinds]
        self.keep_email_domains = {d.lower() for d in keep_email_domains}
        self.counts: Counter[str] = Counter()

    def redact(self, text: str | None) -> str | None:
        if not text:
            return text
        for kind in self.kinds:
            text = _PATTERNS[kind].sub(lambda m, k=kind: self._replace(k, m), text)
        return text

    def _replace(self, kind: str, match: re.Match) -> str:
        found = match.group(0)
        digits = re.sub(r"\D", "", found)
        if kind == "email" and match.group(1).lower() in self.keep_email_domains:
            return found
        if kind == "card" and not luhn_valid(digits):
            return found
        if kind == "phone" and not 9 <= len(digits) <= 15:
            return found
        self.counts[kind] += 1
        return f"[REDACTED_{kind.upper()}]"

    def summary(self) -> dict[str, int]:
        return {kind: self.counts.get(kind, 0) for kind in self.kinds}
