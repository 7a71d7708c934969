import gzip

import duckdb
import pytest

from rag_loop.ingest import ingest_directory
from rag_loop.ingest.native import line_stats
from rag_loop.ingest.records import duckdb_type, structure_problem
from rag_loop.schema import Trace
from tests.helpers import trace_line


def _ingest(con, directory, **kwargs):
    return ingest_directory(con, directory, **kwargs)


def _reasons(con, source_file: str | None = None):
    where = "WHERE source_file = $file" if source_file else ""
    return dict(con.execute(f"SELECT line_no, reason FROM quarantine {where} ORDER BY 1",
                            {"file": source_file} if source_file else {}).fetchall())


@pytest.fixture
def con():
    """An in-memory database: these tests query what was ingested, none needs it on disk."""
    with duckdb.connect() as connection:
        yield connection


@pytest.fixture(scope="module")
def cases_run(tmp_path_factory):
    """The files of the bad-record, reader-fallback and wrongly-typed cases, one per case, in one
    directory ingested in one run into an in-memory database: each file is read, and falls back
    to the next reader, on its own, and their stored trace ids differ (a bad record's is never
    stored). The reports by file name, and the connection."""
    directory = tmp_path_factory.mktemp("cases")
    files = dict(_bad_record_file(line, reason, blank) for line, reason in BAD_RECORDS for blank in BLANKS)
    files |= {f"t{case}.jsonl": _own_ids(content, case) for case, (content, _, _) in enumerate(FALLBACKS)}
    files |= {f"{reader}.jsonl": _wrongly_typed_file(reader) for reader in ("read_json", "read_csv")}
    for name, content in files.items():
        (directory / name).write_bytes(content.encode())
    with duckdb.connect() as connection:
        report = ingest_directory(connection, directory)
        assert len(report.files) == len(files)
        yield {f.path: f for f in report.files}, connection


def test_valid_trace_is_stored_with_chunks_spans_and_feedback(con, tmp_path):
    chunks = [{"doc_id": "leave-policy", "chunk_id": "c1", "doc_version": "2026", "score": 0.9,
               "rank": 1, "rerank_score": 0.7, "rerank_rank": 1, "selected": True}]
    (tmp_path / "t.jsonl").write_text(trace_line(
        "a", chunks=chunks, spans=[{"name": "retrieval", "duration_ms": 12.5}],
        feedback={"rating": "negative", "category": "outdated_source"},
        filters={"region": "apac"}, citations=["c1"], turn_id=2) + "\n")
    report = _ingest(con, tmp_path)
    assert report.total().ingested == 1
    row = con.execute("SELECT trace_id, turn_id, filters->>'region', citations FROM raw_traces").fetchall()
    assert row == [("a", 2, "apac", ["c1"])]
    assert con.execute("SELECT chunk_id, rerank_rank, selected FROM trace_chunks").fetchall() == [("c1", 1, True)]
    assert con.execute("SELECT name, duration_ms FROM trace_spans").fetchall() == [("retrieval", 12.5)]
    assert con.execute("SELECT category FROM trace_feedback").fetchall() == [("outdated_source",)]


BAD_RECORDS = [
    ("not json", "invalid_json"),
    ('{"trace_id": "x", "timestamp": "2026-11-01T00:00:00Z"', "invalid_json"),
    ('["a"]', "not_an_object"),
    ('{"original_query": "q", "timestamp": "2026-11-01T00:00:00Z"}', "missing_trace_id"),
    ('{"trace_id": "x", "timestamp": "2026-11-01T00:00:00Z"}', "missing_query"),
    ('{"trace_id": "x", "original_query": "  ", "timestamp": "2026-11-01T00:00:00Z"}', "missing_query"),
    ('{"trace_id": "x", "original_query": "q"}', "missing_timestamp"),
    ('{"trace_id": "x", "original_query": "q", "timestamp": "last tuesday"}', "bad_timestamp"),
    (trace_line("x", turn_id="three"), "wrong_type: turn_id"),
    (trace_line("x", latency_ms=[1]), "wrong_type: latency_ms"),
    (trace_line("x", chunks="c1"), "wrong_type: chunks"),
    (trace_line("x", chunks=["c1"]), "wrong_type: chunks[]"),
    (trace_line("x", spans=[{"name": "retrieval"}, 5]), "wrong_type: spans[]"),
    (trace_line("x", chunks=[{"doc_id": "d", "score": "high"}]), "wrong_type: chunks[].score"),
    (trace_line("x", chunks=[{"doc_id": "d", "score": 1}, {"doc_id": 5}]), "wrong_type: chunks[].doc_id"),
    (trace_line("x", chunks=[{"chunk_id": "c"}]), "missing_field: chunks[].doc_id"),
    (trace_line("x", feedback="bad"), "wrong_type: feedback"),
    (trace_line("x", spans=[{"duration_ms": 1}]), "missing_field: spans[].name"),
]
BLANKS = ["", "\n"]


