"""Judge versus humans (seed 004 §15): a judge is checked against people before it gates.

A calibration file holds human-labelled answers (JSONL or CSV): `question`, `contexts` (a
list, or one text), `answer` and the human label (`label_faithful`, `label` or
`human_label`: true/false, 1/0, yes/no, faithful/unfaithful). The judge's Faithfulness
score of each row is compared with the label: ROC-AUC, the confusion matrix at the metric's
threshold, precision and recall of "unfaithful", Cohen's kappa, and the threshold with the
best kappa. Rows without a label, answer or context are listed with their reason, never
dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
from deepeval.test_case import LLMTestCase

from rag_loop.evaluation.judges.base import Judge
from rag_loop.store.ddl import CALIBRATIONS_DDL

LABEL_KEYS = ("label_faithful", "label", "human_label")
_WORD = re.compile(r"\w+")
_TRUE = {"true", "1", "yes", "faithful", "supported", "attributable"}
_FALSE = {"false", "0", "no", "unfaithful", "unsupported", "not attributable"}


@dataclass
class CalibrationRow:
    line: int
    question: str
    contexts: list[str]
    answer: str
    faithful: bool


@dataclass
class Calibration:
    """Agreement of a judge's scores with human labels (faithful = score >= threshold)."""

    rows: int
    errors: list[dict[str, Any]]
    roc_auc: float | None
    threshold: float
    kappa: float
    best_threshold: float
    best_kappa: float
    true_faithful: int  # judge and human say faithful
    false_faithful: int  # judge says faithful, human says not
    true_unfaithful: int
    false_unfaithful: int
    precision_unfaithful: float | None
    recall_unfaithful: float | None
    cases_per_second: float = 0.0
    scores: list[float] = field(default_factory=list, repr=False)


