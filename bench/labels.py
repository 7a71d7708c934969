"""Storing curator labels against a bare DuckDB `INSERT ... SELECT` of the same rows, in the same run.

    python bench/labels.py [--rows 100000]

In a temporary DuckDB file: N traces in `raw_traces`, two documents (two versions of one) and
their chunks; one JSONL label file of N valid rows shaped like the curation queue (accepts,
rejects and skips; some sources an older version, which only warns) plus a few invalid rows.
Times `store_label_files` (validation, then storage; goal >= 10,000 rows/s), then, for
information, validation alone (`check_label` per row). The reference is a bare
`INSERT INTO ... SELECT * FROM frame` of the stored rows into an empty table of the same schema.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import duckdb

from rag_loop.curation.label_rules import KnownSources, check_label
from rag_loop.curation.labels import _read_rows, store_label_files
from rag_loop.store.ddl import LABELS_DDL
from rag_loop.store.tables import create_tables

GOAL = 10_000  # rows per second
INVALID = [  # one of each kind of error row
    {"trace_id": "tr-nope", "decision": "accept"},
    {"trace_id": "tr-1", "decision": "maybe"},
    {"trace_id": "tr-2", "decision": "accept", "expected_output": "", "origin": "manual", "failure_type": "none"},
    {"trace_id": "tr-3", "decision": "accept", "expected_output": "x", "origin": "manual",
     "failure_type": "none", "expected_sources": ["payroll"]},
    {"trace_id": "tr-4", "decision": "reject", "labeled_at": "yesterday"},
]


def build_database(con: duckdb.DuckDBPyConnection, count: int) -> None:
    create_tables(con)
    con.execute(f"""
        INSERT INTO raw_traces (trace_id, "timestamp", original_query, language, answer)
        SELECT 'tr-' || i, TIMESTAMPTZ '2026-11-01 00:00:00+00' + to_seconds(i), 'how many leave days? ' || i,
               'en', '12 days'
        FROM range({count}) r(i)""")
    con.execute("""INSERT INTO documents (doc_id, version, title, language, source_updated_at, indexed_at) VALUES
        ('leave', '2025', 'Leave', 'en', '2025-11-03 09:00:00+00', NULL),
        ('leave', '2026', 'Leave', 'en', '2026-11-03 09:00:00+00', NULL),
        ('security', '2026', 'Security', 'en', '2026-10-03 09:00:00+00', NULL)""")
    con.execute("""INSERT INTO document_chunks VALUES
        ('leave@2025#annual-en', 'leave', '2025', '12 days of paid annual leave.'),
        ('leave@2026#annual-en', 'leave', '2026', '15 days of paid annual leave.'),
        ('security@2026#incident-en', 'security', '2026', 'Report an incident within an hour.')""")


def write_labels(path: Path, count: int, seed: int = 1) -> int:
    """N valid rows (plus the invalid ones, spread through the file); returns the line count."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        decision = rng.choices(["accept", "reject", "skip"], [8, 1, 1])[0]
        row = {"trace_id": f"tr-{i}", "batch": "b1", "priority": rng.choice(["P1", "P2", "P3"]),
               "cluster_id": f"en-{i % 300:04d}", "cluster_weight": round(rng.uniform(1, 40), 2),
               "input": f"how many leave days? {i}", "suggested_failure_type": "retrieval",
               "judge_score": round(rng.random(), 3), "curator": rng.choice(["ana", "binh", "chloe"]),
               "decision": decision, "labeled_at": f"2026-11-{1 + i % 20:02d}T{i % 24:02d}:{i % 60:02d}:00Z"}
        if decision == "accept":
            row |= {"expected_output": "Full-time employees get 15 days of paid annual leave.",
                    "expected_sources": rng.choice([["leave@2026#annual-en"], ["leave", "leave@2025"],
                                                    ["security@2026#incident-en", "leave@2026"]]),
                    "tags": rng.choice([["leave"], ["leave", "annual"], []]), "origin": "production_failure",
                    "failure_type": rng.choice(["retrieval", "generation", "context"]),
                    "variant_trace_ids": [f"tr-{i}", f"tr-{(i + 1) % count}"] if i % 7 == 0 else []}
        lines.append(json.dumps(row))
    for k, bad in enumerate(INVALID):
        lines.insert(len(lines) * (k + 1) // (len(INVALID) + 1), json.dumps(bad))
    lines.insert(len(lines) // 2, "{not json")
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-labels-") as tmp:
        directory = Path(tmp) / "labels"
        directory.mkdir()
        lines = write_labels(directory / "labels.jsonl", args.rows)
        with duckdb.connect(str(Path(tmp) / "bench.duckdb")) as con:
            build_database(con, args.rows)
            con.execute(LABELS_DDL)
            con.execute("CHECKPOINT")

            start = time.perf_counter()
            report = store_label_files(con, directory)
            storing = time.perf_counter() - start

            known = KnownSources.load(con)  # validation alone, as store_label_files does it
            traces = {t for (t,) in con.execute("SELECT trace_id FROM raw_traces").fetchall()}
            start = time.perf_counter()
            for _, row in _read_rows(directory / "labels.jsonl"):
                check_label(row, known, traces)
            validating = time.perf_counter() - start

            frame = con.sql("SELECT * FROM curated_labels").to_arrow_table()  # noqa: F841  (scanned below)
            con.execute("CREATE TABLE bare AS SELECT * FROM curated_labels LIMIT 0")
            con.execute("ALTER TABLE bare ADD PRIMARY KEY (label_id)")
            start = time.perf_counter()
            con.execute("BEGIN")
            con.execute("INSERT INTO bare SELECT * FROM frame")
            con.execute("COMMIT")
            bare = time.perf_counter() - start
            errors = con.execute("SELECT count(*) FROM label_errors").fetchall()[0][0]

    rate = report.stored / storing
    print(f"label rows: {lines:,} ({args.rows:,} valid); stored: {report.stored:,}, rejected: {report.rejected:,}, "
          f"error rows: {errors:,}, warnings: {report.warnings:,}")
    print(f"bare INSERT ... SELECT of the {report.stored:,} stored rows from a frame: {bare:.3f} s "
          f"({report.stored / bare:,.0f} rows/s, reference)")
    print(f"store_label_files: {storing:.2f} s, {rate:,.0f} rows/s (goal >= {GOAL:,} rows/s: "
          f"{'met' if rate >= GOAL else 'NOT met'}), ratio to bare insert: {storing / bare:.1f}")
    print(f"of which validation (check_label per row, for information): {validating:.2f} s, "
          f"{lines / validating:,.0f} rows/s")


if __name__ == "__main__":
    main()