def _bad_record_file(line: str, reason: str, blank: str) -> tuple[str, str]:
    """A stored record (its own trace id), then `blank` and the bad record `line`."""
    name = f"bad-{BAD_RECORDS.index((line, reason))}-{len(blank)}"
    return f"{name}.jsonl", trace_line(f"good-{name}") + "\n" + blank + line + "\n"


@pytest.mark.parametrize("line, reason", BAD_RECORDS)
@pytest.mark.parametrize("blank", BLANKS, ids=["as_is", "after_a_blank_line"])
def test_each_kind_of_bad_record_is_quarantined_with_its_reason(cases_run, line, reason, blank):
    # a blank line: read_json cannot number the lines, so read_csv reads the file
    reports, con = cases_run
    name = _bad_record_file(line, reason, blank)[0]
    report = reports[name]
    if blank:
        assert report.reader == "read_csv"
    assert (report.counts.ingested, report.counts.quarantined) == (1, 1)
    assert _reasons(con, name) == {2 + len(blank): reason}
    raw = con.execute("SELECT raw FROM quarantine WHERE source_file = ?", [name]).fetchall()
    assert raw == [(line[:2000],)]


def test_invalid_utf8_and_oversized_lines_are_quarantined(con, tmp_path):
    big = trace_line("big", answer="x" * 5000)
    (tmp_path / "t.jsonl").write_bytes(
        trace_line("a").encode() + b"\n" + b'{"trace_id": "\xff"}\n' + big.encode() + b"\n")
    report = _ingest(con, tmp_path, max_record_bytes=1000)
    assert report.total().ingested == 1
    reasons = _reasons(con)
    assert reasons[2].startswith("invalid_utf8") and reasons[3].startswith("oversized")
    assert len(con.execute("SELECT raw FROM quarantine WHERE line_no = 3").fetchall()[0][0]) == 2000


def test_oversized_lines_in_a_utf8_file_are_quarantined_by_the_line_table_reader(con, tmp_path):
    big = trace_line("big", answer="é" * 3000)  # 6,000+ bytes, 3,000+ characters
    (tmp_path / "t.jsonl").write_text(trace_line("a") + "\n" + big + "\n" + trace_line("b") + "\n")
    report = _ingest(con, tmp_path, max_record_bytes=1000)
    assert report.files[0].reader == "read_csv"
    assert (report.total().ingested, report.total().quarantined) == (2, 1)
    assert _reasons(con) == {2: f"oversized: {len(big.encode())} bytes > 1000"}
    assert con.execute("SELECT raw FROM quarantine").fetchall() == [(big[:2000],)]


def test_exact_reader_takes_over_for_lines_arrow_cannot_split(con, tmp_path):
    # a raw 0x1f byte (Arrow's column delimiter here) and a blank line keep line numbers exact
    (tmp_path / "t.jsonl").write_bytes(
        trace_line("a").encode() + b"\n\n" + b'{"trace_id":\x1f"b"}\n' + trace_line("c").encode() + b"\n")
    report = _ingest(con, tmp_path)
    assert report.total().ingested == 2
    assert _reasons(con) == {3: "invalid_json"}
    assert con.execute("SELECT source_line FROM raw_traces WHERE trace_id = 'c'").fetchall() == [(4,)]


