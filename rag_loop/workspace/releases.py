"""Golden releases as the workspace shows them: the releases on disk with their changes, what
the next one would take in, and what a release run did (`outcome`). The release itself is made
by a callable the workspace is given (`rag_loop_dagster.releasing`: the release_goldens job
through the Dagster webserver, or in its own process); the workspace never opens the database.

A release that fails its integrity check (goldens.json edited after it was made) is shown with
its error on the releases page; it never stops the workspace's other pages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rag_loop.store.releases import ReleaseIntegrityError, read_goldens, read_manifest, release_versions
from rag_loop.workspace.store import Decision


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
