"""A team's own log shape through a mapping file: JSONL, JSON, Parquet and CSV give the same
traces; what the mapping cannot do is quarantined with the field and path; nothing is stored
twice; a mapping that cannot be used leaves its files to the next run; the preview stores
nothing."""

import csv
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from rag_loop.cli import main
from rag_loop.ingest import ingest_directory, mapped
from rag_loop.ingest.field_map import MappingError, load_mapping
from tests.helpers import line_verdicts

MAPPING = """
records: data
fields:
  trace_id: id
  timestamp: {path: ts, format: epoch_ms}
  original_query: question
  answer: output.text
  latency_ms: {path: latency, type: float}
  session_id: session
  tenant: {value: acme}
  chunks:
    path: contexts
    each:
      doc_id: source
      text: content
      score: {path: score, type: float}
      rank: {position: true}
  feedback:
    fields: {rating: thumb}
"""


@pytest.fixture(autouse=True, params=["sql", "python"])
def mapping_path(request, monkeypatch):
    """Each test on both paths of a JSONL file: DuckDB SQL where the mapping compiles
    (rag_loop.ingest.mapped_sql), and Python's map_record per record."""
    if request.param == "python":
        monkeypatch.setattr(mapped, "sql_mapping", lambda spec: None)
    return request.param


RECORDS = [
    {"id": "r1", "ts": 1764547200000, "question": "How many leave days?", "output": {"text": "15 days."},
     "latency": 120.5, "session": "s1", "thumb": "negative",
     "contexts": [{"source": "hr/leave", "content": "Leave is 15 days.", "score": 0.9},
                  {"source": "hr/sick", "content": "Sick leave differs.", "score": 0.4}]},
    {"id": "r2", "ts": 1764633600000, "question": "Nghỉ phép bao nhiêu ngày?", "output": {"text": "15 ngày."},
     "latency": 80, "session": "s2", "contexts": []},
    {"id": "r3", "ts": "yesterday", "question": "Bad time?"},  # the mapping cannot read the time
    {"id": "r4", "ts": 1764633600000, "question": ""},  # the native checks refuse an empty query
    {"id": "r1", "ts": 1764547200000, "question": "How many leave days?"},  # delivered again
]
EXPECTED_VERDICTS = {1: "stored r1", 2: "stored r2", 3: "mapping_failed: timestamp (path 'ts')",
                     4: "missing_query (mapping: path 'question')", 5: "duplicate r1"}


def _write(folder: Path, fmt: str, records: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    mapping = MAPPING if fmt == "json" else MAPPING.replace("records: data\n", "")
    if fmt == "csv":  # flat text columns: the contexts as JSON text in one cell
        mapping = (mapping.replace("output.text", "answer")
                   .replace("path: contexts\n", "path: contexts\n    type: json\n"))
    (folder / "rag-loop-mapping.yaml").write_text(mapping)
    if fmt == "jsonl":
        (folder / "log.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    elif fmt == "json":
        (folder / "log.json").write_text(json.dumps({"data": records}, ensure_ascii=False))
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist([{**r, "ts": str(r["ts"])} for r in records]), folder / "log.parquet")
    else:
        with open(folder / "log.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, ["id", "ts", "question", "answer", "latency", "session", "thumb",
                                             "contexts"])
            writer.writeheader()
            for r in records:
                writer.writerow({"id": r["id"], "ts": r["ts"], "question": r["question"],
                                 "answer": r.get("output", {}).get("text", ""), "latency": r.get("latency", ""),
                                 "session": r.get("session", ""), "thumb": r.get("thumb", ""),
                                 "contexts": json.dumps(r.get("contexts", []), ensure_ascii=False)})


# only JSONL is mapped in SQL (mapped.sql_mapping): the other formats are mapped in Python on
# both paths, so their sql run is the python one
SQL_ONLY = pytest.mark.parametrize("mapping_path", ["sql"], indirect=True)


@pytest.mark.parametrize("fmt, mapping_path", [("jsonl", "sql"), ("jsonl", "python"), ("json", "sql"),
                                               ("parquet", "sql"), ("csv", "sql")], indirect=["mapping_path"])
