"""One bad file never blocks the others: odd names, unreadable files, links, reader crashes."""

import json
import os

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import rag_loop.ingest.pipeline as pipeline
from rag_loop.ingest import ingest_directory
from tests.helpers import trace_line


def stored(con) -> set[str]:
    return {t for (t,) in con.execute("SELECT trace_id FROM raw_traces").fetchall()}


def test_a_file_name_that_is_not_utf8_is_read_and_named_readably(con, tmp_path):
    os.makedirs(tmp_path / "d")
    with open(os.path.join(os.fsencode(tmp_path / "d"), b"caf\xe9.jsonl"), "w") as handle:
        handle.write(trace_line("a") + "\n" + trace_line("b") + "\n")
    (tmp_path / "d" / "next.jsonl").write_text(trace_line("c") + "\n")
    report = ingest_directory(con, tmp_path / "d")
    assert stored(con) == {"a", "b", "c"}
    assert sorted(f.path for f in report.files) == ["caf\\xe9.jsonl", "next.jsonl"]
    assert ingest_directory(con, tmp_path / "d").total().ingested == 0  # known by that name


def test_a_file_name_duckdb_would_read_as_a_glob_is_read_alone(con, tmp_path):
    """`?`, `*`, `[` and `{` are wildcards to DuckDB's readers: a file so named is read by the
    exact reader, its own lines only, never its siblings' too (each trace once, from its file)."""
    names = {"?.jsonl": "q", "*.jsonl": "star", "[ab].jsonl": "set", "{a,b}.jsonl": "brace", "a.jsonl": "a",
             "b.jsonl": "b"}
    for name, trace_id in names.items():
        (tmp_path / name).write_text(trace_line(trace_id) + "\n")
    report = ingest_directory(con, tmp_path)
    assert {f.path: f.counts.ingested for f in report.files} == dict.fromkeys(names, 1)
    assert dict(con.execute("SELECT source_file, trace_id FROM raw_traces").fetchall()) == names
    assert con.execute("SELECT count(*) FROM trace_duplicates").fetchall() == [(0,)]


def test_a_reader_crash_quarantines_that_file_and_the_run_goes_on(con, tmp_path, monkeypatch):
    (tmp_path / "a.jsonl").write_text(trace_line("a") + "\n")
    (tmp_path / "b.jsonl").write_text(trace_line("b") + "\n")
    real_load = pipeline._load

    def crashing(con, fmt, reader, path, *args):
        if path.name == "a.jsonl":
            raise RecursionError("maximum recursion depth exceeded")
        return real_load(con, fmt, reader, path, *args)
    monkeypatch.setattr(pipeline, "_load", crashing)
    report = ingest_directory(con, tmp_path)
    assert stored(con) == {"b"}
    assert con.execute("SELECT source_file, line_no, reason FROM quarantine").fetchall() == [
        ("a.jsonl", 0, "unreadable_file: RecursionError('maximum recursion depth exceeded')")]
    assert [f.reader for f in report.files] == ["none", "read_json"]
    con.execute("BEGIN")  # no transaction was left open
    con.execute("ROLLBACK")


def test_a_file_that_cannot_be_opened_is_tried_again_once_it_can(con, tmp_path, monkeypatch):
    (tmp_path / "locked.jsonl").write_text(trace_line("x") + "\n")
    real_detect = pipeline.detect_format

    def no_permission(path, *args):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(pipeline, "detect_format", no_permission)  # root ignores chmod 000
    ingest_directory(con, tmp_path)
    ingest_directory(con, tmp_path)
    assert con.execute("SELECT count(*) FROM quarantine WHERE reason LIKE 'unreadable_file%'"
                       ).fetchall() == [(1,)]
    monkeypatch.setattr(pipeline, "detect_format", real_detect)  # the permission is fixed
    ingest_directory(con, tmp_path)
    assert stored(con) == {"x"}
    assert con.execute("SELECT count(*) FROM quarantine").fetchall() == [(0,)]


