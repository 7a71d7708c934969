"""A run that finds nothing new to assemble or label skips those stages' statements (issue 44:
the test suite ingests small folders hundreds of times)."""

import duckdb

from rag_loop.ingest import ingest_directory
from tests.helpers import trace_line


class RecordingConnection:
    """A DuckDB connection that keeps the text of every statement it runs."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self._con = con
        self.statements: list[str] = []

    def execute(self, sql, *args, **kwargs):
        self.statements.append(" ".join(sql.split()))
        result = self._con.execute(sql, *args, **kwargs)
        return self if result is self._con else result

    def executemany(self, sql, *args, **kwargs):
        self.statements.append(" ".join(sql.split()))
        return self._con.executemany(sql, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._con, name)


def test_a_run_with_nothing_pending_or_undecided_skips_assembly_and_labelling(con, tmp_path):
    (tmp_path / "t.jsonl").write_text(trace_line("given", language="vi") + "\n"
                                      + trace_line("found", original_query="How many leave days do I get?") + "\n")
    first = RecordingConnection(con)
    ingest_directory(first, tmp_path)
    assert any(s.startswith("UPDATE raw_traces SET language") for s in first.statements)  # "found" is identified
    assert dict(con.execute("SELECT trace_id, language_source FROM raw_traces").fetchall()) == \
        {"given": "attribute", "found": "detected"}

    again = RecordingConnection(con)
    ingest_directory(again, tmp_path)
    touched = [s for s in again.statements if "_trace_stats" in s or s.startswith("UPDATE raw_traces")]
    assert touched == []


def test_a_clean_file_runs_no_statement_for_duplicates_it_does_not_have(con, tmp_path):
    (tmp_path / "a.jsonl").write_text(trace_line("one", language="en") + "\n" + trace_line("two", language="en") + "\n")
    recorded = RecordingConnection(con)
    ingest_directory(recorded, tmp_path)
    assert not [s for s in recorded.statements if "trace_duplicates" in s and s.startswith("INSERT")]
    assert not [s for s in recorded.statements if "VIEW" in s]
    assert con.execute("SELECT count(*) FROM raw_traces").fetchall() == [(2,)]

    (tmp_path / "b.jsonl").write_text(trace_line("two", language="en") + "\n" + trace_line("three", language="en")
                                      + "\n" + trace_line("three", language="en") + "\n")
    report = ingest_directory(con, tmp_path)
    new = [(f.path, f.counts.ingested, f.counts.duplicates) for f in report.files if not f.skipped]
    assert new == [("b.jsonl", 1, 2)]
    assert sorted(con.execute("SELECT trace_id, line_no FROM trace_duplicates").fetchall()) == \
        [("three", 3), ("two", 1)]


def test_a_folder_listed_again_is_looked_up_in_one_query(con, tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.jsonl").write_text(trace_line(name, language="en") + "\n")
    ingest_directory(con, tmp_path)
    (tmp_path / "b.jsonl").write_text(trace_line("b2", language="en") + "\n")  # changed: read again
    again = RecordingConnection(con)
    report = ingest_directory(again, tmp_path)
    assert [(f.path, f.skipped) for f in report.files] == [("a.jsonl", True), ("b.jsonl", False), ("c.jsonl", True)]
    assert len([s for s in again.statements if "FROM ingested_files" in s]) == 1
