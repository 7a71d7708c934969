import os
from pathlib import Path

import duckdb
import pytest

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROJECT = Path(__file__).resolve().parent.parent
DEMO = PROJECT / "data" / "demo"


@pytest.fixture
def con(tmp_path_factory):
    connection = duckdb.connect(str(tmp_path_factory.mktemp("db") / "test.duckdb"))
    yield connection
    connection.close()


def trace_line(trace_id: str, **fields) -> str:
    """A minimal valid native trace as one JSON line."""
    import json
    record = {"trace_id": trace_id, "original_query": "How many leave days?",
              "timestamp": "2026-11-01T08:00:00Z", **fields}
    return json.dumps(record)
