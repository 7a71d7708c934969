"""Text forms shared by the stages: what is hashed, embedded and compared."""

from __future__ import annotations

import unicodedata


def normalize_text(text: str) -> str:
    """Unicode NFC with whitespace collapsed: the form that is embedded and hashed."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def fold_accents(text: str) -> str:
    """Text without diacritics (Vietnamese đ becomes d), as people often type in chat."""
    decomposed = unicodedata.normalize("NFD", text.replace("đ", "d").replace("Đ", "D"))
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if unicodedata.category(c) != "Mn"))


def same_text_key(text: str) -> str:
    """A query as the curation queue tells texts apart: `normalize_text`, case folded. Queries
    with one key are one queue row."""
    return normalize_text(text).casefold()
