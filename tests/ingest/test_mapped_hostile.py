"""Property-based: random records through random mappings never stop ingestion; every record
ends stored once, as a duplicate, or quarantined, and a record the mapping failed on names the
field and its path."""

import json
import re

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_loop.ingest import ingest_directory
from rag_loop.ingest.field_map import load_mapping
from tests.helpers import line_verdicts

KEYS = ["id", "ts", "q", "a", "n", "ctx", "meta"]
scalars = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats()
           | st.text(max_size=8) | st.sampled_from(["2026-11-01T00:00:00Z", "1764547200000", "", "\u200b", "%"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3), max_leaves=6)
records = st.dictionaries(st.sampled_from(KEYS), values, max_size=6) | values
paths = st.sampled_from(["id", "ts", "q", "a", "n", "meta.id", "ctx[0]", "ctx[*].a", "@", "meta", "missing",
                         "ctx", "`\"constant\"`", "length(q)"])
OPTIONAL = ["answer", "latency_ms", "session_id", "turn_id", "is_fallback", "tenant", "language", "citations",
            "filters", "cost_usd"]


@st.composite
def specs(draw, name: str):
    spec: dict = {"path": draw(paths)}
    if draw(st.booleans()):
        spec["type"] = draw(st.sampled_from(["string", "int", "float", "bool", "json"]))
    if name == "timestamp":
        spec["format"] = draw(st.sampled_from(["iso", "epoch_ms", "epoch_s", "%Y-%m-%d"]))
    if draw(st.integers(0, 5)) == 0:
        return {"value": draw(scalars)}
    return spec


@st.composite
def mappings(draw) -> dict:
    fields = {name: draw(specs(name)) for name in ("trace_id", "timestamp", "original_query")}
    for name in draw(st.lists(st.sampled_from(OPTIONAL), max_size=4, unique=True)):
        fields[name] = draw(specs(name))
    if draw(st.booleans()):
        fields["chunks"] = {"path": draw(paths), "each": {"doc_id": draw(specs("doc_id")),
                                                         "score": draw(specs("score")),
                                                         "rank": {"position": True}}}
    if draw(st.booleans()):
        fields["feedback"] = {"fields": {"rating": draw(specs("rating"))}}
    return {"fields": fields}


# the strategy's shapes in every run: each kind of path (projection, function, literal, @, index),
# each type, a strftime format, a constant, chunks by position, feedback; records that
# fit, that do not, bare values and the odd lines
EVERY_KIND = {"fields": {
    "trace_id": {"path": "id", "type": "string"}, "timestamp": {"path": "ts", "format": "%Y-%m-%d"},
    "original_query": {"path": "q", "type": "string"}, "answer": {"path": "length(q)", "type": "string"},
    "latency_ms": {"path": "n", "type": "float"}, "turn_id": {"path": "n", "type": "int"},
    "is_fallback": {"path": "a", "type": "bool"}, "tenant": {"value": "acme"},
    "language": {"path": '`"constant"`'}, "filters": {"path": "@"}, "citations": {"path": "ctx[*].a"},
    "cost_usd": {"path": "missing", "type": "float"}, "session_id": {"path": "meta.id"},
    "chunks": {"path": "ctx", "each": {"doc_id": {"path": "a"}, "score": {"path": "n", "type": "float"},
                                       "rank": {"position": True}}},
    "feedback": {"fields": {"rating": {"path": "a", "type": "string"}}}}}
EVERY_ROW = [{"id": "t1", "ts": "2026-11-01", "q": "why", "n": 2, "a": True, "meta": {"id": "s"},
              "ctx": [{"a": "d", "n": 0.5}, {"a": "e"}]},
             {"id": "t1", "ts": "2026-11-01", "q": "again"}, {"id": 7, "ts": "1764547200000", "q": "x", "n": "fast"},
             {"ts": "2026-11-02", "q": ""}, {"id": "t2", "ts": None, "ctx": {"a": 1}, "a": [1]}, [1, 2], "a text",
             None, 5, "", "not json", "[1,"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(mapping=mappings(), rows=st.lists(records | st.sampled_from(["", "not json", "[1,"]), min_size=1, max_size=8))
@example(mapping=EVERY_KIND, rows=EVERY_ROW)
def test_random_records_through_random_mappings_end_once_each(tmp_path_factory, emptied, mapping, rows):
    folder = tmp_path_factory.mktemp("mapped")
    (folder / "rag-loop-mapping.yaml").write_text(yaml.safe_dump(mapping))
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    (folder / "log.jsonl").write_text("\n".join(lines) + "\n")
    con = emptied("mapped")
    report = ingest_directory(con, folder)
    found = line_verdicts(con)
    paths_of = load_mapping(folder / "rag-loop-mapping.yaml").paths()
    assert [f.reader for f in report.files] == ["mapping"]
    assert set(found) == {n for n, line in enumerate(lines, start=1) if line.strip()}
    for verdict in found.values():
        failed = re.match(r"mapping_failed: (\S+) \(path '(.*?)'\)", verdict)
        if failed:  # the field and the path it was read from
            target, where = failed.groups()
            listed = mapping["fields"].get(target, {}).get("path", "")  # a list or object field itself
            assert where == paths_of.get(target, listed), verdict
