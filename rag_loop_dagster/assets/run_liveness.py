"""Runs whose process died are ended, so the runs queued behind them start (issue 43).

A run stays STARTED when its process is killed (`kill -9`, the OOM killer, a reboot), and with
the instance's limits (deploy/dagster.yaml: one run at a time) nothing queued starts again. So
every run records the process that executes it:

- a run of `rag-loop run / release / eval` (executed in that process) carries `process_tags()`:
  the host, the pid, and when the process started, as the kernel counts it (clock ticks since
  boot, with the boot's id) so that a pid reused by another process, or a reboot, is not taken
  for it;
- a run the daemon or the UI launches on a code server of this host gets the host and boot tags
  from `RagLoopRunLauncher.launch_run`; its worker's pid is the one its first engine event names
  (an event the worker writes itself, so the worker started before it).

`RagLoopRunLauncher` is the instance's run launcher (deploy/dagster.yaml). Dagster's run
monitoring (the daemon's MONITORING loop) asks it about every STARTED run
(`check_run_worker_health`) and marks the run failed when its process is gone; `end_dead_runs`
does the same before `rag-loop` starts a run and says which run it ended and why. A process of
another host cannot be looked at from here: such runs are left alone (and said so), as are runs
that record no process (Dagster's own timeouts apply to them; `end_dead_runs` names the ones
executed in a process it cannot tell, as runs of rag-loop before this were).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.events import DagsterEventType, JobFailureData, RunFailureReason
from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, LaunchRunContext, WorkerStatus
from dagster._core.storage.dagster_run import DagsterRun
from dagster._core.storage.tags import GRPC_INFO_TAG

HOST_TAG = "rag-loop/host"
BOOT_TAG = "rag-loop/boot-id"  # Linux: /proc/sys/kernel/random/boot_id, new at every boot
PID_TAG = "rag-loop/pid"
START_TAG = "rag-loop/process-start"  # exact: "ticks:<clock ticks since boot>" (Linux), "psutil:<create time>"
STARTED_TAG = "rag-loop/process-started"  # the same instant for people (UTC)
# unfinished: STARTING, STARTED and CANCELING hold the instance's run slot; NOT_STARTED is what a
# process killed between creating its run and starting it leaves
WATCHED = [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED,
           DagsterRunStatus.CANCELING]
# a code server worker's start is compared with the time of the event it wrote: the wall clock may
# have been stepped since (NTP), so only a process started clearly later counts as another one
WORKER_START_SLACK_SECONDS = 30.0
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


@dataclass(frozen=True)
class Process:
    """A live process of this host as the kernel describes it."""

    pid: int
    start: str | None  # exact start (START_TAG's form); None where it cannot be read
    started_at: float | None  # epoch seconds
    zombie: bool = False  # dead, not yet reaped by its parent


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def boot_id() -> str | None:
    value = _read("/proc/sys/kernel/random/boot_id")
    return value.strip() if value else None


def _boot_time() -> float | None:
    for line in (_read("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def read_process(pid: int) -> Process | None:
    """The process `pid` of this host, or None when there is none."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # another user's process: it exists
    except (OverflowError, ValueError):
        return None
    stat = _read(f"/proc/{pid}/stat")
    if stat and ")" in stat:  # "pid (comm) state ppid ... starttime(22nd) ..."; comm may hold spaces
        fields = stat.rsplit(")", 1)[1].split()
        ticks = int(fields[19])
        boot = _boot_time()
        started = boot + ticks / os.sysconf("SC_CLK_TCK") if boot is not None else None
        return Process(pid, f"ticks:{ticks}", started, zombie=fields[0] in ("Z", "X"))
    try:  # not Linux (or /proc hidden): psutil when it is installed
        import psutil
    except ImportError:
        return Process(pid, None, None)  # it exists; who it is cannot be told
    try:
        proc = psutil.Process(pid)
        created = proc.create_time()
        return Process(pid, f"psutil:{created:.3f}", created, zombie=proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:
        return Process(pid, None, None)


def _utc(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ts is not None else "unknown"


def host_tags() -> dict[str, str]:
    """What names this host: the hostname, and the boot on Linux."""
    boot = boot_id()
    return {HOST_TAG: socket.gethostname(), **({BOOT_TAG: boot} if boot else {})}


def process_tags(pid: int | None = None) -> dict[str, str]:
    """The tags of a run executed by process `pid` (default: this one)."""
    proc = read_process(pid or os.getpid())
    if proc is None:
        raise ProcessLookupError(pid)
    return {**host_tags(), PID_TAG: str(proc.pid),
            **({START_TAG: proc.start} if proc.start else {}),
            **({STARTED_TAG: _utc(proc.started_at)} if proc.started_at is not None else {})}


@dataclass(frozen=True)
class Here:
    """The host doing the checking (a test builds another)."""

    host: str
    boot: str | None
    read: Callable[[int], Process | None] = read_process

    @classmethod
    def current(cls) -> Here:
        return cls(socket.gethostname(), boot_id())


@dataclass(frozen=True)
class Liveness:
    """alive: True/False, or None when it cannot be told from here (`elsewhere`: another host)."""

    alive: bool | None
    reason: str
    elsewhere: str | None = None


def liveness(tags: Mapping[str, str], here: Here | None = None, *, worker_pid: int | None = None,
             worker_seen_at: float | None = None) -> Liveness:
    """Whether the process a run's `tags` name still runs. A code server's worker carries no pid
    tag: `worker_pid` is the pid its own event named, at `worker_seen_at`."""
    here = here or Here.current()
    host = tags.get(HOST_TAG)
    if not host:
        return Liveness(None, "no process recorded (not started by rag-loop, nor by this instance's launcher)")
    if host != here.host:
        return Liveness(None, f"runs on host {host}: its process can only be checked there", elsewhere=host)
    pid_tag = tags.get(PID_TAG)
    pid = int(pid_tag) if pid_tag and pid_tag.isdigit() else worker_pid
    what = f"process {pid} on host {host}" if pid else f"the run worker on host {host}"
    if tags.get(STARTED_TAG):
        what += f" (started {tags[STARTED_TAG]})"
    if tags.get(BOOT_TAG) and here.boot and tags[BOOT_TAG] != here.boot:
        return Liveness(False, f"{what} is gone: the host has rebooted since (boot id {tags[BOOT_TAG]} "
                               f"is now {here.boot})")
    if pid is None:
        return Liveness(None, f"{what}: its pid is not known yet (the worker has not written an event)")
    proc = here.read(pid)
    if proc is None:
        return Liveness(False, f"{what} is gone: no process has pid {pid} now")
    if proc.zombie:
        return Liveness(False, f"{what} is gone: it was killed and is waiting to be reaped")
    expected = tags.get(START_TAG)
    # compared in the same form only ("ticks:" from /proc, "psutil:" where /proc cannot be read)
    if expected and proc.start and proc.start.split(":")[0] == expected.split(":")[0] and proc.start != expected:
        return Liveness(False, f"{what} is gone: pid {pid} now belongs to another process, started "
                               f"{_utc(proc.started_at)}")
    if (not pid_tag and worker_seen_at is not None and proc.started_at is not None
            and proc.started_at > worker_seen_at + WORKER_START_SLACK_SECONDS):
        return Liveness(False, f"{what} is gone: pid {pid} now belongs to a process started "
                               f"{_utc(proc.started_at)}, after the worker's event of {_utc(worker_seen_at)}")
    return Liveness(True, f"{what} is running")


def _worker_event(instance: DagsterInstance, run_id: str) -> tuple[int | None, float | None]:
    """The pid a run's worker named in its first engine event carrying one, and that event's time."""
    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.ENGINE_EVENT, limit=20).records
    for record in records:
        event = record.event_log_entry.dagster_event
        entry = (event.engine_event_data.metadata or {}).get("pid") if event else None
        if entry is not None and str(entry.value).isdigit():
            return int(entry.value), record.timestamp
    return None, None


def run_liveness(instance: DagsterInstance, run: DagsterRun, here: Here | None = None) -> Liveness:
    """`liveness` of `run`'s process; a code server's worker is found by its events."""
    here, tags = here or Here.current(), run.tags
    if tags.get(HOST_TAG) == here.host and not tags.get(PID_TAG):
        pid, seen = _worker_event(instance, run.run_id)
        return liveness(tags, here, worker_pid=pid, worker_seen_at=seen)
    return liveness(tags, here)


def last_seen(instance: DagsterInstance, run_id: str) -> str:
    """When a run's process was last heard of: the time of the run's last event."""
    records = instance.get_records_for_run(run_id, ascending=False, limit=1).records
    return _utc(records[0].timestamp) if records else "never"


def end_run(instance: DagsterInstance, run: DagsterRun, reason: str) -> str | None:
    """Mark `run` failed (canceled when it was being canceled) because its process died; the
    message, or None when the run ended meanwhile."""
    fresh = instance.get_run_by_id(run.run_id)
    if fresh is None or fresh.is_finished:
        return None
    message = (f"{reason}; last seen {last_seen(instance, run.run_id)} (the run's last event). "
               "rag-loop marked the run as ended so that the runs queued behind it can start.")
    if fresh.status == DagsterRunStatus.CANCELING:
        instance.report_run_canceled(fresh, message)
    else:
        instance.report_run_failed(fresh, message, JobFailureData(
            error=None, failure_reason=RunFailureReason.UNEXPECTED_TERMINATION))
    return message


def end_dead_runs(instance: DagsterInstance, echo: Callable[[str], object] = print,
                  here: Here | None = None) -> list[str]:
    """End every unfinished run of `instance` whose process on this host is gone; say which run
    was ended and why, which runs of other hosts were left alone, and which runs executed in a
    process that they do not record (older ones) could not be checked. The ended runs' ids."""
    here = here or Here.current()
    ended = []
    for record in instance.get_run_records(RunsFilter(statuses=WATCHED)):
        run = record.dagster_run
        verdict = run_liveness(instance, run, here)
        label = f"run {run.run_id} ({run.job_name}, {run.status.value})"
        if verdict.alive is False:
            message = end_run(instance, run, verdict.reason)
            if message:
                ended.append(run.run_id)
                echo(f"Ended {label}: {message}")
        elif verdict.elsewhere:
            echo(f"Left alone: {label} {verdict.reason}.")
        elif not run.tags.get(HOST_TAG) and GRPC_INFO_TAG not in run.tags:  # executed in some process, not launched
            echo(f"Not checked: {label} records no process (it was started before rag-loop recorded one, or "
                 "outside rag-loop). If nothing runs it any more, end it in the Dagster UI: Terminate, with "
                 '"Force termination immediately".')
    return ended


class RagLoopRunLauncher(DefaultRunLauncher):
    """Dagster's DefaultRunLauncher (runs on the workspace's code servers) that also answers run
    monitoring's health check for every run that records its process: the runs rag-loop executes
    in its own process, and the runs it launched on a code server of this host."""

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        try:
            origin = run.remote_job_origin.repository_origin.code_location_origin if run.remote_job_origin else None
            location = context.workspace.get_code_location(origin.location_name) if origin and context.workspace \
                else None
            client = getattr(location, "client", None)
            if client is not None and (client.socket or client.host in _LOCAL_HOSTS):
                self._instance.add_run_tags(run.run_id, host_tags())
        except Exception as error:  # a run is never held back by its bookkeeping
            print(f"rag-loop: no process tags on run {run.run_id}: {error!r}", file=sys.stderr)
        super().launch_run(context)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        verdict = run_liveness(self._instance, run)
        if verdict.alive is False:
            return CheckRunHealthResult(WorkerStatus.NOT_FOUND, f"{verdict.reason}; last seen "
                                        f"{last_seen(self._instance, run.run_id)} (the run's last event)")
        # alive, or not to be told from here: RUNNING keeps Dagster's own timeouts in charge
        return CheckRunHealthResult(WorkerStatus.RUNNING, verdict.reason)
