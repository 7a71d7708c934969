"""The SQL path of mapped ingestion (rag_loop.ingest.mapped_sql) against the Python path
(`map_record` per record): random simple mappings over random JSONL lines store the same
traces, chunks, spans, feedback, duplicates, quarantine rows (reasons with field and path, raw
text) and mapping coverage; which mappings compile to SQL."""

import gzip
import json

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from rag_loop.ingest import ingest_directory, mapped
from rag_loop.ingest.field_map import FieldMap
from rag_loop.ingest.mapped_sql import sql_mapping

KEYS = ["id", "ts", "q", "a", "n", "ctx", "meta", "a.b", "Q"]
scalars = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6)
           | st.sampled_from(["2026-11-01T00:00:00Z", "1764547200000", "1764547200", "", " 12 ", "-0", "1e5",
                              "true", " No ", "yes", "OK", "ERROR", "x\u00e9\"", "\u200b", "%", "1.5", "0x10",
                              "[1, 2]", '{"k": 1}', "null", "٣"])
           | st.sampled_from([0, 1, -1, 1764547200000, 1764547200123456789, 1764547200123456000, 2**63, 1.0, 1e16,
                              1e300, 0.1, -0.0, 2.5]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4), max_leaves=8)
times = st.sampled_from(["2026-11-01T00:00:00Z", "2026-11-01T08:30:00+07:00", "2026-11-01", 1764547200000,
                         1764547200, 1764547200123456, 1764547200123456000, 1764547200123456789, "1764547200000",
                         "1764547200", 0, -5, 2**62, "yesterday", 1764547200.5])
texts = st.text(min_size=1, max_size=8) | st.sampled_from(["How many leave days?", "Nghỉ phép?", "x", " "])
element = st.fixed_dictionaries({}, optional={"a": scalars, "id": texts | scalars, "n": scalars, "q": texts,
                                              "ts": times, "a.b": scalars, "ctx": st.lists(scalars, max_size=2)})
good = st.fixed_dictionaries(
    {"id": st.sampled_from(["t1", "t2", "t3", "t4"]) | texts, "ts": times, "q": texts},
    optional={"a": scalars, "n": scalars, "Q": texts | scalars, "a.b": scalars,
              "ctx": st.lists(element | scalars, max_size=3),
              "meta": st.fixed_dictionaries({}, optional={"id": texts, "q": scalars, "n": values,
                                                          "ctx": st.lists(element, max_size=3)})})
records = good | st.dictionaries(st.sampled_from(KEYS), values, max_size=7)
ODD_LINES = ["", "   ", "not json", "[1,]", '{"id": "x", "q": "y", "ts": "2026-01-01T00:00:00Z",}',
             '{"id": "x", "q": "nan", "ts": nan}', '{"id": "d", "id": "e", "q": "q", "ts": "2026-01-01T00:00:00Z"}',
             '{"id": "i", "q": "q", "ts": "2026-01-01T00:00:00Z", "n": NaN}', "[" * 300 + "]" * 300,
             '{"id": "deep", "q": "q", "ts": "2026-01-01T00:00:00Z", "n": ' + "[" * 250 + "]" * 250 + "}",
             "\ufeff{}", '"a string"', "5", '{"id": "big", "q": "q", "ts": 1e400}', "{\"id\": \"t\"}\t",
             '{"id": "x", "ctx": [{"a": 1}, {"a": 2}], "q": "w", "ts": "2026-01-01T00:00:00Z"}']
PATHS = ["id", "ts", "q", "a", "n", "Q", "meta.id", "meta.q", "ctx[0]", "ctx[-1]", "ctx[0].a", "@", "meta",
         "missing", "ctx", '"a.b"', "meta.n.a", "n[1]"]
ELEMENT_PATHS = ["a", "id", "n", "q", '"a.b"', "meta.id", "ctx[0]", "ts"]
TAME = {"answer": "q", "latency_ms": "n", "session_id": "meta.id", "turn_id": {"path": "n", "type": "int"},
        "is_fallback": {"path": "a", "type": "bool"}, "tenant": {"value": "acme"}, "language": "Q",
        "status": {"path": "Q", "values": {"OK": "ok", "ERROR": None}}, "input_tokens": "n",
        "temperature": {"path": "a", "type": "float"}, "citations": "meta.n", "cost_usd": "n"}
