"""Span-level OTLP ingestion: spans spread over lines, files and runs; retries; grace; bad spans."""
from datetime import UTC, datetime, timedelta

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.ingest import ingest_directory
from rag_loop.store.ddl import span_day
from tests.helpers.otlp import AFTER, line, request_spans, shifted, span, trace_hex, write


def traces(con) -> list[tuple]:
    return con.execute("SELECT trace_id, source_file, source_line, answer FROM raw_traces "
                       "ORDER BY trace_id").fetchall()


def test_many_traces_on_a_line_and_one_trace_over_lines_and_files(con, tmp_path):
    a, b, c = request_spans(1), request_spans(2), request_spans(3)
    write(tmp_path / "t1.jsonl", [line(a[1:] + b), line(c[1:])])  # a's and c's roots come later
    write(tmp_path / "t2.jsonl", [line([c[0], a[0]])])
    report = ingest_directory(con, tmp_path, now=AFTER)
    assert [(t[0][-1], t[1], t[2]) for t in traces(con)] == [
        ("1", "t2.jsonl", 1), ("2", "t1.jsonl", 1), ("3", "t2.jsonl", 1)]
    assert report.assembly.ingested == 3 and report.spans().ingested == 9
    assert con.execute("SELECT count(*) FROM trace_chunks").fetchall() == [(3,)]
    assert con.execute("SELECT count(*) FROM trace_spans").fetchall() == [(9,)]


def test_a_trace_waits_for_its_root_across_runs_then_is_assembled(con, tmp_path):
    spans = request_spans(1)
    write(tmp_path / "a.jsonl", [line(spans[1:])])
    first = ingest_directory(con, tmp_path, now=AFTER)
    assert first.assembly.waiting == 1 and traces(con) == []
    write(tmp_path / "b.jsonl", [line(spans[:1])])
    second = ingest_directory(con, tmp_path, now=AFTER)
    assert second.assembly.ingested == 1 and second.assembly.waiting == 0
    assert traces(con) == [(trace_hex(1), "b.jsonl", 1, "answer 1")]
    assert con.execute("SELECT state, complete FROM otlp_traces").fetchall() == [("ingested", True)]


def test_without_a_root_a_trace_is_assembled_after_the_grace_period_and_says_so(con, tmp_path):
    write(tmp_path / "a.jsonl", [line(request_spans(1)[1:])])
    assert ingest_directory(con, tmp_path, now=AFTER).assembly.waiting == 1
    later = datetime(2026, 11, 11, 11, 1, tzinfo=UTC)  # an hour after the newest span ended
    report = ingest_directory(con, tmp_path, now=later)
    assert report.assembly.ingested == 1 and report.assembly.partial == 1
    assert con.execute("SELECT state, complete FROM otlp_traces").fetchall() == [("ingested", False)]
    short = ingest_directory(duckdb.connect(), tmp_path, now=AFTER, grace=timedelta(minutes=1))
    assert short.assembly.partial == 1


def test_a_late_span_assembles_its_trace_again_without_doubling_it(con, tmp_path):
    spans = request_spans(1)
    write(tmp_path / "a.jsonl", [line(spans[:2])])
    ingest_directory(con, tmp_path, now=AFTER)
    assert traces(con)[0][3] is None  # no LLM span yet
    write(tmp_path / "b.jsonl", [line(spans[2:])])
    report = ingest_directory(con, tmp_path, now=AFTER)
    assert report.assembly.reassembled == 1
    assert traces(con) == [(trace_hex(1), "a.jsonl", 1, "answer 1")]
    assert con.execute("SELECT count(*) FROM trace_chunks").fetchall() == [(1,)]
    assert con.execute("SELECT count(*) FROM otlp_traces").fetchall() == [(1,)]


def test_retried_spans_are_stored_once_and_listed_as_duplicates(con, tmp_path):
    spans = request_spans(1)
    write(tmp_path / "a.jsonl", [line(spans), line(spans[1:2])])
    write(tmp_path / "b.jsonl", [line(spans)])
    report = ingest_directory(con, tmp_path, now=AFTER)
    assert report.spans().ingested == 3 and report.spans().duplicates == 4
    assert con.execute("SELECT count(*) FROM otlp_spans").fetchall() == [(3,)]
    assert con.execute("SELECT count(*), count(span_id) FROM trace_duplicates").fetchall() == [(4, 4)]
    assert len(traces(con)) == 1
    again = ingest_directory(con, tmp_path, now=AFTER)  # nothing new: nothing counted twice
    assert again.spans().ingested == 0 and again.assembly.ingested == 0


