"""`rag-loop incident open | close | show` through click's CliRunner on the tiny world."""

import duckdb
from click.testing import CliRunner

from rag_loop.cli import main
from tests.incidents.world import tiny_world


def _world(tmp_path):
    database = tmp_path / "rag.duckdb"
    with duckdb.connect(str(database)) as con:
        tiny_world(con, tmp_path / "goldens")
    return ["--db", str(database), "--reports-dir", str(tmp_path / "reports"),
            "--goldens-dir", str(tmp_path / "goldens")]


def test_open_show_close(tmp_path):
    paths, runner = _world(tmp_path), CliRunner()
    opened = runner.invoke(main, ["incident", "open", "--from", "2026-11-12", "--to", "2026-11-13",
                                  "--slice", "language=vi", "--title", "ERR-977 in Vietnamese", "--by", "ann",
                                  *paths])
    assert opened.exit_code == 0, opened.output
    assert "INC-0001: 3 requests in the window, 2 failing" in opened.output
    postmortem = tmp_path / "reports" / "incident-INC-0001.md"
    assert postmortem.is_file() and "# INC-0001: ERR-977 in Vietnamese" in postmortem.read_text()
    shown = runner.invoke(main, ["incident", "show", "INC-0001", *paths])
    assert shown.exit_code == 0 and "## Why offline tests missed it" in shown.output
    closed = runner.invoke(main, ["incident", "close", "INC-0001", "--actions", "documented ERR-977", *paths])
    assert closed.exit_code == 0, closed.output
    assert "no release holds a golden from its traces yet" in closed.output
    assert "documented ERR-977" in postmortem.read_text() and "status: **closed**" in postmortem.read_text()


def test_bad_requests_are_usage_errors_not_crashes(tmp_path):
    paths, runner = _world(tmp_path), CliRunner()
    for args, said in ((["--from", "2026-11-13", "--to", "2026-11-12"], "before it starts"),
                       (["--from", "yesterday", "--to", "2026-11-12"], "is no date"),
                       (["--from", "2026-11-12", "--to", "2026-11-13", "--slice", "colour=red"], "unknown slice key"),
                       (["--from", "2026-11-12", "--to", "2026-11-13", "--gating-release", "v0009"],
                        "no release v0009")):
        result = runner.invoke(main, ["incident", "open", *args, *paths])
        assert result.exit_code == 2 and said in result.output, result.output
    missing = runner.invoke(main, ["incident", "close", "INC-0042", "--actions", "x", *paths])
    assert missing.exit_code == 2 and "no incident" in missing.output
    nowhere = runner.invoke(main, ["incident", "open", "--from", "2026-11-12", "--to", "2026-11-13",
                                   "--db", str(tmp_path / "typo.duckdb")])
    assert nowhere.exit_code == 1 and "no database at" in nowhere.output
    assert not (tmp_path / "typo.duckdb").exists()


def test_a_golden_leads_back_to_its_traces_incident_and_eval_runs(tmp_path):
    from tests.incidents.world import release
    paths, runner = _world(tmp_path), CliRunner()
    opened = runner.invoke(main, ["incident", "open", "--from", "2026-11-12", "--to", "2026-11-13", *paths])
    assert opened.exit_code == 0
    release(tmp_path / "goldens", "v0002", [("g-a", "t1", "A", ["INC-0001"]), ("g-b", "t3", "B")],
            "2026-11-15T00:00:00+00:00")
    with duckdb.connect(paths[1]) as con:
        con.execute("CREATE TABLE eval_runs (run_id VARCHAR, started_at TIMESTAMPTZ, release_version VARCHAR, "
                    "blocked BOOLEAN)")
        con.execute("CREATE TABLE eval_results (run_id VARCHAR, golden VARCHAR, metric VARCHAR, passed BOOLEAN, "
                    "errored BOOLEAN)")
        con.execute("INSERT INTO eval_runs VALUES ('r1', '2026-11-17 00:00+00', 'v0002', false)")
        con.execute("INSERT INTO eval_results VALUES ('r1', 'g-b', 'Faithfulness', false, false)")
    db = paths[:2]
    for name, incident in (("g-a", "INC-0001"), ("g-b", "INC-0001")):  # g-b: its trace t3 is the incident's
        result = runner.invoke(main, ["incident", "golden", name, *db, "--goldens-dir", paths[5]])
        assert result.exit_code == 0 and f"incidents: {incident}" in result.output, result.output
    shown = runner.invoke(main, ["incident", "golden", "g-b", *db, "--goldens-dir", paths[5]]).output
    assert "v0002: trace t3" in shown and "r1 (v0002" in shown and "0 passed, 1 failed" in shown
    assert runner.invoke(main, ["incident", "golden", "g-zz", *db, "--goldens-dir", paths[5]]).exit_code == 2
