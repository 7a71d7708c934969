"""Golden releases as the workspace shows and makes them: the releases on disk with their
changes, what the next one would take in, and the release itself through the project's
`release_goldens` job: launched through the Dagster webserver's GraphQL API where one is
configured (the run queues on the DuckDB tag like any other), else `rag-loop release` in its own
process. Either way the job writes the database; the workspace never opens it.

A release that fails its integrity check (goldens.json edited after it was made) is shown with
its error on the releases page; it never stops the workspace's other pages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rag_loop.store.releases import ReleaseIntegrityError, read_goldens, read_manifest, release_versions
from rag_loop.workspace.store import Decision

RELEASE_TIMEOUT_SECONDS = 900
RELEASE_JOB = "release_goldens"
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")


@dataclass
class Launched:
    ok: bool
    output: str
    link: str | None = None  # the run in the Dagster UI
    finished: bool = True  # False: still queued or running when the workspace stopped waiting
    released: str | None = None  # the version the run made (see `outcome`)

    @property
    def state(self) -> str:
        """ok (a version was made), nothing (the run made none), waiting or error."""
        if not self.ok:
            return "error"
        return "ok" if self.released else "nothing" if self.finished else "waiting"


@dataclass(frozen=True)
class Newest:
    """The newest release: its version and goldens by trace id, or why they cannot be read."""

    version: str | None = None
    goldens: dict[str, dict] = field(default_factory=dict)
    problem: str | None = None


# what reading a release can raise when its files were edited or removed
UNREADABLE = (ReleaseIntegrityError, OSError, ValueError)


def releases(goldens_dir: Path) -> list[dict]:
    """Every release, newest first: manifest figures, its CHANGES.md (the diff per golden), and
    `problem`: why it cannot be used (goldens.json edited since, a manifest that is no JSON)."""
    found = []
    for version in reversed(release_versions(goldens_dir)):
        changes = goldens_dir / version / "CHANGES.md"
        entry = {"version": version, "manifest": {}, "problem": None,
                 "changes": changes.read_text(encoding="utf-8", errors="replace") if changes.exists() else ""}
        try:
            entry["manifest"] = read_manifest(goldens_dir, version)
            read_goldens(goldens_dir, version)  # checks goldens.json against the manifest's sha256
        except UNREADABLE as error:
            entry["problem"] = str(error)
        found.append(entry)
    return found


def newest_release(goldens_dir: Path | None) -> Newest:
    """The newest release's goldens by trace id; an unreadable one gives its `problem`, not an error."""
    versions = release_versions(goldens_dir) if goldens_dir else []
    if not versions:
        return Newest()
    try:
        goldens = read_goldens(goldens_dir, versions[-1])
    except UNREADABLE as error:
        return Newest(versions[-1], {}, str(error))
    return Newest(versions[-1], {(g.get("additional_metadata") or {}).get("trace_id"): g for g in goldens})


def outcome(launched: Launched, before: Sequence[str], after: Sequence[str]) -> Launched:
    """What a finished release run did, from the release folders before and after it: the
    version it made, or that it made none (a run that succeeds with nothing new is no release)."""
    made = [v for v in after if v not in before]
    if not launched.ok or not launched.finished:
        return launched
    if made:
        return replace(launched, released=made[-1], output=f"{launched.output}\nreleased {made[-1]}".strip())
    why = f"the accepted labels give the goldens of {before[-1]} again" if before else "no accepted label"
    return replace(launched, output=f"{launched.output}\nnothing was released: {why}".strip())