def test_each_format_gives_the_same_traces_and_verdicts(tmp_path, fmt, mapping_path):
    _write(tmp_path / "traces", fmt, RECORDS)
    con = duckdb.connect()
    report = ingest_directory(con, tmp_path / "traces")
    assert [(f.format, f.reader) for f in report.files] == [("mapped", "mapping")]
    found = line_verdicts(con)
    first = 2 if fmt == "csv" else 1  # a CSV's records start below its header line
    cut = {line - first + 1: why.split(": not a")[0] for line, why in found.items()}
    assert cut == EXPECTED_VERDICTS, found
    stored = con.execute("""SELECT trace_id, "timestamp"::VARCHAR, answer, latency_ms, session_id, tenant,
                                   source_format FROM raw_traces ORDER BY 1""").fetchall()
    assert stored == [("r1", "2025-12-01 00:00:00+00", "15 days.", 120.5, "s1", "acme", "mapped"),
                      ("r2", "2025-12-02 00:00:00+00", "15 ngày.", 80.0, "s2", "acme", "mapped")]
    assert con.execute("SELECT language FROM raw_traces ORDER BY trace_id").fetchall() == [("en",), ("vi",)]
    assert con.execute("SELECT doc_id, text, score, rank FROM trace_chunks ORDER BY rank").fetchall() == [
        ("hr/leave", "Leave is 15 days.", 0.9, 1), ("hr/sick", "Sick leave differs.", 0.4, 2)]
    assert con.execute("SELECT trace_id, rating FROM trace_feedback").fetchall() == [("r1", "negative")]
    coverage = dict(con.execute("SELECT field, resolved FROM mapping_coverage").fetchall())
    assert coverage["trace_id"] == 5 and coverage["timestamp"] == 4 and coverage["tenant"] == 5
    again = ingest_directory(con, tmp_path / "traces")  # a rerun stores nothing twice
    assert [f.skipped for f in again.files] == [True]
    assert line_verdicts(con) == found


def test_a_changed_mapping_is_visible_by_its_hash(tmp_path):
    _write(tmp_path / "traces", "jsonl", RECORDS[:2])
    con = duckdb.connect()
    ingest_directory(con, tmp_path / "traces")
    mapping = tmp_path / "traces" / "rag-loop-mapping.yaml"
    mapping.write_text(mapping.read_text().replace("tenant: {value: acme}", "tenant: {value: beta}"))
    (tmp_path / "traces" / "later.jsonl").write_text(json.dumps({**RECORDS[1], "id": "r9"}) + "\n")
    ingest_directory(con, tmp_path / "traces")
    hashes = con.execute("SELECT source_file, any_value(mapping_hash) FROM mapping_coverage GROUP BY 1 "
                         "ORDER BY 1").fetchall()
    assert len({h for _, h in hashes}) == 2 and [f for f, _ in hashes] == ["later.jsonl", "log.jsonl"]
    assert con.execute("SELECT trace_id, tenant FROM raw_traces ORDER BY 1").fetchall() == [
        ("r1", "acme"), ("r2", "acme"), ("r9", "beta")]


def test_a_mapping_that_cannot_be_used_sets_its_files_aside_until_it_is_fixed(tmp_path):
    folder = tmp_path / "traces"
    _write(folder, "jsonl", RECORDS)
    good = (folder / "rag-loop-mapping.yaml").read_text()
    (folder / "rag-loop-mapping.yaml").write_text(good.replace("latency_ms:", "latency_seconds:"))
    (folder / "native.jsonl.gz").write_bytes(b"")  # the folder's other files are read as before
    con = duckdb.connect()
    report = ingest_directory(con, folder)
    assert {f.path: f.reader for f in report.files} == {"log.jsonl": "retry", "native.jsonl.gz": "retry"}
    reason = con.execute("SELECT reason FROM quarantine WHERE source_file = 'log.jsonl'").fetchall()[0][0]
    assert "latency_seconds is not a field of the trace model" in reason
    (folder / "rag-loop-mapping.yaml").write_text(good)
    ingest_directory(con, folder)
    assert con.execute("SELECT count(*) FROM raw_traces").fetchall() == [(2,)]
    assert con.execute("SELECT count(*) FROM quarantine WHERE reason LIKE '%latency_seconds%'").fetchall() == [(0,)]


