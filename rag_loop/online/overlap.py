"""Changing the judge (seed 004 §15): a new judge version judges the selected traces again, so
the old and the new version overlap on the same traces; the scale shift is measured there
before the new numbers are trusted. A judge change on the day the application changed makes a
quality shift impossible to attribute, so that is flagged too."""

from __future__ import annotations

import duckdb
import pandas as pd

from rag_loop.store.ddl import ONLINE_DDL, utc_day


def judge_shift(con: duckdb.DuckDBPyConnection, version: str) -> pd.DataFrame:
    """Per earlier judge version and metric, on the traces both judged: n, mean scores, the
    mean difference (new − old), pass agreement and Cohen's kappa of the verdicts."""
    con.execute(ONLINE_DDL)
    pairs = con.execute("""
        SELECT old.judge_version AS old_version, new.metric, old.score AS old_score,
               new.score AS new_score, old.passed AS old_passed, new.passed AS new_passed
        FROM trace_judgments new JOIN trace_judgments old USING (trace_id, metric)
        WHERE new.judge_version = ? AND old.judge_version <> ?
          AND new.status = 'judged' AND old.status = 'judged'""", [version, version]).df()
    rows = []
    for (old, metric), group in pairs.groupby(["old_version", "metric"], sort=True):
        # sklearn (~0.9 CPU-s to import) only when two versions overlap: a first judge has no pairs
        from sklearn.metrics import cohen_kappa_score
        verdicts = group.dropna(subset=["old_passed", "new_passed"])
        old_pass, new_pass = verdicts["old_passed"].astype(bool), verdicts["new_passed"].astype(bool)
        both = len(set(old_pass) | set(new_pass)) > 1
        rows.append({"old_version": old, "metric": metric, "n": len(group),
                     "old_mean": group["old_score"].mean(), "new_mean": group["new_score"].mean(),
                     "mean_difference": (group["new_score"] - group["old_score"]).mean(),
                     "agreement": (old_pass == new_pass).mean() if len(verdicts) else None,
                     "kappa": cohen_kappa_score(old_pass, new_pass) if both else None})
    return pd.DataFrame(rows, columns=["old_version", "metric", "n", "old_mean", "new_mean",
                                       "mean_difference", "agreement", "kappa"])


def changed_with_the_app(con: duckdb.DuckDBPyConnection, version: str) -> list[dict]:
    """The application versions (rag_version, prompt_version) first seen in traffic on the day
    this judge version first judged: each such change confounds the judge change."""
    con.execute(ONLINE_DDL)
    first = con.execute(f"SELECT {utc_day('min(judged_at)')} FROM trace_judgments "
                        "WHERE judge_version = ?", [version]).fetchall()[0][0]
    earlier = con.execute("SELECT count(DISTINCT judge_version) FROM trace_judgments "
                          "WHERE judge_version <> ?", [version]).fetchall()[0][0]
    if first is None or not earlier:  # the first judge changes nothing
        return []
    return con.execute(f"""
        SELECT kind, version, CAST(first_seen AS VARCHAR) AS first_seen FROM (
            SELECT 'rag_version' AS kind, rag_version AS version, min("timestamp") AS first_seen
            FROM raw_traces WHERE rag_version IS NOT NULL GROUP BY 2
            UNION ALL
            SELECT 'prompt_version', prompt_version, min("timestamp") FROM raw_traces
            WHERE prompt_version IS NOT NULL GROUP BY 2)
        WHERE {utc_day('first_seen')} = ?""", [first]).df().to_dict("records")