def test_a_bad_span_is_quarantined_alone_and_its_neighbours_are_kept(con, tmp_path):
    good, broken = request_spans(1), request_spans(2)
    broken[2]["attributes"].append({"key": "llm.token_count.prompt", "value": {"intValue": "many"}})
    broken[1]["startTimeUnixNano"] = "yesterday"
    write(tmp_path / "a.jsonl", [line(good + broken + [{**good[0], "traceId": 5}]), "{oops",
                                 '{"resourceSpans": 5}'])
    report = ingest_directory(con, tmp_path, now=AFTER)
    rows = con.execute("SELECT line_no, reason, span_id FROM quarantine ORDER BY line_no, reason").fetchall()
    assert [(n, r.split(":")[0] if n > 1 else r, s is not None) for n, r, s in rows] == [
        (1, "wrong_type: attributes.llm.token_count.prompt", True),
        (1, "wrong_type: startTimeUnixNano", True),
        (1, "wrong_type: traceId", True),
        (2, "invalid_json", False), (3, "not_otlp", False)]
    assert [t[0] for t in traces(con)] == [trace_hex(1), trace_hex(2)]  # 2 kept its root
    assert report.by_format()["otlp"].quarantined == 5


def test_the_size_limit_is_per_span_not_per_line(con, tmp_path):
    many = [s for n in range(1, 40) for s in request_spans(n, "q" * 300)]
    big = request_spans(99)
    big[2]["attributes"].append({"key": "output.value", "value": {"stringValue": "x" * 5000}})
    write(tmp_path / "a.jsonl", [line(many + big)])
    assert len(line(many)) > 4000
    ingest_directory(con, tmp_path, max_record_bytes=4000, now=AFTER)
    stored = traces(con)
    assert len(stored) == 40 and stored[-1][3] is None  # 99 is stored without its LLM span
    assert con.execute("SELECT reason LIKE 'oversized%', span_id FROM quarantine").fetchall() == [
        (True, f"{99:08x}{3:08x}")]


def test_indexing_traces_are_not_requests_and_not_quarantined(con, tmp_path):
    indexing = [span(7, 1, None, "VectorStoreIndex.from_documents", {}),
                span(7, 2, 1, "embed", {"openinference.span.kind": "EMBEDDING"})]
    write(tmp_path / "a.jsonl", [line(indexing + request_spans(1))])
    report = ingest_directory(con, tmp_path, now=AFTER)
    assert report.assembly.not_a_request == 1 and report.assembly.ingested == 1
    assert con.execute("SELECT count(*) FROM quarantine").fetchall() == [(0,)]
    assert con.execute("SELECT state FROM otlp_traces WHERE trace_id = ?",
                       [trace_hex(7)]).fetchall() == [("not_a_request",)]


def test_a_failing_statement_surfaces_its_own_error_and_leaves_no_transaction(con, tmp_path,
                                                                               monkeypatch):
    import rag_loop.ingest.pipeline as pipeline

    def broken(con, *args, **kwargs):
        con.execute("SELECT * FROM no_such_table")
    monkeypatch.setattr(pipeline, "assemble_ready", broken)
    write(tmp_path / "a.jsonl", [line(request_spans(1))])
    with pytest.raises(duckdb.CatalogException, match="no_such_table"):
        ingest_directory(con, tmp_path, now=AFTER)
    con.execute("BEGIN")  # not inside a transaction any more
    con.execute("ROLLBACK")


UNASSEMBLED = """SELECT s.trace_id FROM otlp_spans s LEFT JOIN otlp_traces t USING (trace_id)
                 GROUP BY s.trace_id, t.trace_id, t.spans HAVING t.trace_id IS NULL OR count(*) > t.spans
                 ORDER BY 1"""  # every stored span's trace, the whole table: what assembly once scanned
NEVER_ASSEMBLED_DAYS = f"""SELECT DISTINCT trace_id, {span_day()} FROM otlp_spans ANTI JOIN otlp_traces USING (trace_id)
                           ORDER BY ALL"""


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.lists(st.tuples(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 2), st.booleans()),
                                        max_size=8), st.booleans()), min_size=1, max_size=4))
