"""The dashboard's figures per day on a small database (tests/dashboard/world.py)."""

import json

import duckdb
import pytest

from rag_loop.online.quality import OnlineQualitySettings
from rag_loop.reporting.dashboard_figures import DASHBOARD_FILE, dashboard_figures, write_dashboard
from rag_loop.store.tables import create_tables
from tests.dashboard.world import DAYS, HOSTILE, build

SETTINGS = OnlineQualitySettings(slo_targets={"Faithfulness": 0.9, "Answer Relevancy": 0.6}, min_sample=20)
ALERT = {"day": "2026-11-10", "asset": "query_mix", "check": "query_mix_divergence", "severity": "WARN",
         "note": "0.2 > 0.1"}


@pytest.fixture(scope="module")
def world():
    """The small world, built once for the module: its tests only read it."""
    con = duckdb.connect()
    build(con)
    yield con
    con.close()


@pytest.fixture(scope="module")
def figures(world):
    """The world's figures with an alert and drift checked, computed once (~1 CPU-s)."""
    return dashboard_figures(world, SETTINGS, [ALERT], drift_checked=True)


def test_each_layer_per_day(world, figures):
    assert (figures["first_day"], figures["last_day"]) == ("2026-11-01", "2026-11-14")
    traffic = figures["product"]["traffic"]
    assert [r["requests"] for r in traffic] == [40 + 3 * d for d in range(DAYS)]
    assert traffic[0]["fallbacks"] == 4 and traffic[0]["failed"] == 3  # i % 13, i % 17 of 0..39
    first = figures["product"]["feedback"][0]
    assert (first["feedback"], first["thumbs_down"], first["thumbs_up"]) == (5, 2, 3)  # i = 0, 9, ... 36
    assert first["thumbs_down_rate"] == pytest.approx(2 / 40)

    quality = figures["quality"]
    judged = world.execute("""SELECT day::VARCHAR, metric, count(*), avg(passed::INT) FROM trace_judgments
                              GROUP BY ALL ORDER BY ALL""").fetchall()
    assert [(r["day"], r["metric"], r["n"]) for r in quality["pass_rates"]] == [j[:3] for j in judged]
    assert [r["pass_rate"] for r in quality["pass_rates"]] == pytest.approx([j[3] for j in judged])
    assert all(r["ci_low"] <= r["pass_rate"] <= r["ci_high"] for r in quality["pass_rates"])
    # the SLO's verdict per judged day: the online_slo check's, over the window ending on it
    assert [s["day"] for s in quality["slo"]] == sorted({j[0] for j in judged})
    assert {s["state"] for s in quality["slo"]} <= {"met", "WARN", "ERROR", "not evaluated"}
    assert any(s["state"] in ("WARN", "ERROR") for s in quality["slo"])
    # by slice: the random stream's passes and n over the window, added up
    en = next(s for s in quality["slices"] if s["slice_value"] == "en" and s["metric"] == "Faithfulness")
    n, passes = world.execute("""SELECT count(*), sum(passed::INT) FROM trace_judgments j JOIN trace_signals s
                                 USING (trace_id) WHERE s.language = 'en' AND metric = 'Faithfulness'
                                 AND j.day >= DATE '2026-11-08'""").fetchall()[0]
    assert (en["n"], en["pass_rate"], en["target"]) == (n, pytest.approx(passes / n), 0.9)
    assert en["ci_low"] < en["pass_rate"] < en["ci_high"]

    performance = figures["performance"]
    assert len(performance["days"]) == DAYS and performance["days"][0]["app_cost_usd"] == pytest.approx(0.08)
    assert performance["days"][0]["latency_p50_ms"] < performance["days"][0]["latency_p95_ms"]
    assert [r["day"] for r in performance["eval_cost"]] == sorted({j[0] for j in judged})

    change = figures["change"]
    assert {(v["kind"], v["version"], v["day"]) for v in change["versions"]} == {
        ("rag_version", "rag-1", "2026-11-01"), ("index_version", "idx-1", "2026-11-01"),
        ("prompt_version", "p1", "2026-11-01"), ("prompt_version", HOSTILE, "2026-11-08")}
    assert change["alerts"] == [ALERT] and change["drift_checked"]
    assert [r["version"] for r in change["releases"]] == ["v0001"]
    assert [(e["run_id"], e["blocked"]) for e in change["evals"]] == [("eval-a", False), ("eval-b", True)]


def test_written_whole_as_json(figures, tmp_path):
    path = write_dashboard(figures, tmp_path / "reports")
    assert path.name == DASHBOARD_FILE and [p.name for p in path.parent.iterdir()] == [DASHBOARD_FILE]
    assert json.loads(path.read_text())["product"]["traffic"][0]["day"] == "2026-11-01"


def test_a_database_without_traffic_has_empty_layers(tmp_path):
    con = duckdb.connect()
    create_tables(con)
    figures = dashboard_figures(con, SETTINGS)
    assert figures["first_day"] is None and figures["product"] == {"traffic": [], "feedback": []}
    assert figures["quality"]["pass_rates"] == [] and figures["quality"]["slo"] == []
    assert figures["performance"] == {"days": [], "eval_cost": []}
    assert figures["change"] == {"versions": [], "alerts": [], "releases": [], "evals": [], "drift_checked": False}
    json.dumps(figures)
