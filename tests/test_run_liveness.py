"""Which run's process is gone (issue 43): real processes of this host, a real instance."""

import os
import signal
import subprocess
import sys
import time

import pytest
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.events import DagsterEventType, EngineEventData
from dagster._core.launcher import WorkerStatus
from dagster._core.test_utils import create_run_for_test

from rag_loop_dagster.assets.run_liveness import (
    BOOT_TAG,
    HOST_TAG,
    PID_TAG,
    START_TAG,
    WORKER_START_SLACK_SECONDS,
    Here,
    RagLoopRunLauncher,
    end_dead_runs,
    host_tags,
    liveness,
    process_tags,
    read_process,
)


@pytest.fixture
def child():
    """A process of ours that sleeps until the test kills it."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def _dead(child) -> dict[str, str]:
    """The tags of `child`'s run, once `child` was killed and reaped."""
    tags = process_tags(child.pid)
    child.kill()
    child.wait()
    return tags


def test_a_live_process_is_alive_and_its_tags_name_it():
    tags = process_tags()
    assert tags[HOST_TAG] and tags[PID_TAG] == str(os.getpid()) and tags[START_TAG].startswith("ticks:")
    verdict = liveness(tags)
    assert verdict.alive is True and f"process {os.getpid()} on host {tags[HOST_TAG]} (started " in verdict.reason


def test_a_killed_process_is_gone_and_so_is_one_killed_but_not_reaped(child):
    tags = process_tags(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    time.sleep(0.2)  # a zombie until its parent (this test) waits for it
    assert read_process(child.pid).zombie
    assert liveness(tags).alive is False and "waiting to be reaped" in liveness(tags).reason
    child.wait()
    verdict = liveness(tags)
    assert verdict.alive is False and f"no process has pid {child.pid} now" in verdict.reason


def test_a_reused_pid_is_not_taken_for_the_process_that_died():
    tags = {**process_tags(), START_TAG: "ticks:1"}  # this pid, but a process that started at boot
    verdict = liveness(tags)
    assert verdict.alive is False and f"pid {os.getpid()} now belongs to another process" in verdict.reason


def test_a_process_of_another_host_is_left_alone(child):
    tags = {**_dead(child), HOST_TAG: "elsewhere"}  # gone here; there it may run
    verdict = liveness(tags)
    assert verdict.alive is None and verdict.elsewhere == "elsewhere" and "only be checked there" in verdict.reason


def test_a_reboot_ends_every_process_of_the_boot_before():
    here = Here.current()
    if not here.boot:
        pytest.skip("no boot id on this system")
    verdict = liveness({**process_tags(), BOOT_TAG: "another-boot"}, here)
    assert verdict.alive is False and "rebooted" in verdict.reason


def test_a_run_with_no_process_is_not_judged():
    assert liveness({}).alive is None
    assert liveness(host_tags()).alive is None  # a launched run whose worker has not said its pid yet


def test_a_code_server_worker_is_judged_by_the_pid_of_its_event(child):
    tags, started = host_tags(), read_process(child.pid).started_at
    assert liveness(tags, worker_pid=child.pid, worker_seen_at=started + 1).alive is True
    # a process that started well after the worker's event is another one
    later = liveness(tags, worker_pid=child.pid, worker_seen_at=started - WORKER_START_SLACK_SECONDS - 5)
    assert later.alive is False and "after the worker's event" in later.reason


def _run(instance, tags, status=DagsterRunStatus.STARTED, job_name="ingest_job"):
    return create_run_for_test(instance, job_name=job_name, status=status, tags=tags)


def test_dead_runs_are_ended_with_the_reason_and_the_others_left_alone(child):
    with DagsterInstance.ephemeral() as instance:
        dead = _run(instance, _dead(child), job_name="release_goldens")
        alive = _run(instance, process_tags())
        elsewhere = _run(instance, {**process_tags(), HOST_TAG: "elsewhere"})
        untracked = _run(instance, {})
        done = _run(instance, {**process_tags(), PID_TAG: str(child.pid)}, status=DagsterRunStatus.SUCCESS)
        said = []
        assert end_dead_runs(instance, said.append) == [dead.run_id]
        ended, left, unchecked = sorted(said)  # "Ended ...", "Left alone ...", "Not checked ..."
        assert ended.startswith(f"Ended run {dead.run_id} (release_goldens, STARTED): process {child.pid} on "
                                f"host {dead.tags[HOST_TAG]} (started ")
        assert "is gone: no process has pid" in ended and "last seen" in ended
        assert left == (f"Left alone: run {elsewhere.run_id} (ingest_job, STARTED) runs on host elsewhere: "
                        "its process can only be checked there.")
        assert unchecked.startswith(f"Not checked: run {untracked.run_id} (ingest_job, STARTED) records no process")
        assert "Force termination immediately" in unchecked
        statuses = {r: instance.get_run_by_id(r).status for r in (dead.run_id, alive.run_id, elsewhere.run_id,
                                                                   untracked.run_id, done.run_id)}
        assert statuses == {dead.run_id: DagsterRunStatus.FAILURE, alive.run_id: DagsterRunStatus.STARTED,
                            elsewhere.run_id: DagsterRunStatus.STARTED, untracked.run_id: DagsterRunStatus.STARTED,
                            done.run_id: DagsterRunStatus.SUCCESS}
        (failure,) = instance.get_records_for_run(dead.run_id, of_type=DagsterEventType.RUN_FAILURE).records
        assert f"process {child.pid} on host" in failure.event_log_entry.dagster_event.message
        assert end_dead_runs(instance, said.append) == []  # ended once


def test_run_monitoring_asks_the_launcher_about_every_run(child):
    with DagsterInstance.ephemeral() as instance:
        launcher = RagLoopRunLauncher()
        launcher.register_instance(instance)
        assert launcher.supports_check_run_worker_health
        in_process = _run(instance, _dead(child))
        assert launcher.check_run_worker_health(in_process).status == WorkerStatus.NOT_FOUND
        assert launcher.check_run_worker_health(_run(instance, process_tags())).status == WorkerStatus.RUNNING
        assert launcher.check_run_worker_health(_run(instance, {})).status == WorkerStatus.RUNNING
        # a run launched on a code server of this host: its worker's pid comes from its event
        worker = _run(instance, host_tags())
        assert launcher.check_run_worker_health(worker).status == WorkerStatus.RUNNING  # no pid yet
        instance.report_engine_event(f"Started process for run (pid: {child.pid}).", worker,
                                     EngineEventData.in_process(child.pid))
        health = launcher.check_run_worker_health(worker)
        assert health.status == WorkerStatus.NOT_FOUND and f"process {child.pid} on host" in health.msg