def _label(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if value is not None else ""
    return True if text in _TRUE else False if text in _FALSE else None


def _contexts(value: Any) -> list[str]:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                return [text]
        else:
            return [text] if text else []
    if isinstance(value, list):
        return [c.strip() for c in value if isinstance(c, str) and c.strip()]
    return []


def read_rows(path: Path) -> tuple[list[CalibrationRow], list[dict[str, Any]]]:
    """The usable rows of a calibration file, and the others with their reason."""
    raw: list[tuple[int, Any]] = []
    if path.suffix == ".csv":
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        raw = list(enumerate(frame.to_dict("records"), start=2))
    else:
        for line_no, text in enumerate(path.read_bytes().split(b"\n"), start=1):
            if not text.strip():
                continue
            try:
                raw.append((line_no, json.loads(text.decode("utf-8"))))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
                raw.append((line_no, {"_error": f"unreadable line: {error}"[:200]}))
    rows, errors = [], []
    for line_no, record in raw:
        reason = _problem(record)
        if reason:
            errors.append({"line": line_no, "reason": reason})
            continue
        label = next(_label(record[k]) for k in LABEL_KEYS if k in record)
        rows.append(CalibrationRow(line_no, str(record.get("question") or ""),
                                   _contexts(record.get("contexts", record.get("context"))),
                                   record["answer"].strip(), label))
    return rows, errors


def _problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return "not an object"
    if "_error" in record:
        return record["_error"]
    labels = [k for k in LABEL_KEYS if k in record]
    if not labels or _label(record[labels[0]]) is None:
        return f"no human label ({' / '.join(LABEL_KEYS)}: true/false)"
    if not isinstance(record.get("answer"), str) or not record["answer"].strip():
        return "empty answer"
    if not _contexts(record.get("contexts", record.get("context"))):
        return "empty contexts"
    return None


def token_overlap(answer: str, contexts: Sequence[str]) -> float:
    """The baseline a judge must beat: the share of the answer's words (lower-cased `\\w+`)
    found anywhere in the contexts."""
    found = _WORD.findall(answer.lower())
    context = set(_WORD.findall(" ".join(contexts).lower()))
    return sum(w in context for w in found) / len(found) if found else 0.0


def score_rows(rows: Sequence[CalibrationRow], make_metric: Callable[[], Any],
               errors: list[dict[str, Any]]) -> tuple[list[CalibrationRow], list[float], float]:
    """The judge's score per row; a row the judge fails on joins `errors` with the failure."""
    kept, scores = [], []
    started = time.perf_counter()
    for row in rows:
        metric = make_metric()
        case = LLMTestCase(input=row.question or " ", actual_output=row.answer,
                           retrieval_context=row.contexts)
        try:
            metric.measure(case)
            score = float(metric.score)
        except Exception as error:  # noqa: BLE001 - a judge failure is this row's result
            errors.append({"line": row.line, "reason": f"judge failed: {error!r}"[:300]})
            continue
        kept.append(row)
        scores.append(score)
    seconds = time.perf_counter() - started
    return kept, scores, len(rows) / seconds if seconds else 0.0


def calibrate(scores: Sequence[float], faithful: Sequence[bool], threshold: float,
              errors: list[dict[str, Any]] | None = None) -> Calibration:
    """Agreement figures of judge scores against human labels."""
    # sklearn is imported where it is used: every regression eval imports this module (latest_calibration)
    from sklearn.metrics import cohen_kappa_score, confusion_matrix, roc_auc_score
    y, s = np.array(faithful, dtype=bool), np.array(scores, dtype=float)
    both = len(set(y.tolist())) == 2
    auc = float(roc_auc_score(y, s)) if both else None

    def kappa_at(cut: float) -> float:
        value = cohen_kappa_score(y, s >= cut) if len(y) else 0.0
        return 0.0 if np.isnan(value) else float(value)

    candidates = sorted(set(np.round(s, 4).tolist())) or [threshold]
    best = max(candidates, key=lambda cut: (kappa_at(cut), -abs(cut - threshold)))
    predicted = s >= threshold
    matrix = confusion_matrix(y, predicted, labels=[False, True]) if len(y) else np.zeros((2, 2), int)
    (true_unfaithful, false_faithful), (false_unfaithful, true_faithful) = matrix.tolist()
    said_unfaithful = true_unfaithful + false_unfaithful
    unfaithful = true_unfaithful + false_faithful
    return Calibration(
        rows=len(y), errors=list(errors or []), roc_auc=auc, threshold=threshold,
        kappa=kappa_at(threshold), best_threshold=float(best), best_kappa=kappa_at(best),
        true_faithful=true_faithful, false_faithful=false_faithful,
        true_unfaithful=true_unfaithful, false_unfaithful=false_unfaithful,
        precision_unfaithful=true_unfaithful / said_unfaithful if said_unfaithful else None,
        recall_unfaithful=true_unfaithful / unfaithful if unfaithful else None,
        scores=list(s.tolist()))


def store_calibration(con: duckdb.DuckDBPyConnection, result: Calibration, path: Path,
                      judge: dict[str, Any], metric: str = "Faithfulness") -> str:
    """Append the figures to `judge_calibrations`; returns the calibration id."""
    con.execute(CALIBRATIONS_DDL)
    calibration_id = f"cal-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    figures = {k: v for k, v in asdict(result).items() if k not in ("errors", "scores")}
    con.execute(
        "INSERT INTO judge_calibrations (calibration_id, created_at, file, file_sha256, judge, "
        "metric, rows, errors, roc_auc, threshold, kappa, best_threshold, best_kappa, "
        "true_faithful, false_faithful, true_unfaithful, false_unfaithful, precision_unfaithful, "
        "recall_unfaithful, cases_per_second) VALUES (?, now(), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
        "?, ?, ?, ?, ?, ?, ?)",
        [calibration_id, str(path), hashlib.sha256(path.read_bytes()).hexdigest(),
         json.dumps(judge), metric, figures["rows"], len(result.errors), figures["roc_auc"],
         figures["threshold"], figures["kappa"], figures["best_threshold"], figures["best_kappa"],
         figures["true_faithful"], figures["false_faithful"], figures["true_unfaithful"],
         figures["false_unfaithful"], figures["precision_unfaithful"],
         figures["recall_unfaithful"], figures["cases_per_second"]])
    return calibration_id


def latest_calibration(con: duckdb.DuckDBPyConnection, model: str) -> dict[str, Any] | None:
    """The newest calibration of a judge model (for the evaluator version of an eval run)."""
    if not con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'judge_calibrations'").fetchall():
        return None
    found = con.execute("""SELECT calibration_id, created_at::VARCHAR, file, rows, roc_auc, kappa,
                                  threshold, best_threshold FROM judge_calibrations
                           WHERE judge->>'model' = ? ORDER BY created_at DESC LIMIT 1""",
                        [model]).fetchall()
    keys = ("calibration_id", "created_at", "file", "rows", "roc_auc", "kappa", "threshold",
            "best_threshold")
    return dict(zip(keys, found[0])) if found else None


def summary_lines(result: Calibration) -> list[str]:
    """The figures as a curator reads them."""
    def number(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"
    return [
        f"rows judged: {result.rows}; rows set aside: {len(result.errors)}",
        f"ROC-AUC: {number(result.roc_auc)}",
        f"at threshold {result.threshold:g}: kappa {number(result.kappa)}",
        "                 human faithful  human unfaithful",
        f"judge faithful   {result.true_faithful:>14}  {result.false_faithful:>16}",
        f"judge unfaithful {result.false_unfaithful:>14}  {result.true_unfaithful:>16}",
        f"unfaithful: precision {number(result.precision_unfaithful)}, "
        f"recall {number(result.recall_unfaithful)}",
        f"best agreement: threshold {result.best_threshold:g} (kappa {number(result.best_kappa)})",
        f"judge speed: {result.cases_per_second:.1f} cases/s",
    ]


def run_calibration(con: duckdb.DuckDBPyConnection | None, path: Path, judge: Judge,
                    threshold: float) -> tuple[Calibration, str | None]:
    """Score the file's rows with the judge's Faithfulness metric, compare with the humans,
    and store the figures when a database is given."""
    rows, errors = read_rows(path)
    kept, scores, speed = score_rows(rows, lambda: judge.metrics({"Faithfulness": threshold})[0], errors)
    result = calibrate(scores, [r.faithful for r in kept], threshold, errors)
    result.cases_per_second = speed
    stored = None
    if con is not None:
        stored = store_calibration(con, result, path, judge.describe())
    return result, stored