OPTIONAL = ["answer", "latency_ms", "session_id", "turn_id", "is_fallback", "tenant", "language", "citations",
            "filters", "cost_usd", "status", "input_tokens", "temperature"]
TYPES = ["string", "int", "float", "bool", "json"]
EPOCHS = ["epoch_ms", "epoch_s", "epoch_us", "epoch_ns"]


@st.composite
def specs(draw, name: str, paths: list[str], element: bool = False) -> dict:
    if draw(st.integers(0, 6)) == 0:
        return {"value": draw(scalars)}
    if element and draw(st.integers(0, 4)) == 0:
        spec: dict = {"position": True}
    else:
        spec = {"path": draw(st.sampled_from(paths))}
    if draw(st.booleans()):
        spec["type"] = draw(st.sampled_from(TYPES))
    if name in ("timestamp", "start_time") or draw(st.integers(0, 8)) == 0:
        spec["format"] = draw(st.sampled_from(["iso", *EPOCHS]))
    if draw(st.integers(0, 4)) == 0:
        spec["values"] = draw(st.dictionaries(st.sampled_from(["OK", "ERROR", "true", "1", "-0", "yes", "x"]),
                                              st.none() | st.sampled_from(["ok", "error", 7, True, "1764547200"]),
                                              max_size=3))
    if draw(st.integers(0, 6)) == 0:
        spec["hash"] = True
    return spec


@st.composite
def mappings(draw) -> dict:
    fields = {name: draw(specs(name, PATHS)) for name in ("trace_id", "timestamp", "original_query")}
    tame = draw(st.integers(0, 3)) > 0  # mostly paths that give a trace: then the SQL stores what it maps
    if tame:
        fields["trace_id"] = draw(st.sampled_from(["id", "id", "meta.id", {"path": "id", "hash": True}]))
        fields["timestamp"] = {"path": "ts", "format": draw(st.sampled_from(["iso", *EPOCHS]))}
        fields["original_query"] = draw(st.sampled_from(["q", "q", "meta.id", {"path": "q", "type": "string"}]))
    for name in draw(st.lists(st.sampled_from(OPTIONAL), max_size=5, unique=True)):
        fields[name] = draw(specs(name, PATHS))
        if tame and name in TAME and draw(st.booleans()):
            fields[name] = TAME[name]
    if draw(st.booleans()):
        fields["chunks"] = {"path": draw(st.sampled_from(["ctx", "meta.ctx", "n", "missing"])), "each": {
            "doc_id": draw(specs("doc_id", ELEMENT_PATHS, True)), "score": draw(specs("score", ELEMENT_PATHS, True)),
            "rank": draw(specs("rank", ELEMENT_PATHS, True)), "text": draw(specs("text", ELEMENT_PATHS, True))}}
    if draw(st.booleans()):
        fields["spans"] = {"path": draw(st.sampled_from(["ctx", "meta"])), "each": {
            "name": draw(specs("name", ELEMENT_PATHS, True)),
            "start_time": draw(specs("start_time", ELEMENT_PATHS, True))}}
    if draw(st.booleans()):
        feedback: dict = {"fields": {"rating": draw(specs("rating", ["a", "q", "id", "n"])),
                                     "comment": draw(specs("comment", ["a", "q"]))}}
        if draw(st.booleans()):
            feedback["path"] = draw(st.sampled_from(["meta", "ctx[0]", "missing"]))
        fields["feedback"] = feedback
    return {"fields": fields}


TABLES = {"raw_traces": "ingested_at", "trace_chunks": "", "trace_spans": "", "trace_feedback": "",
          "trace_duplicates": "seen_at", "quarantine": "quarantined_at", "mapping_coverage": "ingested_at"}


def stored(folder, monkeypatch, emptied, python: bool, **options) -> dict[str, list]:
    """Every row the ingestion of `folder` into an emptied database writes, by table (times of
    ingestion aside)."""
    with monkeypatch.context() as patch:
        if python:
            patch.setattr(mapped, "sql_mapping", lambda spec: None)
        con = emptied("python" if python else "sql")
        ingest_directory(con, folder, **options)
        return {table: sorted(map(repr, con.execute(
            f"SELECT * {f'EXCLUDE ({drop})' if drop else ''} FROM {table}").fetchall()))
            for table, drop in TABLES.items()}


