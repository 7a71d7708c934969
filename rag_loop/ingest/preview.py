"""What a mapping makes of a team's files before anything is stored: the first traces, each
field's coverage and most common failure, the records the checks would refuse, and what the
loop cannot do with what is missing (`rag-loop ingest preview`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from rag_loop.ingest.field_map import load_mapping, map_record
from rag_loop.ingest.mapped import MAPPED_FORMAT, file_format, read_records, store_mapped_file
from rag_loop.ingest.pipeline import DEFAULT_MAX_RECORD_BYTES
from rag_loop.store.tables import create_tables

# (fields that must resolve somewhere, what the loop cannot do without any of them)
CONSEQUENCES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("answer",), "no answer: the online judge has nothing to score, regression goldens have no actual output"),
    (("chunks[].doc_id",), "no retrieved chunks: retrieval signals and drift are empty, Faithfulness and the "
                           "contextual metrics are unjudgeable, curators cannot cite the sources traffic used"),
    (("chunks[].text",), "no chunk text: Faithfulness is unjudgeable unless a knowledge base (RAG_LOOP_KB_DIR) "
                         "holds the chunks' text"),
    (("chunks[].score", "chunks[].rerank_score"), "no retrieval scores: the low-score signal and score drift "
                                                  "are empty"),
    (("feedback.rating",), "no user feedback: the thumbs-down signal and the feedback rate are empty"),
    (("latency_ms",), "no latency: the latency SLI and the slow-request signal are empty"),
    (("session_id", "conversation_id"), "no session: follow-up turns are not linked to their conversation"),
    (("language",), "no language: each query's language is identified from its text (py3langid)"),
    (("rag_version", "prompt_version", "index_version"), "no version fields: drift and incidents cannot tie a "
                                                         "change to a deploy"),
    (("tenant", "query_type"), "no tenant or query type: those slices are empty and sampling uses one rate"),
)


@dataclass
class Preview:
    """The first mapped traces, per-field coverage, and the verdicts the checks gave."""

    traces: list[dict[str, Any]]
    coverage: pd.DataFrame  # field, path, records, resolved, share, top_failure
    stored: int
    duplicates: int
    quarantined: pd.DataFrame  # reason, records (most common first)
    missing: list[str]  # what the loop will not be able to do

    def text(self) -> str:
        lines = [f"First {len(self.traces)} mapped traces:"]
        lines += [json.dumps(t, ensure_ascii=False, default=str)[:600] for t in self.traces]
        table = self.coverage.assign(share=self.coverage.share.map(lambda s: "-" if pd.isna(s) else f"{s:.0%}"))
        lines += ["", "Coverage (records where the field's path resolved):",
                  table[["field", "path", "resolved", "records", "share", "top_failure"]].fillna("")
                  .to_string(index=False)]
        lines += ["", f"Would store {self.stored} traces, {self.duplicates} repeated, "
                      f"{int(self.quarantined.records.sum()) if len(self.quarantined) else 0} quarantined."]
        if len(self.quarantined):
            lines += ["Quarantine reasons:", self.quarantined.to_string(index=False)]
        if self.missing:
            lines += ["", "What the loop cannot do with what is missing:", *[f"- {m}" for m in self.missing]]
        return "\n".join(lines)


def preview(mapping_file: Path, data: list[Path], limit: int = 5,
            max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Preview:
    """Map every record of the `data` files (files, or folders read whole) with `mapping_file`
    and check them as ingestion would, in a database of their own in memory: nothing is
    stored where a deployment keeps its traces."""
    mapping = load_mapping(mapping_file)
    files = [p for path in data for p in (sorted(q for q in path.rglob("*") if q.is_file()) if path.is_dir()
                                           else [path]) if file_format(p, mapping)]
    traces: list[dict[str, Any]] = []
    with duckdb.connect() as con:
        create_tables(con)
        con.execute("SET TimeZone = 'UTC'")
        for path in files:
            for item in read_records(path, file_format(path, mapping), mapping, max_record_bytes):
                if len(traces) >= limit:
                    break
                if not hasattr(item, "reason"):
                    traces.append(map_record(item[1], mapping.spec).trace)
            con.execute("BEGIN")
            store_mapped_file(con, path, str(path), mapping, max_record_bytes)
            con.execute("COMMIT")
        coverage = con.execute("""
            SELECT field, any_value(path) AS path, sum(records)::BIGINT AS records, sum(resolved)::BIGINT AS resolved,
                   sum(resolved) / nullif(sum(records), 0) AS share, max(top_failure) AS top_failure
            FROM mapping_coverage GROUP BY field ORDER BY min(rowid)""").df()
        stored = con.execute("SELECT count(*) FROM raw_traces").fetchall()[0][0]
        duplicates = con.execute("SELECT count(*) FROM trace_duplicates").fetchall()[0][0]
        quarantined = con.execute("""SELECT regexp_replace(reason, '^(mapping_failed: [^)]*\\)).*$', '\\1') AS reason,
                                            count(*) AS records FROM quarantine WHERE format = ?
                                     GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 10""", [MAPPED_FORMAT]).df()
    resolved = dict(zip(coverage.field, coverage.resolved))
    missing = [why for fields, why in CONSEQUENCES if not any(resolved.get(f, 0) for f in fields)]
    return Preview(traces, coverage, stored, duplicates, quarantined, missing)