def test_clean_files_take_one_read_json_and_keep_line_numbers_across_parallel_blocks(con, tmp_path):
    # 25 MB, more than one of read_json's 16 MB buffers (at a 1 MiB maximum object size): DuckDB
    # parses the file's blocks in parallel (21 MB came back out of order 7 times in 8 without
    # preserve_insertion_order, 12 MB never), yet rows keep the file's order
    lines_in_file = 24_000
    padding = "x" * 1000
    lines = [trace_line(f"t{n}", turn_id=n if n % 997 else str(n), answer=padding)
             for n in range(1, lines_in_file + 1)]
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    con.execute("SET preserve_insertion_order = false")  # ingestion turns it on while it reads
    report = _ingest(con, tmp_path)
    (file_report,) = report.files
    assert (file_report.reader, file_report.fallbacks) == ("read_json", [])
    assert _reasons(con) == {n: "wrong_type: turn_id" for n in range(997, lines_in_file + 1, 997)}
    mismatched = con.execute("""SELECT count(*) FROM raw_traces
                                WHERE trace_id <> 't' || source_line OR turn_id <> source_line""")
    assert mismatched.fetchall() == [(0,)]
    assert report.total().ingested == lines_in_file - lines_in_file // 997
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchall() == [(False,)]


FALLBACKS = [
    (trace_line("a") + "\n\n" + trace_line("b") + "\n", "read_csv", ["read_json: 1 blank lines"]),
    (trace_line("a") + "\nnot json\n" + trace_line("b") + "\n", "read_csv",
     ["read_json: Invalid Input Error: Malformed JSON"]),
    (trace_line("a") + "\n\x1f\n" + trace_line("b") + "\n", "lines",  # Arrow's delimiter too
     ["read_json: Invalid Input Error", "read_csv: a 0x1f byte", "batches: "]),
    (trace_line("a") + "\r\nnot json\n" + trace_line("b") + "\n", "batches",
     ["read_json: Invalid Input Error", "read_csv: Invalid Input Error"]),
]


def _own_ids(content: str, case: int) -> str:
    """`content` with its traces a and b renamed a<case> and b<case>: ids of this file only."""
    for trace in ("a", "b"):
        content = content.replace(trace_line(trace), trace_line(f"{trace}{case}"))
    return content


@pytest.mark.parametrize("content, reader, fallbacks", FALLBACKS)
def test_files_a_faster_reader_cannot_read_exactly_go_to_the_next(cases_run, content, reader, fallbacks):
    reports, con = cases_run
    case = [c for c, _, _ in FALLBACKS].index(content)
    file_report = reports[f"t{case}.jsonl"]
    assert file_report.reader == reader
    assert len(file_report.fallbacks) == len(fallbacks)
    assert all(why.startswith(start) for why, start in zip(file_report.fallbacks, fallbacks))
    assert con.execute("SELECT trace_id, source_line FROM raw_traces WHERE source_file = ? ORDER BY 1",
                       [f"t{case}.jsonl"]).fetchall() == [(f"a{case}", 1), (f"b{case}", 3)]


def _wrongly_typed_file(reader: str) -> str:
    """Records a..h (ids suffixed by `reader`), six of them wrongly typed; a blank last line
    sends the file to read_csv."""
    blank = "\n" if reader == "read_csv" else ""
    return "\n".join([
        trace_line(f"a-{reader}"), trace_line(f"b-{reader}", answer=5),
        trace_line(f"c-{reader}", citations=[{"id": 1}]), trace_line(f"d-{reader}", turn_id=2.5),
        trace_line(f"e-{reader}", is_fallback=1), trace_line(f"f-{reader}", temperature="0.2"),
        trace_line(f"g-{reader}", turn_id=3, temperature=1, is_fallback=False, answer="ok \u00e9 \\ \"q\""),
        trace_line(f"h-{reader}", rewritten_query=["q"])]) + "\n" + blank


@pytest.mark.parametrize("reader", ["read_json", "read_csv"])
def test_wrongly_typed_values_are_not_coerced_by_the_fast_readers(cases_run, reader):
    reports, con = cases_run
    assert reports[f"{reader}.jsonl"].reader == reader
    assert _reasons(con, f"{reader}.jsonl") == {
        2: "wrong_type: answer", 3: "wrong_type: citations[]", 4: "wrong_type: turn_id",
        5: "wrong_type: is_fallback", 6: "wrong_type: temperature", 8: "wrong_type: rewritten_query"}
    assert con.execute("SELECT turn_id, temperature, is_fallback, answer FROM raw_traces "
                       "WHERE trace_id = ?", [f"g-{reader}"]).fetchall() == [(3, 1.0, False, 'ok \u00e9 \\ "q"')]