def test_assembly_looks_only_at_the_pending_traces_and_misses_none(tmp_path_factory, runs):
    """Spans of four traces arrive over runs in any order, repeated or not, started on the
    trace's day or the day before, the grace period passed or not: after every run the pending
    trace ids are exactly the traces whose stored spans are not all in their assembled record,
    a trace never assembled is listed with the days of all its spans, and once the grace period
    is over for all, none is left and every trace holds all its spans."""
    folder = tmp_path_factory.mktemp("runs")
    later = datetime(2026, 11, 11, 11, 1, tzinfo=UTC)
    with duckdb.connect() as con:
        for number, (spans, grace_over) in enumerate(runs):
            chosen = [shifted(request_spans(t)[s], -11 * 3_600_000) if day_before else request_spans(t)[s]
                      for t, s, day_before in spans]  # 23:00 the day before
            write(folder / "traces" / f"{number}.jsonl", [line(chosen)])
            ingest_directory(con, folder / "traces", now=later if grace_over else AFTER)
            pending = con.execute("SELECT DISTINCT trace_id FROM otlp_pending ORDER BY 1").fetchall()
            assert pending == con.execute(UNASSEMBLED).fetchall()
            assert con.execute(NEVER_ASSEMBLED_DAYS).fetchall() == \
                con.execute("SELECT * FROM otlp_pending ANTI JOIN otlp_traces USING (trace_id) ORDER BY ALL").fetchall()
        ingest_directory(con, folder / "traces", now=later + timedelta(days=1))
        assert con.execute("SELECT count(*) FROM otlp_pending").fetchall() == [(0,)] == \
            con.execute(f"SELECT count(*) FROM ({UNASSEMBLED})").fetchall()
        assert con.execute("""SELECT count(*) FROM otlp_traces WHERE spans <> (SELECT count(*) FROM otlp_spans s
                              WHERE s.trace_id = otlp_traces.trace_id)""").fetchall() == [(0,)]


@pytest.mark.parametrize("before", ["DROP TABLE otlp_pending", "ALTER TABLE otlp_pending DROP COLUMN day"])
def test_a_database_from_before_the_pending_table_or_its_days_assembles_what_waited(con, tmp_path, before):
    write(tmp_path / "a.jsonl", [line(request_spans(1)[1:]), line(request_spans(2))])
    assert ingest_directory(con, tmp_path, now=AFTER).assembly.waiting == 1
    con.execute(before)  # as a database made before it
    report = ingest_directory(con, tmp_path, now=datetime(2026, 11, 11, 11, 1, tzinfo=UTC))  # no new span
    assert report.assembly.ingested == 1 and report.assembly.partial == 1 and report.assembly.waiting == 0
    assert [t[0] for t in traces(con)] == [trace_hex(1), trace_hex(2)]
    assert con.execute("SELECT count(*) FROM otlp_pending").fetchall() == [(0,)]


@pytest.fixture(scope="module")
def bare():
    """A database with nothing in it, for expressions alone (a connection costs more than one)."""
    with duckdb.connect() as connection:
        yield connection


@settings(max_examples=50, deadline=None)
@given(start=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)))
def test_a_span_is_on_the_utc_day_it_started_and_any_start_has_a_day(bare, start):
    (day,) = bare.execute(f"SELECT {span_day('$start::BIGINT')}", {"start": start}).fetchall()[0]
    instant = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=(start or 0) // 1000)
    assert day == instant.date() or start is not None and start < 0  # before 1970: a day, not an error


def test_the_summary_counts_the_traces_still_waiting_for_their_root(tmp_path, capsys):
    """Trace 2 waits for its root; trace 3, assembled without it after the grace period, waits
    again for a late span's grace period: pending, but not waiting for its first assembly."""
    from rag_loop.reporting.summary import print_summary
    later, two_hours = AFTER + timedelta(hours=2), 2 * 3_600_000
    second, third = request_spans(2), request_spans(3)
    write(tmp_path / "traces" / "a.jsonl", [line(request_spans(1)), line([shifted(s, two_hours) for s in second[1:]]),
                                            line(third[1:])])
    with duckdb.connect(str(tmp_path / "db.duckdb")) as con:
        assert ingest_directory(con, tmp_path / "traces", now=later).assembly.ingested == 2
        write(tmp_path / "traces" / "b.jsonl", [line([shifted(third[1], two_hours) | {"spanId": f"{3:08x}{9:08x}"}])])
        assert ingest_directory(con, tmp_path / "traces", now=later).assembly.waiting == 2  # trace 3 pending again
    print_summary(str(tmp_path / "db.duckdb"))
    states = capsys.readouterr().out.split("OTLP trace ids by state")[1]
    rows = {cells[0]: cells[1:] for cells in (
        [c.strip() for c in row.strip("│").split("│")] for row in states.splitlines() if row.startswith("│"))}
    assert rows["ingested"] == ["1", "1"] and rows["waiting"] == ["1", "NULL"]
