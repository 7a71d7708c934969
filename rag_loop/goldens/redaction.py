"""Redaction of personal data and secrets before goldens leave the building (seed 004 §17).

Kinds, applied in this order, each match becoming `[REDACTED_<KIND>]` and counted:
- `secret`: well-known token formats (the rules secret scanners such as gitleaks ship:
  OpenAI/Stripe/GitHub/Slack/Google/AWS keys, JWTs, PEM private keys, `Authorization: Basic
  /Bearer`) and `password: …`-style assignments, English and Vietnamese;
- `email`: Unicode local parts and domains, IP-literal domains (`user@[192.168.1.1]`);
- `card`: 13–19 digits with spaces, dashes, dots or no-break spaces, a card prefix (2–6) and a
  valid Luhn check digit (an ISBN, an order number, an amount do not pass);
- `iban`: checked by python-stdnum (mod 97);
- `ip`: IPv4 and IPv6 addresses that `ipaddress` accepts, standing alone: not glued to a word
  (`v1.2.3.4`) and not part of a longer dotted number (`1.2.3.4.5`, `3.1.2.3.4`: a `.` or `:`
  then a digit continues the number). A sentence-final `.` (with or without a space after it),
  a `,` or a `:` after the address does not protect it; from `10.0.0.1:8080` the address is
  redacted and the port kept (`[REDACTED_IP]:8080`). An IPv4 may follow a `:` that follows a
  letter (`IP:10.0.0.1`, `::ffff:10.0.0.1`), not one that follows a digit (a time).
- `phone`: a number is a phone only with phone formatting or phone context. Candidates are what
  Google's libphonenumber (the `phonenumbers` package, `Leniency.VALID`) finds valid in one of
  `phone_regions` or in international format, with a word glued before a number split off
  first (`SĐT0912345678`). A candidate is redacted when
  (a) it is written in international format (starts with `+`: `+84 912 345 678`), or
  (b) a phone keyword ends at most 3 characters (spaces, `:`, `.`, `=`, `#`, `(`, `-`) before
      it, optionally followed by `number`/`no.`/`nr.`/`#`/`số` (`_PHONE_CONTEXT`: phone, tel,
      call, contact, mobile, cell, hotline, fax, zalo, SĐT, ĐT, điện thoại, gọi, số máy, di
      động, liên hệ, ...; `Tel: 1690`, `gọi0912345678`), or
  (c) it is a single run of at least 10 digits (`0912345678`), or
  (d) it has at least 8 digits in phone-style groups: a space, no-break space, dash, slash or
      parentheses between digit groups, or at least two dots (`0912 345 678`, `9123 4567`,
      `(415) 555-0132`, `0912.345.678`; one dot is a decimal point);
  and, unless (a) or (b), it is none of: thousands-grouped (`16 900 000`, `1.690.000`: groups of
  3 after a first group of 1–3 digits not starting with 0), a year range (`1648-1690`), a year
  and then another number (`in 2024 16900`), a text holding a date (`15 16.03.2024`), a
  sentence or list break (`1648. 1690`), the continuation of a time or a decimal (`20:15 16…`,
  `…1234.5`), ISBN-hyphenated with a valid check digit (`0-306-40615-2`), or preceded by an
  identifier keyword (ISBN, ISSN, order, invoice, receipt, ref, `#`, đơn hàng, hóa đơn).
  So a plain number of up to 9 digits (an amount, a year, an order number: `1690 EUR`,
  `in 1648`, `order #123456789`, also a bare 8–9 digit phone such as `81234567`) is never a
  phone without a keyword or a `+`.
"""

from __future__ import annotations

import ipaddress
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import phonenumbers
from stdnum import iban, isbn, luhn

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
_IP = re.compile(r"""
    (?<![\w.])(?<!\d:)(?:\d{1,3}\.){3}\d{1,3}   # IPv4: not the tail of a dotted number or a time
    (?= $ | [^\w.:] | \.(?!\d) | :\d{1,5}(?!\w|[.:]\d) | :(?![\w:]) )  # end, '.', ':port', ':'
  | (?<![\w.:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{1,4}      # IPv6
    (?= $ | [^\w.:] | \.(?!\d) | :(?![\w.:]) )""", re.VERBOSE)
