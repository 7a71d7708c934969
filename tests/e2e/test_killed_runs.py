"""A run killed with SIGKILL no longer holds the instance's one run slot (issue 43).

A real instance (a temporary DAGSTER_HOME with deploy/dagster.yaml), the real daemon and the real
`rag-loop run`: the run of a `rag-loop run ingest_job` killed mid-run is ended by the daemon's run
monitoring, and the run queued behind it (launched as the UI or a sensor would, through the
queue) goes through. ingest_job on an empty traces folder is the cheapest job; the killed run is
kept in its first asset by holding DuckDB's write lock (it retries the connection meanwhile).
The daemon and the launch (`dagster job launch`'s own code, in this process) share one code
server, which loads the project once; the daemon starts once it answers (the daemon reloads a
workspace that failed to load only every 60 s), while the victim is still starting.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._cli.job import execute_launch_command
from dagster._cli.workspace.cli_target import WorkspaceOpts
from dagster._grpc.client import DagsterGrpcClient

from tests.helpers import PROJECT
from tests.helpers.ramdisk import in_memory

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BIN = Path(sys.executable).parent


def _start(args: list, log: Path | None = None, **kwargs) -> subprocess.Popen:
    out = log.open("w") if log else subprocess.DEVNULL
    return subprocess.Popen([str(a) for a in args], start_new_session=True, stdout=out,
                            stderr=subprocess.STDOUT, **kwargs)


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _wait_for(what: str, probe, timeout: float):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            found = probe()
        except Exception:  # not up yet
            found = None
        if found:
            return found
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not after {timeout} s")


def _started_run(instance: DagsterInstance):
    runs = instance.get_runs(RunsFilter(job_name="ingest_job", statuses=[DagsterRunStatus.STARTED]))
    return runs[0] if runs else None


@pytest.fixture
def work(tmp_path):
    with in_memory(tmp_path) as folder:
        yield folder


def test_a_killed_run_is_ended_and_the_run_queued_behind_it_goes_through(work):
    home, dagster_home, traces = work / "home", work / "dagster", work / "traces"
    for folder in (home, dagster_home, traces):
        folder.mkdir()
    settings = yaml.safe_load((PROJECT / "deploy" / "dagster.yaml").read_text())
    # the one change: look every second, not every 15 s (and the same test runs on an instance without it)
    settings.setdefault("run_monitoring", {})["poll_interval_seconds"] = 1
    (dagster_home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    # a Unix socket, not a port: a free port found here could be taken by the other worker's servers
    # before the code server binds it (seen once in CI: the code server never answered)
    code_socket, workspace = work / "code.sock", work / "workspace.yaml"
    workspace.write_text(yaml.safe_dump(
        {"load_from": [{"grpc_server": {"socket": str(code_socket), "location_name": "rag-loop"}}]}))
    env = {**os.environ, "RAG_LOOP_HOME": str(home), "RAG_LOOP_TRACES_DIR": str(traces), "RAG_LOOP_KB_DIR": "",
           "DAGSTER_HOME": str(dagster_home), "DAGSTER_DISABLE_TELEMETRY": "1", "PYTHONPATH": str(PROJECT)}
    lock = duckdb.connect(str(home / "rag_loop.duckdb"))  # DuckDB's one writer: the victim waits for it
    code = victim = daemon = None
    # the instance's storage made here, before any process opens it: the code server and the
    # victim each create it on first use, and two at once race ("alembic_version already exists")
    instance = DagsterInstance.from_config(str(dagster_home))
    try:
        code = _start([BIN / "dagster", "api", "grpc", "-m", "rag_loop_dagster.definitions", "-d", PROJECT,
                       "-s", code_socket, "--location-name", "rag-loop"], work / "code.log", env=env, cwd=PROJECT)
        victim = _start([BIN / "rag-loop", "run", "ingest_job"], work / "victim.log", env=env, cwd=work)
        _wait_for("the code server", lambda: DagsterGrpcClient(socket=str(code_socket)).ping("up"), 60)
        daemon = _start([BIN / "dagster-daemon", "run", "-w", workspace], work / "daemon.log", env=env,
                        cwd=work)
        killed = _wait_for("the victim's run STARTED", lambda: _started_run(instance), 60)
        # as `dagster job launch -j ingest_job` (the repro), the UI or a sensor: into the queue
        held = (work / "daemon.log").read_text().count("won't launch more")
        queued = execute_launch_command(instance=instance, workspace_opts=WorkspaceOpts(workspace=[str(workspace)]),
                                        job_name="ingest_job")
        # behind the live run: one run at a time, and a live process is not taken for a dead one
        # (the daemon's queue pass after the launch)
        _wait_for("the queue held", lambda: (work / "daemon.log").read_text().count("won't launch more") > held, 60)
        assert instance.get_run_by_id(killed.run_id).status == DagsterRunStatus.STARTED
        assert instance.get_run_by_id(queued.run_id).status == DagsterRunStatus.QUEUED

        os.killpg(victim.pid, signal.SIGKILL)  # mid-run: waiting for DuckDB in its first asset
        victim.wait()
        lock.close()
        finished = _wait_for("the queued run finished",
                             lambda: (r := instance.get_run_by_id(queued.run_id)).is_finished and r, 60)
    finally:
        for process in (victim, daemon, code):
            if process:
                _kill(process)
        lock.close()
    daemon_said = (work / "daemon.log").read_text()
    assert finished.status == DagsterRunStatus.SUCCESS, daemon_said[-3000:]
    assert finished.tags["rag-loop/host"] == socket.gethostname()  # the launcher records where its worker runs
    assert instance.get_run_by_id(killed.run_id).status == DagsterRunStatus.FAILURE
    (failure,) = instance.get_records_for_run(killed.run_id, of_type=DagsterEventType.RUN_FAILURE).records
    message = failure.event_log_entry.dagster_event.message
    why = f"process {victim.pid} on host {socket.gethostname()} (started "
    assert why in message and "is gone" in message and "last seen" in message, message
    assert why in daemon_said and killed.run_id in daemon_said  # the daemon's log says which run and why
    instance.dispose()
