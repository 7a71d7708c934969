"""A small golden release for judge and eval tests."""

import hashlib
import json

import duckdb
import pytest


@pytest.fixture
def small_release(tmp_path):
    """A two-golden release and an empty database, for judge tests."""
    goldens = [{"name": f"g{i}", "input": q, "expected_output": a, "context": None,
                "retrieval_context": None,
                "additional_metadata": {"language": "en", "query_type": "policy", "origin": "manual",
                                        "failure_type": "none", "tags": ["t"], "trace_id": f"t{i}"}}
               for i, (q, a) in enumerate([
                   ("How many days of annual leave do I get?",
                    "Full-time employees get 15 days of paid annual leave per year."),
                   ("How often must I change my password?", "Passwords are rotated every 90 days.")])]
    release = tmp_path / "goldens" / "v0001"
    release.mkdir(parents=True)
    payload = json.dumps(goldens)
    (release / "goldens.json").write_text(payload)
    (release / "manifest.json").write_text(json.dumps({"sha256": hashlib.sha256(payload.encode()).hexdigest()}))
    return tmp_path / "goldens", duckdb.connect(str(tmp_path / "eval.duckdb"))


# A 1 × 1 PNG: what a chart is in the reports of tests that read the verdict, not the charts
_BLANK_PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
                           "0000000b49444154789c6360000200000500017a5eab3f0000000049454e44ae426082")


def unrendered_png(figure) -> bytes:
    """plots._png without matplotlib's tight_layout and savefig: the figure closed, a 1 × 1 PNG."""
    from rag_loop.reporting import plots
    plots._pyplot().close(figure)
    return _BLANK_PNG


@pytest.fixture
def charts_unrendered(monkeypatch):
    """Charts are built but not laid out and rasterized (half of a small eval's CPU): for tests
    of what a run decides and says, not of its report's images (the demo candidate's eval in
    test_regression.py and tests/goldens/test_release.py render theirs)."""
    from rag_loop.reporting import plots
    monkeypatch.setattr(plots, "_png", unrendered_png)
