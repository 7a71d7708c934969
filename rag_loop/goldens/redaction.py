"""Redaction of personal data and secrets before goldens leave the building (seed 004 §17).

Kinds, applied in this order, each match becoming `[REDACTED_<KIND>]` and counted:
- `secret`: well-known token formats (the rules secret scanners such as gitleaks ship:
  OpenAI/Stripe/GitHub/Slack/Google/AWS keys, JWTs, PEM private keys, `Authorization: Basic
  /Bearer`) and `password: …`-style assignments, English and Vietnamese;
- `email`: Unicode local parts and domains, IP-literal domains (`user@[192.168.1.1]`);
- `card`: 13–19 digits with spaces, dashes, dots or no-break spaces, a card prefix (2–6) and a
  valid Luhn check digit (an ISBN, an order number, an amount do not pass);
- `iban`: checked by python-stdnum (mod 97);
- `ip`: IPv4 and IPv6 addresses that `ipaddress` accepts;
- `phone`: Google's libphonenumber (the `phonenumbers` package) finds numbers valid in one of
  `phone_regions` or in international format, glued to words too (`SĐT0912345678`); dates,
  times, amounts and invoice numbers are not valid numbers.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import phonenumbers
from stdnum import iban, luhn

KINDS = ("secret", "email", "card", "iban", "ip", "phone")
DEFAULT_PHONE_REGIONS = ("VN", "US", "GB", "DE", "FR", "IN", "SG", "AU")
_SECRET = re.compile("|".join([
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
    r"\b(?:sk|pk|rk)[-_](?:live_|test_|proj-)?[A-Za-z0-9_-]{16,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}", r"\bgithub_pat_[A-Za-z0-9_]{22,}",
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}", r"\bAIza[0-9A-Za-z_-]{35}",
    r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}",
    r"\b(?:Basic|Bearer)\s+[A-Za-z0-9._~+/-]{8,}=*",
    r"(?i:aws_?secret_?access_?key)\s*[:=]\s*[\"']?[A-Za-z0-9/+=]{40}",
    r"(?i:\b(?:api[_-]?key|access[_-]?token|secret|password|passwd|pwd|token|mật\s+khẩu|mat\s+khau)"
    r"\s*[:=]\s*)[\"']?[^\s\"',;]{4,}",
]))
_EMAIL = re.compile(r"[\w.%+-]+@(\[[0-9A-Fa-f.:]+\]|(?:[\w-]+\.)+[^\W\d_]{2,})")
_CARD = re.compile(r"(?<![\d.,-])[2-6](?:[ .\-\u00a0]?\d){12,18}(?![\d])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_IP = re.compile(r"(?<![\w.:])(?:(?:\d{1,3}\.){3}\d{1,3}|(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{1,4})"
                 r"(?![\w.:])")
_LETTER_THEN_DIGIT = re.compile(r"(?<=[^\W\d_])(?=[+\d])")


class Redactor:
    """Replaces the configured kinds and counts what it replaced across calls."""

    def __init__(self, kinds: Sequence[str] = KINDS, keep_email_domains: Sequence[str] = (),
                 phone_regions: Sequence[str] = DEFAULT_PHONE_REGIONS):
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown redaction kinds {sorted(unknown)}; known: {list(KINDS)}")
        self.kinds = [k for k in KINDS if k in kinds]
        self.keep_email_domains = {d.lower() for d in keep_email_domains}
        self.phone_regions = tuple(phone_regions)
        self.counts: Counter[str] = Counter()
        self._finders: dict[str, Callable[[str], Iterator[tuple[int, int]]]] = {
            "secret": lambda t: _spans(_SECRET, t), "email": self._emails,
            "card": lambda t: _spans(_CARD, t, _is_card), "iban": lambda t: _spans(_IBAN, t, _is_iban),
            "ip": lambda t: _spans(_IP, t, _is_ip), "phone": self._phones}

    def redact(self, text: str | None) -> str | None:
        if not text:
            return text
        for kind in self.kinds:
            found = sorted(self._finders[kind](text), reverse=True)
            for start, end in found:  # from the end, so earlier offsets stay valid
                text = f"{text[:start]}[REDACTED_{kind.upper()}]{text[end:]}"
            self.counts[kind] += len(found)
        return text

    def summary(self) -> dict[str, int]:
        return {kind: self.counts.get(kind, 0) for kind in self.kinds}

    def _emails(self, text: str) -> Iterator[tuple[int, int]]:
        for match in _EMAIL.finditer(text):
            if match.group(1).lower() not in self.keep_email_domains:
                yield match.span()

    def _phones(self, text: str) -> Iterator[tuple[int, int]]:
        """Numbers libphonenumber finds valid; a word glued before a number is split off first
        (the split copy is only searched: offsets come from the original text)."""
        spaced = _LETTER_THEN_DIGIT.sub(" ", text)
        taken: list[tuple[int, int]] = []
        for region in self.phone_regions:
            for match in phonenumbers.PhoneNumberMatcher(spaced, region,
                                                         leniency=phonenumbers.Leniency.VALID):
                start = _find_after(text, match.raw_string, taken)
                if start is not None:
                    taken.append((start, start + len(match.raw_string)))
        yield from _without_overlaps(taken)


def _spans(pattern: re.Pattern, text: str,
           valid: Callable[[str], bool] = lambda _: True) -> Iterator[tuple[int, int]]:
    for match in pattern.finditer(text):
        if valid(match.group(0)):
            yield match.span()


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _is_card(text: str) -> bool:
    return 13 <= len(_digits(text)) <= 19 and luhn.is_valid(_digits(text))


def _is_iban(text: str) -> bool:
    return iban.is_valid(text)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _find_after(text: str, needle: str, taken: list[tuple[int, int]]) -> int | None:
    """Where `needle` stands in `text` outside the spans already taken."""
    start = text.find(needle)
    while start >= 0:
        if not any(s <= start < e for s, e in taken):
            return start
        start = text.find(needle, start + 1)
    return None


def _without_overlaps(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    kept: list[tuple[int, int]] = []
    for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
        if not kept or start >= kept[-1][1]:
            kept.append((start, end))
    return kept


# A planted set to measure recall on: what each kind must catch (release metadata reports it).
PLANTED = {
    "secret": ["sk-live0123456789abcdefXYZ", "sk_live_51HxQ2eLkdIwHu7ix", "github_pat_11ABCDEFG0123456789_abcdefghij",
               "AIzaSyA1234567890abcdefghijklmnopqrstuv", "AKIAABCDEFGHIJKLMNOP",
               "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijk",
               "Authorization: Basic dXNlcjpwYXNzd29yZA==", "password: hunter2", "mật khẩu: abc123",
               "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
               "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"],
    "email": ["jane.doe@gmail.com", "nguyễn.văn@côngty.vn", "user@[192.168.1.1]"],
    "card": ["4111 1111 1111 1111", "4111.1111.1111.1111", "5500\u00a00000\u00a00000\u00a00004"],
    "iban": ["DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432"],
    "ip": ["192.168.10.20", "2001:db8::8a2e:370:7334"],
    "phone": ["+84 912 345 678", "SĐT0912345678", "gọi0912345678", "0912\u00a0345\u00a0678",
              "+1 (415) 555-0132"],
}


def planted_recall(redactor: Redactor) -> dict[str, float]:
    """Share of the planted examples of each configured kind that the redactor removes."""
    recall = {}
    for kind in redactor.kinds:
        probe = Redactor([kind], phone_regions=redactor.phone_regions)
        caught = sum(f"[REDACTED_{kind.upper()}]" in (probe.redact(f"see {x} here") or "")
                     for x in PLANTED[kind])
        recall[kind] = caught / len(PLANTED[kind])
    return recall


def false_positives(redactor: Redactor, clean_texts: Sequence[str]) -> dict[str, int]:
    """What the redactor would remove from texts that hold no personal data (the knowledge
    base): each count is a likely false positive."""
    probe = Redactor(redactor.kinds, redactor.keep_email_domains, redactor.phone_regions)
    for text in clean_texts:
        probe.redact(text)
    return probe.summary()
