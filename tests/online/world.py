"""A small world for the online-evaluation tests: native traces ingested for real, signals and
the selection computed, and scripted judges whose every verdict is known."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
from deepeval.metrics import BaseMetric

from rag_loop.evaluation.judges.base import Judge, JudgeUsage
from rag_loop.ingest import ingest_directory
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.tables import create_tables
from tests.helpers import trace_line

CHUNK = {"doc_id": "leave", "chunk_id": "leave@2026#annual-en", "doc_version": "2026", "rank": 1,
         "score": 0.9, "selected": True}
TEXT = "Full-time employees get 15 days of paid annual leave per year."


def build_world(tmp_path: Path, traces: Sequence[Mapping[str, Any]], knowledge: bool = True,
                policy: SamplingPolicy | None = None) -> duckdb.DuckDBPyConnection:
    """Ingest `traces` (fields of native trace lines), compute signals and select (everything by
    default: random rate 1)."""
    folder = tmp_path / "traces"
    folder.mkdir(exist_ok=True)
    (folder / "t.jsonl").write_text("\n".join(trace_line(**t) for t in traces) + "\n")
    con = duckdb.connect(str(tmp_path / "world.duckdb"))
    create_tables(con)
    ingest_directory(con, folder)
    if knowledge:
        con.execute("INSERT INTO document_chunks VALUES (?, 'leave', '2026', ?)", [CHUNK["chunk_id"], TEXT])
    compute_signals(con, SignalSettings())
    select_candidates(con, policy or SamplingPolicy(random_rate=1.0, daily_budget_usd=None))
    return con


class ScriptedMetric(BaseMetric):
    """A metric whose score (or failure) `verdict(case)` decides."""

    def __init__(self, name: str, threshold: float | None, verdict: Callable[[Any], float]):
        self.name, self.threshold, self.verdict = name, threshold, verdict
        self.async_mode, self.strict_mode, self.verbose_mode, self.include_reason = True, False, False, True
        self.error = None

    def measure(self, test_case, *args, **kwargs) -> float:
        self.score = self.verdict(test_case)
        self.reason = f"scripted {self.score}"
        self.success = self.threshold is None or self.score >= self.threshold
        return self.score

    async def a_measure(self, test_case, *args, **kwargs) -> float:
        return self.measure(test_case)

    def is_successful(self) -> bool:
        return bool(self.success)

    @property
    def __name__(self) -> str:
        return self.name


class ScriptedJudge(Judge):
    """Every metric scored by `verdict(metric name, case)`; `version` goes into describe()."""

    def __init__(self, verdict: Callable[[str, Any], float], version: str = "1"):
        self.verdict, self.version, self.usage, self.calls = verdict, version, JudgeUsage(), []

    def metrics(self, thresholds, geval=None):
        def scored(name):
            def verdict(case):
                self.calls.append((name, case.input))
                return self.verdict(name, case)
            return verdict
        return [ScriptedMetric(name, threshold, scored(name)) for name, threshold in thresholds.items()]

    def describe(self) -> dict[str, Any]:
        return {"kind": "scripted", "model": "scripted", "version": self.version}
