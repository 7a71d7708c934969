"""Queue exports for curators (`<batch>.jsonl` and `.csv`) and reading them, or a label file
shaped like them, back."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from rag_loop.store.files import write_atomically

CURATOR_FIELDS = {"expected_output": "", "expected_sources": [], "tags": [], "origin": "",
                  "failure_type": "", "decision": ""}


def batch_name(queue: pd.DataFrame, last_day: str) -> str:
    """`<last traffic day>-<hash of the queued trace ids>`: a rerun on the same data reuses it."""
    digest = hashlib.sha256("\n".join(queue["trace_id"]).encode()).hexdigest()[:8]
    return f"{last_day.replace('-', '')}-{digest}"


def export_queue(rows: list[dict], directory: Path, batch: str) -> tuple[Path, Path]:
    """Write `<batch>.jsonl` and `<batch>.csv` atomically (temp file, then rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    jsonl = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    frame = pd.DataFrame(rows)
    for column in frame.columns:
        if frame[column].map(lambda v: isinstance(v, (list, dict))).any():
            frame[column] = frame[column].map(lambda v: json.dumps(v, ensure_ascii=False, default=str))
    paths = directory / f"{batch}.jsonl", directory / f"{batch}.csv"
    write_atomically(paths[0], jsonl)
    write_atomically(paths[1], frame.to_csv(index=False))
    return paths


def read_queue(path: Path) -> list[dict]:
    """Rows of an exported queue file, JSONL or CSV (list fields decoded)."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    rows = frame.to_dict("records")
    for row in rows:
        for key, value in row.items():
            if value.startswith(("[", "{")):
                try:
                    row[key] = json.loads(value)
                except (json.JSONDecodeError, RecursionError):
                    pass  # text that merely starts with a bracket: "[doc#chunk] 15 days"
    return rows
