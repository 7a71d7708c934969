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