@SQL_ONLY  # the sensor does not map: once is enough
def test_a_changed_mapping_file_alone_launches_ingestion(tmp_path, mapping_path):
    from dagster import DagsterInstance, build_sensor_context

    from rag_loop_dagster.assets.ingestion import new_trace_files_sensor
    from rag_loop_dagster.assets.resources import RagLoopPaths
    folder = tmp_path / "traces"
    _write(folder, "jsonl", RECORDS)
    paths = {"paths": RagLoopPaths(traces_dir=str(folder))}
    with DagsterInstance.ephemeral() as instance:
        context = build_sensor_context(instance=instance, resources=paths)
        first = new_trace_files_sensor(context)
        context = build_sensor_context(instance=instance, cursor=context.cursor, resources=paths)
        assert not hasattr(new_trace_files_sensor(context), "run_key")
        mapping = folder / "rag-loop-mapping.yaml"
        mapping.write_text(mapping.read_text().replace("acme", "beta"))  # e.g. the fix of a bad mapping
        context = build_sensor_context(instance=instance, cursor=context.cursor, resources=paths)
        assert new_trace_files_sensor(context).run_key not in (None, first.run_key)


@pytest.mark.parametrize("text, why", [
    ("fields: {trace_id: id, timestamp: ts}", "original_query is required"),
    ("fields: {trace_id: id, timestamp: {path: ts, format: weekly}, original_query: q}", "strptime pattern"),
    ("fields: {trace_id: 'a[', timestamp: ts, original_query: q}", "Invalid jmespath expression"),
    ("fields: {trace_id: id, timestamp: ts, original_query: q, chunks: c}", "needs each"),
    ("fields: [1, 2", "expected"),
])
def test_a_bad_mapping_says_what_is_wrong(tmp_path, text, why):
    (tmp_path / "m.yaml").write_text(text)
    with pytest.raises(MappingError, match=why):
        load_mapping(tmp_path / "m.yaml")


def test_the_preview_shows_traces_coverage_and_what_is_missing_and_stores_nothing(tmp_path):
    _write(tmp_path / "traces", "jsonl", RECORDS)
    (tmp_path / "traces" / "rag-loop-mapping.yaml").rename(tmp_path / "mapping.yaml")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    shown = CliRunner().invoke(main, ["ingest", "preview", "--mapping", str(tmp_path / "mapping.yaml"),
                                      str(tmp_path / "traces"), "--limit", "2"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.count('"trace_id"') == 2
    assert "Would store 2 traces, 1 repeated, 2 quarantined." in shown.output
    assert "mapping_failed: timestamp (path 'ts')" in shown.output
    assert "no version fields" in shown.output and "no answer" not in shown.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    broken = CliRunner().invoke(main, ["ingest", "preview", "--mapping", str(tmp_path / "traces" / "log.jsonl"),
                                       str(tmp_path / "traces")])
    assert broken.exit_code == 1 and "the mapping cannot be used" in broken.output


@SQL_ONLY  # a parquet file: mapped in Python on both paths
def test_raw_traces_reports_the_mappings_coverage(tmp_path, mapping_path):
    from dagster import materialize
    from dagster_duckdb import DuckDBResource

    from rag_loop_dagster.assets.ingestion import raw_traces
    from rag_loop_dagster.assets.resources import DuckDBEngineResource, RagLoopPaths
    _write(tmp_path / "traces" / "own", "parquet", RECORDS)
    (tmp_path / "traces" / "native.jsonl").write_text("")  # beside files of the native shape
    result = materialize([raw_traces], resources={
        "duckdb": DuckDBResource(database=str(tmp_path / "rag.duckdb")), "engine": DuckDBEngineResource(),
        "paths": RagLoopPaths(traces_dir=str(tmp_path / "traces"), knowledge_dir="")})
    metadata = result.asset_materializations_for_node("raw_traces")[0].metadata
    assert metadata["mapped_ingested"].value == 2 and metadata["mapped_quarantined"].value == 2
    coverage = metadata["mapping_coverage"].value
    assert "| timestamp " in coverage and "0.8 |" in coverage and "own/log.parquet" in metadata["files"].value
