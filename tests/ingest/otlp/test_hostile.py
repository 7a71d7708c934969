"""Property-based: hostile OTLP files never crash ingestion, never block good spans, and every
span read is accounted for exactly once (stored, repeated or quarantined)."""

import json
from datetime import UTC, datetime

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_loop.ingest import ingest_directory
from tests.helpers import misplaced_child_rows
from tests.helpers.otlp import SPAN_KEYS, hostile_span, json_values, line, request_spans

NOW = datetime(2026, 11, 11, 10, 30, tzinfo=UTC)
@st.composite
def hostile_files(draw):
    """Files of lines; each line a batch of good spans (unique ids) and hostile ones, or garbage."""
    files, good, hostile = [], [], 0
    trace = 100
    for _ in range(draw(st.integers(1, 3))):
        lines = []
        for _ in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["batch", "batch", "garbage", "deep", "json"]))
            if kind == "garbage":
                lines.append(draw(st.text(max_size=40)).replace("\n", " ").replace("\r", " "))
            elif kind == "deep":
                lines.append("[" * 3000 + "]" * 3000)
            elif kind == "json":
                lines.append(json.dumps(draw(json_values)))
            else:
                spans = []
                for _ in range(draw(st.integers(0, 3))):
                    trace += 1
                    spans += request_spans(trace)
                    good.append(trace)
                bad = [draw(hostile_span(1 + draw(st.integers(0, 5)))) for _ in range(draw(st.integers(0, 3)))]
                hostile += len(bad)
                lines.append(line(draw(st.permutations(spans + bad))))
        files.append(lines)
    return files, good, hostile


def _every_hostile_part() -> tuple[list[list[str]], list[int], int]:
    """hostile_files' shapes in one case: each span key given each kind of JSON value or
    dropped, attributes with odd values, good traces beside them and alone, garbage, a deep
    line and bare JSON, over two files."""
    odd = [None, [], {"x": 1}, "", 2**70, float("nan"), -1.5, True]
    bad = [dict(request_spans(1 + n % 6)[n % 3], **{key: odd[n % len(odd)]}) for n, key in enumerate(SPAN_KEYS * 2)]
    bad += [{k: v for k, v in request_spans(1 + n)[n % 3].items() if k != key} for n, key in enumerate(SPAN_KEYS[:6])]
    bad += [dict(request_spans(5)[1], attributes=request_spans(5)[1]["attributes"] + [{"key": key, "value": value}])
            for key, value in (("", None), ("k", {"intValue": "x"}), ("é", {"arrayValue": [1]}),
                               ("v", {"stringValue": {"a": None}}))]
    first = [*request_spans(101), *bad[:12], *request_spans(102)]
    files = [[line(first), "{oops ", "[" * 3000 + "]" * 3000, json.dumps([1, {"a": None}])],
             [line(bad[12:] + request_spans(103)), line([]), line(request_spans(104))]]
    return files, [101, 102, 103, 104], len(bad)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(hostile_files())
@example(_every_hostile_part())
def test_hostile_otlp_files(tmp_path_factory, emptied, case):
    files, good, hostile = case
    directory = tmp_path_factory.mktemp("otlp")
    for n, lines in enumerate(files):
        (directory / f"f{n}.jsonl").write_text("".join(text + "\n" for text in lines))
    con = emptied("otlp")
    report = ingest_directory(con, directory, now=NOW)
    spans = report.spans()
    stored = {t for (t,) in con.execute("SELECT trace_id FROM raw_traces").fetchall()}
    assert {f"{t:032x}" for t in good} <= stored  # no hostile neighbour blocks a good trace
    assert spans.ingested == con.execute("SELECT count(*) FROM otlp_spans").fetchall()[0][0]
    assert misplaced_child_rows(con) == []  # an assembled trace's rows carry its day
    assert spans.ingested + spans.duplicates + spans.quarantined >= 3 * len(good) + hostile
    assert spans.quarantined == con.execute(
        "SELECT count(*) FROM quarantine WHERE format = 'otlp'").fetchall()[0][0]
    states = dict(con.execute("SELECT state, count(*) FROM otlp_traces GROUP BY 1").fetchall())
    assert states.get("ingested", 0) == len(stored) == report.assembly.ingested
    assert len(con.execute("SELECT DISTINCT trace_id FROM otlp_spans").fetchall()) == \
        sum(states.values()) + report.assembly.waiting
    before = [con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
              for t in ("raw_traces", "trace_chunks", "otlp_spans", "quarantine", "trace_duplicates")]
    again = ingest_directory(con, directory, now=NOW)  # idempotent
    assert again.spans().ingested == again.assembly.ingested == 0
    assert before == [con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                      for t in ("raw_traces", "trace_chunks", "otlp_spans", "quarantine",
                                "trace_duplicates")]