@st.composite
def cases(draw) -> tuple[dict, list]:
    """A mapping and lines for it: records mostly with instants in its timestamp format."""
    mapping = draw(mappings())
    fmt = mapping["fields"]["timestamp"].get("format") if isinstance(mapping["fields"]["timestamp"], dict) else None
    instants = st.sampled_from(INSTANTS.get(fmt, [])) if INSTANTS.get(fmt) else times
    consistent = st.builds(lambda r, t: {**r, "ts": t}, good, instants)
    rows = draw(st.lists(st.one_of(consistent, consistent, consistent, good, records, st.sampled_from(ODD_LINES)),
                         min_size=1, max_size=10))
    return mapping, rows


INSTANTS = {"iso": ["2026-11-01T00:00:00Z", "2026-11-01T08:30:00.5+07:00", "2026-11-01 08:30"],
            "epoch_ms": [1764547200000, 1764547200123, "1764547200999", 0],
            "epoch_s": [1764547200, "1764547201", 4102444800], "epoch_us": [1764547200123456, 1764547200000001],
            "epoch_ns": [1764547200123456000, 1764547200123456789, "1764547200000000000"]}


# the strategy's shapes, kept whatever a run draws: every optional field in its tame spelling, each
# format, type, constant, value map, hash and position, lists mapped by each, feedback under a path,
# and every odd line, on records of each kind the strategy draws
TAME_ALL = {"fields": {
    "trace_id": {"path": "id", "hash": True}, "timestamp": {"path": "ts", "format": "iso"},
    "original_query": {"path": "q", "type": "string"}, **TAME,
    "temperature": {"path": "n", "type": "float"}, "filters": {"path": "meta", "type": "json"},
    "chunks": {"path": "ctx", "each": {"doc_id": {"path": "id", "type": "string"},
                                       "score": {"path": "a", "type": "float"}, "rank": {"position": True},
                                       "text": "q"}},
    "spans": {"path": "ctx", "each": {"name": "id", "start_time": {"path": "ts", "format": "iso"}}},
    "feedback": {"path": "meta", "fields": {"rating": {"path": "q", "values": {"OK": "ok", "x": None}},
                                            "comment": "a"}}}}
WILD = {"fields": {
    "trace_id": {"path": "ctx[-1]", "type": "string", "values": {"1": "one", "yes": None}},
    "timestamp": {"path": "n", "format": "epoch_ns", "type": "int"}, "original_query": {"value": "asked"},
    "turn_id": {"path": "n[1]", "type": "bool"}, "language": {"path": '"a.b"', "format": "epoch_s"},
    "latency_ms": {"path": "meta.n.a", "type": "float"}, "session_id": {"path": "meta.n.a", "type": "string"},
    "filters": {"path": "@", "type": "json"}, "answer": {"path": "n", "hash": True},
    "chunks": {"path": "meta.ctx", "each": {"doc_id": {"value": "d"}, "score": {"position": True},
                                            "rank": {"path": "ctx[0]", "type": "int"}, "text": {"path": "ts"}}},
    "feedback": {"fields": {"rating": {"path": "n", "type": "string"}, "comment": {"value": None}}}}}
GOOD = [{"id": "t1", "ts": "2026-11-01T08:30:00.5+07:00", "q": "How many leave days?", "a": True, "n": 3, "Q": "OK",
         "ctx": [{"id": "d1", "a": 1.5, "q": "w", "ts": "2026-11-01T00:00:00Z"}, {"id": "d2", "ts": "2026-11-01"}],
         "meta": {"id": "s", "q": "OK", "n": ["c1"], "ctx": [{"id": "e", "n": [1]}]}},
        {"id": "t1", "ts": "2026-11-01 08:30", "q": "Nghỉ phép?", "n": "12", "Q": "ERROR", "a": "yes"},
        {"id": "t1", "ts": "2026-11-01T00:00:00Z", "q": "again", "Q": "x", "ctx": [], "meta": {"id": "s", "n": []}},
        {"id": "t3", "ts": "2026-11-01T00:00:00Z", "q": "x\u00e9\"", "n": 0, "a": True, "Q": "OK",
         "ctx": [{"id": "d3", "q": "z", "ts": "2026-11-01T00:00:00.5Z"}], "meta": {"q": "x", "n": []}},
        {"id": "t4", "ts": "2026-11-01T00:00:00Z", "q": "q", "ctx": [{"id": "d", "a": "0.5"}, 4]},
        {"id": "t2", "ts": "yesterday", "q": " ", "n": 2**70, "a": 1e300, "meta": {"n": "x\u00e9\""}},
        {"id": 5, "ts": 0, "q": "x"}, {"q": "no id", "ts": 1764547200000}, {"meta": [1, 2], "ctx": {"a": 1}}]
