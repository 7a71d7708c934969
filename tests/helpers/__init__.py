"""What the tests share: the demo's paths and run configs, small builders, and queries."""

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from rag_loop.curation.label_rules import KnownSources
from rag_loop.demo.intent_catalog import INTENTS, paraphrase

PROJECT = Path(__file__).resolve().parents[2]
DEMO = PROJECT / "data" / "demo"
# the demo's system under test, as the demo's run config names it (data/demo/eval/)
DEMO_APP = {"rag_app": "rag_loop.demo.rag_app:answer_for_eval", "rag_config": {"config": "baseline"}}

KNOWN = KnownSources(newest={"leave": "2026"}, versions={("leave", "2025"), ("leave", "2026")},
                     chunks={"leave@2026#annual-en"})
GOOD = {"trace_id": "t1", "decision": "accept", "expected_output": "15 days.",
        "expected_sources": ["leave@2026#annual-en"], "tags": ["leave"], "origin": "production_failure",
        "failure_type": "retrieval"}


def demo_config(name: str) -> dict:
    """A demo run config: data/demo/<name>.yaml (loop, release/round-1, eval/baseline ...)."""
    import yaml
    return yaml.safe_load((DEMO / f"{name}.yaml").read_text())


def misplaced_child_rows(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    """Rows of the child tables whose `day` is not their trace's UTC day, or with no trace."""
    from rag_loop.store.ddl import CHILD_TABLES, utc_day
    day = utc_day('t."timestamp"')
    return con.execute(" UNION ALL ".join(
        f"SELECT '{table}', c.trace_id, c.day FROM {table} c LEFT JOIN raw_traces t USING (trace_id) "
        f"WHERE t.trace_id IS NULL OR c.day IS DISTINCT FROM {day}" for table in CHILD_TABLES)).fetchall()


def line_verdicts(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """What became of each line ingested: `stored <id>`, `duplicate <id>` or its quarantine
    reason, by line; asserts that no line got two and that stored traces' rows carry their day."""
    found: dict[int, list[str]] = {}
    for line, what in con.execute("""
            SELECT source_line, 'stored ' || trace_id FROM raw_traces UNION ALL
            SELECT line_no, 'duplicate ' || trace_id FROM trace_duplicates UNION ALL
            SELECT line_no, reason FROM quarantine""").fetchall():
        found.setdefault(line, []).append(what)
    assert all(len(v) == 1 for v in found.values()), found  # exactly one verdict per line
    assert misplaced_child_rows(con) == []  # a stored trace's rows carry its day
    return {k: v[0] for k, v in found.items()}

def fake_embedder():
    """Asset tests embed with hashed word and character n-grams: deterministic and model-free;
    tests marked `slow` (and the end-to-end tests) use the bundled models."""
    from tests.helpers.fakes import HashingEmbedderResource
    return HashingEmbedderResource()


def trace_line(trace_id: str, **fields) -> str:
    """A minimal valid native trace as one JSON line."""
    record = {"trace_id": trace_id, "original_query": "How many leave days?",
              "timestamp": "2026-11-01T08:00:00Z", **fields}
    return json.dumps(record)


@dataclass
class RecordedRun:
    """The metadata a materialization reported per step, kept where the run itself is not (the
    demo run is built by one test worker and read by all)."""

    metadata: dict[str, dict]


def metadata_of(result, asset: str) -> dict:
    """The metadata of the step's first materialization (a stage asset's own, not its parts')."""
    if isinstance(result, RecordedRun):
        return result.metadata[asset]
    return {k: v.value for k, v in result.asset_materializations_for_node(asset)[0].metadata.items()}


def undeclared_tables(database) -> set[str]:
    """Tables and views in the database that no asset declares: the lineage graph would lie."""
    from rag_loop_dagster.definitions import defs
    declared = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    stored = {name for (name,) in query(database, "SELECT table_name FROM duckdb_tables() UNION "
                                                  "SELECT view_name FROM duckdb_views() "
                                                  "WHERE NOT internal")}
    return stored - declared


def query(database, sql: str) -> list[tuple]:
    with duckdb.connect(str(database), read_only=True) as connection:
        return connection.execute(sql).fetchall()


def query_one(con, sql):
    return con.execute(sql).fetchall()[0][0]


def demo_copy(demo_run, tmp_path):
    """A writable copy of the demo run's database, open."""
    _, database, _ = demo_run
    copy = tmp_path / "copy.duckdb"
    shutil.copy(database, copy)
    return duckdb.connect(str(copy))


def write_labels(directory: Path, name: str, rows: list[dict]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def labelled_queries(intent_count=6, per_intent=25):
    """Paraphrased English queries of a few demo intents, with the intent of each."""
    rng = random.Random(3)
    chosen = [i for i in INTENTS if i.doc_id][:intent_count]
    queries = [(paraphrase(rng.choice(i.en), "en", rng), i.name) for i in chosen for _ in range(per_intent)]
    return [q for q, _ in queries], np.array([n for _, n in queries])