@pytest.mark.parametrize("content, stats", [
    (b"", (0, 0)), (b"ab\n", (1, 2)), (b"ab\n\nabcd", (3, 4)), (b"\n\n", (2, 0)),
    (b"a" * 70_000 + b"\nb\n", (2, 70_000)),
])
def test_line_stats_count_lines_and_the_longest_across_blocks(tmp_path, content, stats):
    (tmp_path / "t.jsonl").write_bytes(content)
    (tmp_path / "t.jsonl.gz").write_bytes(gzip.compress(content))
    assert line_stats(tmp_path / "t.jsonl", block=4096) == stats
    assert line_stats(tmp_path / "t.jsonl.gz", block=4096) == stats


def test_gzip_files_are_read_whatever_their_name(con, tmp_path):
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress((trace_line("a") + "\n").encode()))
    (tmp_path / "b.jsonl").write_bytes(gzip.compress((trace_line("b") + "\n").encode()))
    assert _ingest(con, tmp_path).total().ingested == 2


def test_corrupt_gzip_is_quarantined_as_a_file(con, tmp_path):
    data = gzip.compress(("\n".join(trace_line(f"t{i}") for i in range(100)) + "\n").encode())
    (tmp_path / "a.jsonl.gz").write_bytes(data[: len(data) // 2])
    report = _ingest(con, tmp_path)
    assert report.total().quarantined == 1 and report.total().ingested == 0
    assert _reasons(con)[0].startswith("unreadable_file")


def test_rerun_is_idempotent_and_new_files_are_incremental(con, tmp_path):
    (tmp_path / "a.jsonl").write_text(trace_line("a") + "\nbroken\n")
    _ingest(con, tmp_path)
    again = _ingest(con, tmp_path)
    assert again.total().ingested == 0 and all(f.skipped for f in again.files)
    (tmp_path / "b.jsonl").write_text(trace_line("b") + "\n")
    assert _ingest(con, tmp_path).total().ingested == 1
    counts = con.execute("SELECT (SELECT count(*) FROM raw_traces), (SELECT count(*) FROM quarantine)").fetchall()
    assert counts == [(2, 1)]


def test_a_file_read_again_does_not_double_its_quarantine_or_duplicates(con, tmp_path):
    import os
    path = tmp_path / "a.jsonl"
    path.write_text(trace_line("a") + "\n" + trace_line("a") + "\nbroken\n")
    _ingest(con, tmp_path)
    os.utime(path, ns=(1, 1))  # touched: read again
    assert not _ingest(con, tmp_path).files[0].skipped
    counts = con.execute("SELECT (SELECT count(*) FROM raw_traces), (SELECT count(*) FROM quarantine), "
                         "(SELECT count(*) FROM trace_duplicates)").fetchall()
    assert counts == [(1, 1, 1)]


def test_first_copy_of_a_trace_wins_and_later_copies_are_recorded(con, tmp_path):
    (tmp_path / "a.jsonl").write_text(trace_line("t", answer="first") + "\n" + trace_line("t", answer="second") + "\n")
    (tmp_path / "b.jsonl").write_text(trace_line("t", answer="third") + "\n")
    report = _ingest(con, tmp_path)
    assert (report.total().ingested, report.total().duplicates) == (1, 2)
    assert con.execute("SELECT answer FROM raw_traces").fetchall() == [("first",)]
    assert con.execute("SELECT source_file, line_no FROM trace_duplicates ORDER BY 1").fetchall() == [
        ("a.jsonl", 2), ("b.jsonl", 1)]


def test_files_that_are_not_trace_files_are_listed_not_read(con, tmp_path):
    (tmp_path / "README.md").write_text("# notes")
    (tmp_path / ".hidden.jsonl").write_text("junk")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.jsonl").write_text("junk")
    report = _ingest(con, tmp_path)
    assert report.ignored == [".git: hidden", ".hidden.jsonl: hidden", "README.md"]
    assert report.files == []


def test_structure_check_accepts_lax_numbers_and_empty_objects():
    expected = duckdb_type(Trace)
    assert structure_problem({"latency_ms": "UBIGINT", "feedback": "JSON", "filters": "JSON"}, expected) is None
    assert structure_problem({"chunks": ["JSON"]}, expected) == "chunks[]"
    assert structure_problem({"unknown_field": "VARCHAR"}, expected) is None