def pending(goldens_dir: Path, decisions: Mapping[str, Decision]) -> dict[str, list]:
    """What the next release would change, from the label files: accepted traces the newest
    release lacks, released goldens whose expected output a newer accept changes (before and
    after), and released traces whose newest label is no longer an accept."""
    released = newest_release(goldens_dir).goldens
    accepted = {t: d for t, d in decisions.items() if d.decision == "accept"}
    changed = [{"trace_id": t, "golden": released[t].get("name"), "before": released[t].get("expected_output"),
                "after": d.expected_output} for t, d in sorted(accepted.items())
               if t in released and (d.expected_output or "") != (released[t].get("expected_output") or "")]
    withdrawn = {t for t, d in decisions.items() if d.decision in ("reject", "later")} & set(released)
    return {"new": sorted(set(accepted) - set(released)), "changed": changed, "withdrawn": sorted(withdrawn)}


def launch_release(notes: str, released_by: str, env: Mapping[str, str] | None = None) -> Launched:
    """Run `rag-loop release` (the release_goldens job) with this process's deployment settings;
    label files the workspace wrote are whole, so they need not settle."""
    command = [sys.executable, "-m", "jobs_cli", "release", "--notes", notes, "--by", released_by,
               "--settle-seconds", "0"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RELEASE_TIMEOUT_SECONDS,
                              env=dict(env if env is not None else os.environ))
    except subprocess.TimeoutExpired:
        return Launched(False, f"the release did not finish in {RELEASE_TIMEOUT_SECONDS} s")
    lines = [line for line in (done.stdout + done.stderr).splitlines()
             if "release_goldens:" in line or "Error" in line or "message" in line.lower()]
    return Launched(done.returncode == 0, "\n".join(lines[-20:]) or f"exit status {done.returncode}")


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
            run_id = self.launch(notes, released_by)
        except (OSError, ValueError) as error:
            return Launched(False, f"the Dagster webserver at {self.url} did not launch {RELEASE_JOB}: {error}")
        link = f"{self.url.rstrip('/')}/runs/{run_id}"
        deadline = time.monotonic() + self.wait_seconds
        status = "QUEUED"
        while time.monotonic() < deadline:
            try:
                status = self.status(run_id)
            except (OSError, ValueError) as error:
                return Launched(False, f"{RELEASE_JOB}: run {run_id} launched, its status unknown ({error})", link,
                                finished=False)
            if status in FINISHED:
                return Launched(status == "SUCCESS", f"{RELEASE_JOB}: {status} (run {run_id})", link)
            time.sleep(self.poll_seconds)
        return Launched(True, f"{RELEASE_JOB}: still {status} after {self.wait_seconds:.0f} s (run {run_id})", link,
                        finished=False)

    def launch(self, notes: str, released_by: str) -> str:
        locations = self.graphql("{ repositoriesOrError { ... on RepositoryConnection { nodes { name "
                                 "location { name } jobs { name } } } } }")["repositoriesOrError"].get("nodes", [])
        holder = next((r for r in locations if RELEASE_JOB in {j["name"] for j in r["jobs"]}), None)
        if holder is None:
            raise ValueError(f"no code location there has the job {RELEASE_JOB}")
        config = {"ops": {"golden_release": {"config": {"notes": notes, "released_by": released_by}},
                          "curated_labels": {"config": {"settle_seconds": 0}}}}  # the workspace writes whole files
        launched = self.graphql("""
            mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
              __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
              ... on RunConfigValidationInvalid { errors { message } } } }""",
            {"params": {"selector": {"repositoryLocationName": holder["location"]["name"],
                                     "repositoryName": holder["name"], "jobName": RELEASE_JOB},
                        "runConfigData": config}})["launchRun"]
        if launched["__typename"] != "LaunchRunSuccess":
            raise ValueError(f"{launched['__typename']}: {launched.get('message') or launched.get('errors')}")
        return launched["run"]["runId"]

    def status(self, run_id: str) -> str:
        return self.graphql("query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }",
                            {"id": run_id})["runOrError"].get("status", "unknown")

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        request = urllib.request.Request(f"{self.url.rstrip('/')}/graphql", method="POST",
                                         data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.loads(response.read())
        if body.get("errors"):
            raise ValueError("; ".join(str(e.get("message")) for e in body["errors"]))
        return body["data"]
