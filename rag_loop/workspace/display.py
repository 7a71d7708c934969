"""How the workspace shows what a trace does not say: "not recorded" where a value is missing
(never Python's None, a NaN, or the language code `und`), and what a review priority means."""

from __future__ import annotations

from rag_loop.workspace.security import SHOWN_CHARS, shown

# what a queue row's priority means (rag_loop.schema.Priority, decided by the selection stage and
# rag_loop.intents.members.curation_priority): said beside it, the four in its title
PRIORITY_HELP = {
    "P0": "high risk (a failure signal on a security, legal or other high-risk query)",
    "P1": "negative feedback plus another bad signal (or an unfaithful answer)",
    "P2": "a novel query cluster",
    "P3": "the rest (the random quality sample, other signals)",
}
PRIORITY_LEGEND = "Review priority, P0 first: " + "; ".join(f"{k} {v}" for k, v in PRIORITY_HELP.items())
NOT_RECORDED = "not recorded"
UNDETERMINED_LANGUAGE = "und"  # rag_loop.ingest.language: no language recorded, none identified


def recorded(value: object, limit: int = SHOWN_CHARS, what: str = "") -> str:
    """A trace's value as displayed (`shown`), or "not recorded" (after `what`) where the trace
    has none: never Python's None or a NaN."""
    if value is None or (isinstance(value, float) and value != value) or (isinstance(value, str) and not value.strip()):
        return f"{what} {NOT_RECORDED}".strip()
    return shown(value, limit)


def language_code(value: object) -> str:
    """A language code worth showing or tagging: "" for none and for `und` (undetermined)."""
    return "" if not isinstance(value, str) or value.strip() in ("", UNDETERMINED_LANGUAGE) else value.strip()