def test_links_that_lead_nowhere_are_listed_not_lost(con, tmp_path):
    (tmp_path / "good.jsonl").write_text(trace_line("g") + "\n")
    os.symlink(tmp_path / "loop.jsonl", tmp_path / "loop.jsonl")
    os.symlink(tmp_path / "missing.jsonl", tmp_path / "dangling.jsonl")
    report = ingest_directory(con, tmp_path)
    assert stored(con) == {"g"}
    assert sorted(report.ignored) == ["dangling.jsonl: not a regular file",
                                      "loop.jsonl: not a regular file"]


names = st.binary(min_size=1, max_size=12).filter(
    lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b".."))
contents = st.lists(st.one_of(st.sampled_from(["good", "blank", "garbage", "deep", "cr"]),
                              st.binary(max_size=30)), max_size=6)


# the strategy's shapes in every run: a hidden name, names not UTF-8, with spaces, a glob and a
# byte order mark, an empty file; each kind of line, raw bytes not UTF-8, a gzip magic opening a
# file, a bare carriage return, good lines after bad ones
EVERY_KIND = {b".hidden": ["good"], b"caf\xe9 *?[": ["garbage", "good", b"\xff\xfe", "blank", "good"],
              b"\xef\xbb\xbfbom": [b"\xef\xbb\xbf", "cr", "good", "deep"], b"empty": [],
              b"\x1f\x8bgz": [b"\x1f\x8b\x08", "good"], b"r\r": [b"\r", b"{", "good", b"\x1f", b"\x00\x00"]}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.dictionaries(names, contents, min_size=1, max_size=4))
@example(files=EVERY_KIND)
def test_hostile_directories_never_stop_a_run(tmp_path_factory, emptied, files):
    directory = tmp_path_factory.mktemp("d")
    good: dict[str, set[str]] = {}  # file as reported -> the good traces in it
    for n, (name, lines) in enumerate(files.items()):
        body, shown = b"", (name + b".jsonl").decode("utf-8", "backslashreplace")
        good[shown] = set()
        for i, kind in enumerate(lines):
            if kind == "good":
                good[shown].add(f"t{n}-{i}")
                body += trace_line(f"t{n}-{i}").encode() + b"\n"
            elif isinstance(kind, bytes):
                body += kind + b"\n"
            else:
                body += {"blank": b"\n", "garbage": b"{oops\n", "deep": b"[" * 3000 + b"\n",
                         "cr": b'{"a": 1}\r\n'}[kind]
        with open(os.path.join(os.fsencode(directory), name + b".jsonl"), "wb") as handle:
            handle.write(body)
    con = emptied("hostile")
    report = ingest_directory(con, directory)
    kept = stored(con)
    read = {f.path: f for f in report.files}
    hidden = {i.removesuffix(": hidden") for i in report.ignored if i.endswith(": hidden")}
    assert set(read) | hidden == set(good)  # every file read, or listed with why not
    for path, file_report in read.items():
        if file_report.reader != "none":  # read: every good record stored
            assert good[path] <= kept, (path, file_report)
    records = con.execute("SELECT count(*) FROM quarantine").fetchall()[0][0] + len(kept)
    assert records >= sum(len(good[p]) for p in read)


def test_an_export_line_whose_span_holds_a_trace_id_key_is_read_as_otlp(tmp_path):
    """A hostile span (`"traceId": {"trace_id": null}`) puts a native record's key inside an
    OTLP export line: the line is still an export, so the file is OTLP (found by hypothesis in
    tests/ingest/otlp/test_hostile.py), while a native record stays native."""
    span = {"traceId": {"trace_id": None}, "spanId": "0000000100000001", "name": "chain"}
    export = json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]})
    (tmp_path / "spans.jsonl").write_text(export + "\n")
    (tmp_path / "native.jsonl").write_text(json.dumps({"trace_id": "t", "query": "resourceSpans"}) + "\n")
    assert pipeline.detect_format(tmp_path / "spans.jsonl") == "otlp"
    assert pipeline.detect_format(tmp_path / "native.jsonl") == "native"