WILD_ROWS = [{"n": 1764547200123456789, "ctx": ["yes", 1], "a.b": 1764547200, "meta": {"ctx": [{"a": 1}, 2]}},
             {"n": 1764547200123456000, "ctx": ["t9"], "a.b": "1764547201", "meta": {"n": {"a": "1.5"}}},
             {"n": "1764547200000000000", "ctx": ["t9", "yes"], "a.b": 4102444800, "meta": {"n": {"a": 2}}},
             {"n": [0, 1], "ctx": [{"k": 1}]}, {"n": "1764547200000000000", "ctx": [], "a.b": -0.0},
             {"n": -1.0, "ctx": ["٣"]}]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(case=cases())
@example(case=(TAME_ALL, GOOD + ODD_LINES))
@example(case=(WILD, WILD_ROWS + ODD_LINES[::-1]))
def test_the_sql_path_stores_what_the_python_path_stores(tmp_path_factory, monkeypatch, emptied, case):
    mapping, rows = case
    assume(sql_mapping(FieldMap.model_validate(mapping)) is not None)
    folder = tmp_path_factory.mktemp("mapped")
    (folder / "rag-loop-mapping.yaml").write_text(yaml.safe_dump(mapping, allow_unicode=True))
    lines = [row if isinstance(row, str) else json.dumps(row, ensure_ascii=False) for row in rows]
    (folder / "log.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert stored(folder, monkeypatch, emptied, python=False) == stored(folder, monkeypatch, emptied, python=True)


@pytest.mark.parametrize("fields, sql", [
    ({"path": "a.b"}, True), ({"path": '"attributes.input.value"'}, True), ({"path": "a[0].b[-1]"}, True),
    ({"path": "@"}, True), ({"value": "acme"}, True), ({"path": "a", "type": "int", "values": {"1": "one"}}, True),
    ({"path": "a", "format": "epoch_ns"}, True), ({"path": "a", "hash": True}, True),
    ({"path": "a[*].b"}, False), ({"path": "length(a)"}, False), ({"path": "a || b"}, False),
    ({"path": "a[?b == `1`]"}, False), ({"path": "a", "then": "b"}, False), ({"path": "a", "until": "b"}, False),
    ({"path": "a", "format": "%Y-%m-%d"}, False),
])
def test_which_mappings_take_the_sql_path(fields, sql):
    mapping = {"fields": {"trace_id": "id", "timestamp": "ts", "original_query": fields}}
    assert (sql_mapping(FieldMap.model_validate(mapping)) is not None) == sql


def test_a_key_repeated_in_a_record_keeps_its_first_value_on_both_paths(tmp_path, monkeypatch, emptied):
    (tmp_path / "rag-loop-mapping.yaml").write_text("fields: {trace_id: id, timestamp: ts, original_query: q}")
    (tmp_path / "log.jsonl").write_text('{"id": "a", "id": "b", "ts": "2026-01-01T00:00:00Z", "q": "why"}\n')
    both = [stored(tmp_path, monkeypatch, emptied, python) for python in (False, True)]
    assert both[0] == both[1] and "'a'" in both[0]["raw_traces"][0]


SHAPED = """
fields:
  trace_id: id
  timestamp: {path: at, format: epoch_ms}
  session_id: who.session
  turn_id: who.turn
  environment: {value: production}
  original_query: question
  answer: reply
  latency_ms: latency
  status: {path: outcome, values: {OK: ok}}
  chunks: {path: docs, each: {doc_id: doc, score: s, rank: {position: true}}}
  spans: {path: steps, each: {name: name, duration_ms: ms}}
  feedback: {path: feedback, fields: {rating: rating}}
"""


def _shaped_lines(count: int) -> list[str]:
    """Lines of SHAPED's log shape, one in 20 with each fault, a few trace ids repeated."""
    rng = __import__("random").Random(7)
    lines = []
    for n in range(count):
        record = {"id": f"t{rng.randrange(380)}", "at": 1764547200000 + n * 1000, "who": {"session": "s", "turn": n},
                  "question": f"q{n}", "reply": "a", "latency": rng.random() * 100, "outcome": "OK",
                  "docs": [{"doc": f"d{k}", "s": rng.random()} for k in range(rng.randrange(4))],
                  "steps": [{"name": "retrieve", "ms": 3.5}], "feedback": {"rating": "negative"} if n % 9 else None}
        fault = rng.randrange(20)
        if fault == 0:
            record["at"] = "yesterday"
        elif fault == 1:
            record["latency"] = "fast"
        elif fault == 2:
            record["docs"] = {"doc": "x"}
        elif fault == 3:
            record["who"]["turn"] = 2.5
        elif fault == 4:
            record.pop("id")
        lines.append(json.dumps(record) if fault != 5 else json.dumps(record)[:-1] + ",}")
    return lines


def test_a_log_shape_with_faults_stores_alike_and_mostly_in_sql(tmp_path, monkeypatch, emptied):
    (tmp_path / "rag-loop-mapping.yaml").write_text(SHAPED)
    (tmp_path / "log.jsonl").write_text("\n".join(_shaped_lines(400)) + "\n")
    in_sql = []
    store = mapped.store_verdicts
    monkeypatch.setattr(mapped, "store_verdicts", lambda *a, **k: in_sql.append(store(*a, **k)) or in_sql[-1])
    monkeypatch.setattr(mapped, "_line_batches", None)  # the whole file is read by DuckDB at once
    by_sql = stored(tmp_path, monkeypatch, emptied, python=False)
    assert sum(c.ingested for c in in_sql) > 150  # the rest: duplicates, faults, mapped in Python
    monkeypatch.undo()
    assert by_sql == stored(tmp_path, monkeypatch, emptied, python=True)
    assert len(by_sql["quarantine"]) > 20 and by_sql["trace_duplicates"]


OVERSIZED = b"\n" + b"x" * 3000


@pytest.mark.parametrize("odd", [b"\xef\xbb\xbf", b"\r", b"\n\xff\n", b"\x1f", OVERSIZED, "many for Python",
                                 "gzip", "cut gzip"])
def test_a_file_duckdb_cannot_read_exactly_is_mapped_in_batches_alike(tmp_path, monkeypatch, emptied, odd):
    """A byte order mark, a carriage return, a line not UTF-8, a 0x1f byte, or more lines left
    to Python than a whole file may hold: the file is mapped in batches (the line reader's
    split). A line over the size limit is not (it is quarantined as the line reader does), nor
    a gzipped file; a cut one is refused alike."""
    lines = [line.encode() for line in _shaped_lines(60)]
    if odd == "many for Python":
        monkeypatch.setattr(mapped, "WHOLE_FILE_PYTHON_LINES", 2)
    elif odd == b"\xef\xbb\xbf":
        lines[0] = odd + lines[0]
    elif isinstance(odd, bytes):
        lines[7] += odd
    (tmp_path / "rag-loop-mapping.yaml").write_text(SHAPED)
    data = b"\n".join(lines) + b"\n"
    if odd in ("gzip", "cut gzip"):
        data = gzip.compress(data)[:-30 if odd == "cut gzip" else None]
    (tmp_path / "log.jsonl").write_bytes(data)
    batches = []
    line_batches = mapped._line_batches
    monkeypatch.setattr(mapped, "_line_batches", lambda *a: batches.append(1) or line_batches(*a))
    by_sql = stored(tmp_path, monkeypatch, emptied, python=False, max_record_bytes=2000)
    assert bool(batches) == (odd not in (OVERSIZED, "gzip"))
    assert by_sql == stored(tmp_path, monkeypatch, emptied, python=True, max_record_bytes=2000)
    assert any("oversized" in row for row in by_sql["quarantine"]) == (odd == OVERSIZED)
