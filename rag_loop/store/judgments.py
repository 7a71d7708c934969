"""Reads of `trace_judgments` that later stages share: which judge version is current, and each
trace's latest scores (curation shows them, suggestions and priorities use them)."""

from __future__ import annotations

import duckdb
import pandas as pd

from rag_loop.store.ddl import ONLINE_DDL
from rag_loop.store.tables import has_table

JUDGE_COLUMNS = ("faithfulness_score", "faithfulness_passed", "answer_relevancy_score",
                 "answer_relevancy_passed", "contextual_relevancy_score", "contextual_relevancy_passed")


def current_judge_version(con: duckdb.DuckDBPyConnection, wanted: str | None = None) -> str | None:
    """The configured judge version, else the one of the newest judging run that judged."""
    if wanted:
        return wanted
    if not has_table(con, "judgment_runs"):
        return None
    row = con.execute("SELECT judge_version FROM judgment_runs WHERE planned > 0 "
                      "ORDER BY finished_at DESC LIMIT 1").fetchall()
    return row[0][0] if row else None


def judge_scores(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per judged trace of the current judge version: one score and verdict column per
    referenceless metric (JUDGE_COLUMNS) and `judge_scores`, every judged metric's score,
    verdict, reason and judge version (what a curator grades). Empty (with those columns) when
    nothing was judged."""
    version = current_judge_version(con)
    con.execute(ONLINE_DDL)
    pivot = ", ".join(
        f"any_value(score) FILTER (metric = '{metric}') AS {key}_score, "
        f"any_value(passed) FILTER (metric = '{metric}') AS {key}_passed"
        for metric, key in (("Faithfulness", "faithfulness"), ("Answer Relevancy", "answer_relevancy"),
                            ("Contextual Relevancy", "contextual_relevancy")))
    frame = con.execute(f"""
        SELECT trace_id, {pivot},
               map_from_entries(list({{'k': metric, 'v': {{'score': round(score, 4), 'passed': passed,
                                                         'reason': reason, 'judge_version': judge_version}}}}
                                   ORDER BY metric))
                   AS judge_scores
        FROM trace_judgments WHERE judge_version = ? AND status = 'judged' GROUP BY trace_id""",
                        [version]).df()
    frame["judge_scores"] = frame["judge_scores"].map(
        lambda m: {k: dict(v) for k, v in (m.items() if isinstance(m, dict) else zip(m["key"], m["value"]))})
    return frame
