"""Queue exports for curators (`<batch>.jsonl` and `.csv`) and reading them, or a label file
shaped like them, back."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa

from rag_loop.store.files import write_atomically, write_parquet_atomically

CURATOR_FIELDS = {"expected_output": "", "expected_sources": [], "tags": [], "origin": "",
                  "failure_type": "", "decision": "",
                  # grades of the judge's verdicts: [{"metric", "judge_version", "judge_passed",
                  # "grade": "agree"|"disagree", "curator_passed": true|false}] (label_rules.JudgeGrade)
                  "judge_grades": []}
# a spreadsheet runs a cell that starts with one of these as a formula (OWASP CSV injection):
# the CSV export prefixes such text with an apostrophe, and reading the CSV back removes it
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _inert(value: object) -> object:
    """Text a spreadsheet shows as text: `'=HYPERLINK(...)` instead of a live formula."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def _from_cell(value: str) -> str:
    return value[1:] if value.startswith("'") and value[1:].startswith(FORMULA_STARTS) else value


def batch_name(queue: pd.DataFrame, last_day: str) -> str:
    """`<last traffic day>-<hash of the queued trace ids>`: a rerun on the same data reuses it."""
    digest = hashlib.sha256("\n".join(queue["trace_id"]).encode()).hexdigest()[:8]
    return f"{last_day.replace('-', '')}-{digest}"


def export_for_workspace(rows: list[dict], details: dict[str, dict], directory: Path, batch: str) -> Path:
    """`<batch>.parquet`: the queue rows and, per trace, what the curator workspace shows beyond
    them (every retrieved chunk with scores, the rewritten query, the status); nested values
    as JSON text. The workspace reads this file, never the database a run may be writing."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    table = {key: [_json_cell(row.get(key)) for row in rows] for key in columns}
    table["details"] = [json.dumps(details.get(row["trace_id"], {}), ensure_ascii=False, default=str)
                        for row in rows]
    path = directory / f"{batch}.parquet"
    write_parquet_atomically(pa.table(table), path)
    return path


def _json_cell(value: object) -> object:
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return None if value is None else str(value) if not isinstance(value, int | float | bool) else value


def export_queue(rows: list[dict], directory: Path, batch: str) -> tuple[Path, Path]:
    """Write `<batch>.jsonl` and `<batch>.csv` atomically (temp file, then rename). In the CSV,
    lists are JSON text and text that a spreadsheet would run as a formula starts with an
    apostrophe; every cell with a delimiter, quote or line break (a lone CR too) is quoted; the
    file starts with a UTF-8 byte order mark, so that Excel shows Vietnamese as written."""
    directory.mkdir(parents=True, exist_ok=True)
    jsonl = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)  # CRLF rows: a CR in a cell gets quoted too
    writer.writeheader()
    writer.writerows({key: _inert(_cell(row.get(key))) for key in columns} for row in rows)
    paths = directory / f"{batch}.jsonl", directory / f"{batch}.csv"
    write_atomically(paths[0], jsonl)
    write_atomically(paths[1], "\ufeff" + buffer.getvalue())  # a BOM: Excel then reads UTF-8
    return paths


def _cell(value: object) -> object:
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return "" if value is None else value


def read_queue(path: Path) -> list[dict]:
    """Rows of an exported queue file, JSONL or CSV (list fields decoded, formula guards removed).
    A CSV row with more or fewer cells than the header is a ValueError naming its line."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle, restkey=_EXTRA)
        rows = list(reader)
    for number, row in enumerate(rows, start=2):
        if _EXTRA in row or None in row.values():
            raise ValueError(f"line {number}: {len(row) - 1 + len(row.get(_EXTRA, []))} cells where "
                             f"the header has {len(reader.fieldnames or [])}")
        for key, value in row.items():
            row[key] = value = _from_cell(value)
            if value.startswith(("[", "{")):
                try:
                    row[key] = json.loads(value)
                except (json.JSONDecodeError, RecursionError):
                    pass  # text that merely starts with a bracket: "[doc#chunk] 15 days"
    return rows


_EXTRA = "\x00extra cells"
