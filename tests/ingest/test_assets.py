import shutil

from dagster import DagsterInstance, build_sensor_context, materialize
from dagster_duckdb import DuckDBResource

from rag_loop_dagster.assets.ingestion import (
    new_trace_files_sensor,
    raw_traces,
    raw_traces_quarantine_rate,
)
from rag_loop_dagster.assets.resources import DuckDBEngineResource, RagLoopPaths
from tests.helpers import DEMO, metadata_of, trace_line


def _resources(tmp_path, traces_dir):
    return {"duckdb": DuckDBResource(database=str(tmp_path / "rag.duckdb")), "engine": DuckDBEngineResource(),
            "paths": RagLoopPaths(traces_dir=str(traces_dir), knowledge_dir=str(DEMO / "kb"))}


def test_demo_ingestion_materializes_with_metadata_and_passing_check(demo_run, tmp_path):
    """The session's demo run (knowledge_base and raw_traces materialized on the demo data, as
    here before; its metadata recorded) is the first run: its database, copied, is run again
    with the quarantine check, which reads the whole table and passes on the demo data."""
    run, database, _ = demo_run
    metadata = metadata_of(run, "raw_traces")
    assert metadata["dagster/row_count"] >= 5000
    assert metadata["native_duplicates"] == 25
    assert metadata["native_quarantined"] == 12
    assert metadata["otlp_ingested"] > 500
    files = {cells[1]: cells[2:-1] for cells in (
        [c.strip() for c in line.split("|")] for line in metadata["files"].splitlines()[2:])}
    assert files["native/2026-11-01.jsonl.gz"][:2] == ["native", "read_json"]
    assert files["otlp/2026-11-01.otlp.jsonl.gz"][:2] == ["otlp", "spans"]
    assert metadata["otlp_traces_waiting"] == 0
    assert metadata["otlp_spans_stored"] >= 4 * metadata["otlp_ingested"]  # root + stages
    malformed = files["malformed/bad-records.jsonl"]  # invalid JSON, then invalid UTF-8
    assert malformed[1] == "batches"
    assert "read_json: Invalid Input Error" in malformed[-1]
    assert "read_csv: Invalid Input Error" in malformed[-1]
    shutil.copy(database, tmp_path / "rag.duckdb")
    again = materialize([raw_traces, raw_traces_quarantine_rate],
                        resources=_resources(tmp_path, DEMO / "traces"))  # idempotent rerun
    assert [c.passed for c in again.get_asset_check_evaluations()] == [True]
    rerun = metadata_of(again, "raw_traces")
    assert rerun["run_ingested"] == 0
    assert rerun["dagster/row_count"] == metadata["dagster/row_count"]


def test_quarantine_check_fails_above_threshold(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "a.jsonl").write_text(trace_line("a") + "\nbroken\nbroken too\n")
    result = materialize([raw_traces, raw_traces_quarantine_rate],
                         resources=_resources(tmp_path, traces), raise_on_error=False)
    (check,) = result.get_asset_check_evaluations()
    assert not check.passed and check.severity.value == "ERROR"


def test_sensor_requests_a_run_only_when_files_change(tmp_path):
    traces = tmp_path / "traces"
    shutil.copytree(DEMO / "traces" / "malformed", traces)
    paths = RagLoopPaths(traces_dir=str(traces), knowledge_dir=str(DEMO / "kb"))
    with DagsterInstance.ephemeral() as instance:
        context = build_sensor_context(instance=instance, resources={"paths": paths})
        first = new_trace_files_sensor(context)
        assert first.run_key
        context = build_sensor_context(instance=instance, cursor=context.cursor,
                                       resources={"paths": paths})
        assert not hasattr(new_trace_files_sensor(context), "run_key")
        (traces / "new.jsonl").write_text(trace_line("n") + "\n")
        context = build_sensor_context(instance=instance, cursor=context.cursor,
                                       resources={"paths": paths})
        assert new_trace_files_sensor(context).run_key != first.run_key


def test_the_files_of_a_failed_run_are_requested_again_after_a_pause(tmp_path):
    from dagster import DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    from rag_loop_dagster.assets.sensors import INPUT_TAG
    traces = tmp_path / "traces"
    shutil.copytree(DEMO / "traces" / "malformed", traces)
    paths = RagLoopPaths(traces_dir=str(traces))
    with DagsterInstance.ephemeral() as instance:
        context = build_sensor_context(instance=instance, resources={"paths": paths})
        first = new_trace_files_sensor(context)
        run = create_run_for_test(instance, job_name="ingest_job", status=DagsterRunStatus.STARTED,
                                  tags={INPUT_TAG: first.tags[INPUT_TAG]})
        again = build_sensor_context(instance=instance, cursor=context.cursor, resources={"paths": paths})
        assert not hasattr(new_trace_files_sensor(again), "run_key")  # under way
        instance.report_run_failed(run)  # e.g. the database was locked by a notebook
        retry = new_trace_files_sensor(build_sensor_context(instance=instance, cursor=context.cursor,
                                                            resources={"paths": paths}))
        assert not hasattr(retry, "run_key") and "next try" in retry.skip_message  # a pause first
        with instance_time_shift(3600):
            retry = new_trace_files_sensor(build_sensor_context(instance=instance, cursor=context.cursor,
                                                                resources={"paths": paths}))
        assert retry.run_key and retry.run_key != first.run_key
        assert retry.tags[INPUT_TAG] == first.tags[INPUT_TAG]


def instance_time_shift(seconds: float):
    """Pretend `seconds` have passed (the sensor reads the time through datetime.now)."""
    from datetime import UTC, datetime, timedelta
    from unittest import mock
    later = datetime.now(UTC) + timedelta(seconds=seconds)
    fake = mock.MagicMock(wraps=datetime)
    fake.now.return_value = later
    return mock.patch("rag_loop_dagster.assets.sensors.datetime", fake)
