"""Golden coverage on Spark (issue 48: it is traffic-sized): the day's traffic and the sampled
candidates' counts come from one Ibis definition (rag_loop.goldens.coverage_expressions), and on
the demo world's ERR-PAY-977 surge day Spark over the trace lake gives DuckDB's coverage — every
figure of the summary and of the intents, floats within 1e-12."""

from datetime import date, timedelta

import pandas as pd
import pytest

from rag_loop.engines.engine import SparkEngine
from rag_loop.goldens import coverage
from rag_loop.goldens.coverage import (
    CoverageSettings,
    GoldenSet,
    coverage_of_day,
    day_traffic,
    sampled_traces,
    verdict,
)
from rag_loop.store.deployment import migrate
from rag_loop.store.lake import Lake
from tests.engines.conftest import needs_spark
from tests.helpers import demo_copy

pytestmark = [needs_spark, pytest.mark.slow]
SURGE = date(2026, 11, 12)


def test_coverage_on_spark_is_duckdbs_on_the_demo_world(spark, demo_run, tmp_path, monkeypatch):
    con = demo_copy(demo_run, tmp_path)
    # a release holding a golden of the five largest intents (by their candidates)
    rows = con.execute("""SELECT 'g-' || cluster_id, min(trace_id), cluster_id FROM trace_clusters
                          GROUP BY cluster_id ORDER BY count(*) DESC, cluster_id LIMIT 5""").fetchall()
    release = GoldenSet("v0001", pd.DataFrame(rows, columns=["golden", "trace_id", "cluster_id"]))
    # curators' labels decide before the judge: two of the surge's candidates, one failing
    labelled = [r[0] for r in con.execute("""SELECT c.trace_id FROM failure_candidates c JOIN raw_traces t
        USING (trace_id) WHERE t.original_query ILIKE '%977%' ORDER BY c.trace_id LIMIT 2""").fetchall()]
    for label, (trace_id, failure_type) in enumerate(zip(labelled, ("retrieval", "none"))):
        con.execute("INSERT INTO curated_labels (label_id, trace_id, decision, labeled_at, failure_type, origin, "
                    "expected_output, expected_sources, tags, source_trace_ids, curator, input) VALUES "
                    "(?, ?, 'accept', '2026-11-20 10:00+00', ?, 'production_failure', 'x', [], [], [?], 'ann', 'q')",
                    [f"l{label}", trace_id, failure_type, trace_id])
    assert con.execute("SELECT count(*) FROM current_labels").fetchall() == [(2,)]
    on_database = coverage_of_day(con, SURGE, release)
    summary, intents = on_database.summary, on_database.intents
    overall = summary[summary["slice"] == "all"].iloc[0]
    assert overall["traffic"] > 300 and overall["n"] > 100 and 0 < overall["covered_share"] < 1
    assert intents["rising"].eq(True).any() and intents["covered"].eq(True).any()  # the surge; the release
    assert set(summary["slice"]) == {"all", "language", "tenant", "query_type"}
    migrate(con, Lake.of(tmp_path / "lake"), "lake")  # the deployment becomes lake-backed
    read = {}  # the traffic-sized reads coverage_of_day makes on Spark, each computed there once

    def kept(function):
        def call(*args, **kwargs):
            read[function.__name__] = function(*args, **kwargs)
            return read[function.__name__]
        return call
    for function in (day_traffic, sampled_traces):
        monkeypatch.setattr(coverage, function.__name__, kept(function))
    on_spark = coverage_of_day(con, SURGE, release, engine=SparkEngine(spark, tmp_path / "lake"))
    monkeypatch.undo()
    pd.testing.assert_frame_equal(read["day_traffic"], day_traffic(con, SURGE))
    pd.testing.assert_frame_equal(read["sampled_traces"], sampled_traces(con, SURGE - timedelta(days=7), SURGE),
                                  check_exact=False, rtol=1e-12, atol=1e-12)
    for mine, theirs in ((on_spark.summary, summary), (on_spark.intents, intents)):
        pd.testing.assert_frame_equal(mine, theirs, check_exact=False, rtol=1e-12, atol=1e-12)
    checked = [verdict(result, CoverageSettings()) for result in (on_spark, on_database)]
    assert [(v.fired, v.n, v.note) for v in checked[:1]] == [(v.fired, v.n, v.note) for v in checked[1:]]
    assert checked[0].value == pytest.approx(checked[1].value, abs=1e-12)
