"""How the curator workspace makes a golden release. The workspace (rag_loop/workspace) is free
of Dagster; `rag-loop serve` hands it one of these: the release_goldens job launched through a
Dagster webserver with dagster-graphql's client (the run queues on the DuckDB tag like any
other and shows in the UI), or, without a webserver, `rag-loop release` in its own process.
Either way the job writes the database; the workspace never opens it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from dagster import DagsterRunStatus
from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError
from requests.exceptions import RequestException

from rag_loop.workspace.releases import Launched

RELEASE_JOB = "release_goldens"
RELEASE_TIMEOUT_SECONDS = 900
FINISHED = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
# what a launch or a status query raises when the webserver is down, slow or says no
_UNREACHED = (DagsterGraphQLClientError, RequestException, OSError, ValueError)


def release_config(notes: str, released_by: str) -> dict[str, Any]:
    """The release_goldens run config of a workspace release: label files the workspace wrote
    are whole, so they need not settle."""
    return {"ops": {"golden_release": {"config": {"notes": notes, "released_by": released_by}},
                    "curated_labels": {"config": {"settle_seconds": 0}}}}


def release_in_own_process(notes: str, released_by: str, env: Mapping[str, str] | None = None) -> Launched:
    """`rag-loop release` in its own process, with this process's deployment settings (its
    memory and its database lock end with it)."""
    command = [sys.executable, "-m", "rag_loop_dagster.jobs_cli", "release", "--notes", notes, "--by", released_by,
               "--settle-seconds", "0"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RELEASE_TIMEOUT_SECONDS,
                              env=dict(env if env is not None else os.environ))
    except subprocess.TimeoutExpired:
        return Launched(False, f"the release did not finish in {RELEASE_TIMEOUT_SECONDS} s")
    lines = [line for line in (done.stdout + done.stderr).splitlines()
             if f"{RELEASE_JOB}:" in line or "Error" in line or "message" in line.lower()]
    return Launched(done.returncode == 0, "\n".join(lines[-20:]) or f"exit status {done.returncode}")


def graphql_client(url: str, timeout: int = 30) -> DagsterGraphQLClient:
    """dagster-graphql's client of the webserver at `url` (http(s)://host[:port][/prefix])."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) address of a Dagster webserver")
    return DagsterGraphQLClient(parts.hostname, port_number=parts.port, use_https=parts.scheme == "https",
                                timeout=timeout, path_prefix=parts.path.rstrip("/"))


@dataclass
class WebserverRelease:
    """A release launched through the Dagster webserver at `url` (`dagster dev` or a deployment),
    so it shows in the UI and queues behind the runs that hold the database. It waits up to
    `wait_seconds` for the run, then says where to follow it."""

    url: str
    wait_seconds: float = 120
    poll_seconds: float = 1

    def __call__(self, notes: str, released_by: str) -> Launched:
        try:
            client = graphql_client(self.url)
            run_id = client.submit_job_execution(RELEASE_JOB, run_config=release_config(notes, released_by))
        except _UNREACHED as error:
            return Launched(False, f"the Dagster webserver at {self.url} did not launch {RELEASE_JOB}: "
                                   f"{_first_line(error)}")
        link = f"{self.url.rstrip('/')}/runs/{run_id}"
        deadline = time.monotonic() + self.wait_seconds
        status = DagsterRunStatus.QUEUED
        while time.monotonic() < deadline:
            try:
                status = client.get_run_status(run_id)
            except _UNREACHED as error:
                return Launched(False, f"{RELEASE_JOB}: run {run_id} launched, its status unknown "
                                       f"({_first_line(error)})", link, finished=False)
            if status in FINISHED:
                return Launched(status == DagsterRunStatus.SUCCESS, f"{RELEASE_JOB}: {status.value} (run {run_id})",
                                link)
            time.sleep(self.poll_seconds)
        return Launched(True, f"{RELEASE_JOB}: still {status.value} after {self.wait_seconds:.0f} s (run {run_id})",
                        link, finished=False)


def _first_line(error: Exception) -> str:
    """The client's errors carry the whole query after their first line: the reason alone."""
    return (" ".join(str(a) for a in error.args) or type(error).__name__).splitlines()[0]