_LETTER_THEN_DIGIT = re.compile(r"(?<=[^\W\d_])(?=[+\d])")
_CONTEXT_CHARS = 40  # the longest keyword with its suffix and separators is shorter
_KEYWORD_TAIL = r"(?:\s{0,2}(?:number|no\.?|nr\.?|n°|#|số))?[\s:.=#(\-–]{0,3}$"
_PHONE_CONTEXT = re.compile(
    r"(?i:(?<!\w)(?:tele?phone|phone|telefon|téléphone|tel|tél|mobile?|mob|cell(?:phone)?|handy"
    r"|portable|hotline|fax|call|contact|whatsapp|zalo|viber|sđt|sdt|đtdđ|đt|điện\s{1,2}thoại"
    r"|dien\s{1,2}thoai|gọi|số\s{1,2}máy|di\s{1,2}động|di\s{1,2}dong|liên\s{1,2}hệ|lien\s{1,2}he))"
    + _KEYWORD_TAIL)
_ID_CONTEXT = re.compile(
    r"(?i:(?:(?<!\w)(?:isbn(?:-1[03])?|issn|order|invoice|receipt|ref|đơn\s{1,2}hàng|hóa\s{1,2}đơn"
    r"|hoá\s{1,2}đơn|mã\s{1,2}đơn)|#))" + _KEYWORD_TAIL)
_PHONE_GROUPS = re.compile(r"\d[\s\-/–]+\d|\(\d+\)|\d\.\d+\.\d")
_NOT_PHONE = re.compile("|".join([
    r"^[1-9]\d{0,2}(?P<sep>[\s.,])\d{3}(?:(?P=sep)\d{3})*$",      # thousands grouping: an amount
    r"^[12]\d{3}\s*[-–/]\s*[12]\d{3}$",                           # a year range
    r"^(?:1[6-9]|20)\d\d\s",                                       # a year, then another number
    r"(?<!\d)(?:0?[1-9]|[12]\d|3[01])(?P<dsep>[./-])(?:0?[1-9]|1[0-2])(?P=dsep)"
    r"(?:1[6-9]|20)\d\d(?!\d)",                                    # a date d.m.yyyy
    r"(?<!\d)(?:1[6-9]|20)\d\d(?P<isep>[./-])(?:0?[1-9]|1[0-2])(?P=isep)"
    r"(?:0?[1-9]|[12]\d|3[01])(?!\d)",                             # a date yyyy-m-d
    r"[.,]\s",                                                   # a sentence or list break
]))
_ISBN_SHAPE = re.compile(r"^(?:97[89]-)?\d{1,5}-\d{1,7}-\d{1,7}-[\dX]$")


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
        """libphonenumber's valid numbers that have phone formatting or phone context (module
        docstring). A word glued before a number is split off first; the split copy is only
        searched, offsets are mapped back to the original text."""
        spaced, inserted = _split_glued(text)
        taken: list[tuple[int, int]] = []
        for region in self.phone_regions:
            for match in phonenumbers.PhoneNumberMatcher(spaced, region,
                                                         leniency=phonenumbers.Leniency.VALID):
                start = match.start - bisect_left(inserted, match.start)
                end = match.end - bisect_left(inserted, match.end)
                if _is_phone(text, start, end):
                    taken.append((start, end))
        yield from _without_overlaps(taken)


def _split_glued(text: str) -> tuple[str, list[int]]:
    """`text` with a space between a letter and a digit or `+` glued to it, and the offsets
    (in the spaced copy) of the spaces inserted."""
    inserted = [m.start() + k for k, m in enumerate(_LETTER_THEN_DIGIT.finditer(text))]
    return _LETTER_THEN_DIGIT.sub(" ", text), inserted


def _is_phone(text: str, start: int, end: int) -> bool:
    """Whether the valid number at text[start:end] has phone formatting or phone context."""
    number, before = text[start:end], text[max(0, start - _CONTEXT_CHARS):start]
    if number.startswith("+") or _PHONE_CONTEXT.search(before):
        return True
    if (_ID_CONTEXT.search(before) or _NOT_PHONE.search(number)
            or re.search(r"\d[.:]$", before) or re.match(r"\.\d", text[end:end + 2])
            or _ISBN_SHAPE.match(number) and isbn.is_valid(number)):
        return False
    digits = len(_digits(number))
    return (digits >= 10 and number.isdigit()) or (digits >= 8 and bool(_PHONE_GROUPS.search(number)))


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
    "ip": ["192.168.10.20", "2001:db8::8a2e:370:7334", "192.168.1.10.", "10.0.0.1:8080"],
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
