"""Redaction: the survivors found by a hostile review are caught, the false positives that
corrupted goldens are left alone, and mixed text keeps its benign parts."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_loop.goldens.redaction import PLANTED, Redactor, false_positives, planted_recall

SURVIVORS = [  # (kind, text) that the earlier redactor let through
    ("email", "nguyễn.văn@côngty.vn"), ("email", "user@[192.168.1.1]"),
    ("phone", "SĐT0912345678"), ("phone", "gọi0912345678"), ("phone", "0912\u00a0345\u00a0678"),
    ("card", "4111.1111.1111.1111"), ("card", "4111\u00a01111\u00a01111\u00a01111"),
    ("secret", "sk_live_51HxQ2eLkdIwHu7ixAbC"), ("secret", "github_pat_11ABCDEFG0123456789_abcdefghij"),
    ("secret", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
    ("secret", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijk"),
    ("secret", "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("secret", "Authorization: Basic dXNlcjpwYXNzd29yZA=="),
    ("secret", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----"),
    ("secret", "password: hunter2"), ("secret", "mật khẩu: abc123"),
    ("iban", "DE89 3704 0044 0532 0130 00"), ("ip", "10.1.2.3"), ("ip", "2001:db8::1"),
    ("ip", "192.168.1.10."), ("ip", "10.0.0.1:8080"), ("ip", "2001:db8::1."),  # issue 23 §2
]
BENIGN = ["2026-11-01 10:00", "150.000.000 đồng", "1 000 000 000 VND", "ISBN 978-3-16-148410-0",
          "order #123456789", "invoice 2026-000123456", "Passwords are rotated every 180 days.",
          "the helpdesk is open from 8:00 to 18:00", "ERR-PAY-942", "version 1.2.3",
          "The fee is 1690 EUR. Built in 1648.", "16 900 000 VND", "ISBN 0-306-40615-2",  # issue 23 §2
          "from 1648-1690", "version 1.2.3.4.5", "v1.2.3.4"]


@pytest.mark.parametrize("kind, text", SURVIVORS)
def test_survivors_are_redacted(kind, text):
    redacted = Redactor().redact(f"Contact: {text} (from the ticket)")
    assert f"[REDACTED_{kind.upper()}]" in redacted
    assert text.split()[-1] not in redacted or kind == "secret" and ":" in text


@pytest.mark.parametrize("text", BENIGN)
def test_false_positives_are_left_alone(text):
    assert Redactor().redact(text) == text


def test_recall_and_false_positives_are_measurable():
    redactor = Redactor()
    assert planted_recall(redactor) == dict.fromkeys(redactor.kinds, 1.0)
    assert false_positives(redactor, BENIGN) == dict.fromkeys(redactor.kinds, 0)
    assert redactor.summary() == dict.fromkeys(redactor.kinds, 0)  # measuring redacts nothing


planted = st.sampled_from([(k, x) for k, xs in PLANTED.items() for x in xs])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(planted, st.sampled_from(BENIGN), st.text(
    alphabet=st.characters(whitelist_categories=("Ll", "Lu", "Zs")), max_size=8)), max_size=8))
def test_mixed_text_loses_the_pii_and_keeps_the_rest(parts):
    text = " ; ".join(p[1] if isinstance(p, tuple) else p for p in parts)
    redacted = Redactor().redact(text)
    for part in parts:
        if isinstance(part, tuple):
            kind, secret = part
            core = secret.split(":")[-1].strip() if kind == "secret" and ":" in secret else secret
            assert core not in redacted
        elif part in BENIGN:
            assert part in redacted
