"""Golden releases as the workspace shows and makes them: the releases on disk with their
changes, what the next one would take in, and the release itself through the project's
`release_goldens` job (`rag-loop release`, in its own process: the job writes the database,
the workspace never opens it)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rag_loop.store.releases import read_goldens, read_manifest, release_versions
from rag_loop.workspace.store import Decision

RELEASE_TIMEOUT_SECONDS = 900


@dataclass
class Launched:
    ok: bool
    output: str


def releases(goldens_dir: Path) -> list[dict]:
    """Every release, newest first: manifest figures and its CHANGES.md (the diff per golden)."""
    found = []
    for version in reversed(release_versions(goldens_dir)):
        manifest = read_manifest(goldens_dir, version)
        changes = goldens_dir / version / "CHANGES.md"
        found.append({"version": version, "manifest": manifest,
                      "changes": changes.read_text(encoding="utf-8") if changes.exists() else ""})
    return found


def released_goldens(goldens_dir: Path) -> tuple[str | None, dict[str, dict]]:
    """The newest release's version and its goldens by trace id."""
    versions = release_versions(goldens_dir)
    if not versions:
        return None, {}
    return versions[-1], {(g.get("additional_metadata") or {}).get("trace_id"): g
                          for g in read_goldens(goldens_dir, versions[-1])}


def pending(goldens_dir: Path, decisions: Mapping[str, Decision]) -> dict[str, list]:
    """What the next release would change, from the label files: accepted traces the newest
    release lacks, released goldens whose expected output a newer accept changes (before and
    after), and released traces whose newest label is no longer an accept."""
    _, released = released_goldens(goldens_dir)
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
