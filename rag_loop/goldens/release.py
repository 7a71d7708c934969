"""Versioned golden releases: DeepEval's goldens JSON, manifest, changelog, immutable on disk.

A release directory `vNNNN/` appears only by renaming a complete temporary directory, so a
failed run leaves no half-written release and a version is never rewritten. Two releases
started at once: the second rename fails, it re-reads the newest release and either finds
nothing left to release or takes the next number.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from rag_loop.goldens.manifest import Diff, changes_markdown, diff_goldens, manifest_of
from rag_loop.goldens.redaction import DEFAULT_PHONE_REGIONS, KINDS, Redactor, false_positives, planted_recall
from rag_loop.store.files import fsync_directory, write_atomically
from rag_loop.store.incidents import trace_incidents
from rag_loop.store.releases import read_goldens, read_manifest, release_versions, serialize
from rag_loop.store.tables import has_table
from rag_loop.store.traces import retrieval_contexts

# what a killed release leaves: its staging folder, a temporary of the changelog
STAGING_PREFIX, CHANGELOG_PREFIX = ".tmp-", ".CHANGELOG."
STALE_STAGING = timedelta(hours=1)
# releases are published artifacts: readable by an evaluator running as another user
PUBLISHED_DIR_MODE, PUBLISHED_FILE_MODE = 0o755, 0o644


def redaction_quality(con: duckdb.DuckDBPyConnection, redactor: Redactor) -> dict[str, float]:
    """How well `redactor` works, for the release metadata: recall on the planted set per
    kind, and what it would remove from the knowledge base (likely false positives)."""
    knowledge = [t for (t,) in con.execute("SELECT text FROM document_chunks").fetchall()]
    return {**{f"redaction_recall_{k}": v for k, v in planted_recall(redactor).items()},
            **{f"redaction_kb_false_positives_{k}": v
               for k, v in false_positives(redactor, knowledge).items()}}


MAX_NOTES_CHARS, MAX_RELEASER_CHARS = 10_000, 200
# C0 controls but tab, line feed and carriage return, and DEL: a NUL cannot even be passed to the
# release process (an argument ends at it), the others are no text a reader can see
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def release_request_errors(notes: str, released_by: str) -> list[str]:
    """What is wrong with a release's notes and its releaser, in the releaser's words: both are
    kept in the manifest, so both must be given, be text a reader can see and be of a sane length."""
    errors = []
    for name, value, most, empty in (("notes", notes, MAX_NOTES_CHARS, "say what this release changes"),
                                     ("released_by", released_by, MAX_RELEASER_CHARS,
                                      "say who releases (a name or e-mail): the manifest keeps it")):
        if not value.strip():
            errors.append(f"{name}: {empty}")
        elif len(value) > most:
            errors.append(f"{name}: {len(value):,} characters, at most {most:,}")
        elif found := _CONTROL.search(value):
            errors.append(f"{name}: a control character (U+{ord(found.group()):04X}) at position "
                          f"{found.start() + 1}: remove it")
    return errors


def golden_id(trace_id: str) -> str:
    """One golden per labeled trace: a relabel changes the golden, it does not add one."""
    return "g-" + hashlib.sha256(trace_id.encode()).hexdigest()[:12]


class MissingTraceError(RuntimeError):
    """An accepted label whose trace is no longer stored: releasing would drop its golden."""


def missing_traces(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Accepted labels whose trace row is gone, each with what became of the trace id."""
    has_otlp = has_table(con, "otlp_traces")
    rows = con.execute(f"""
        SELECT l.trace_id, {"o.state, o.reason" if has_otlp else "NULL, NULL"}
        FROM current_labels l
        {"LEFT JOIN otlp_traces o USING (trace_id)" if has_otlp else ""}
        WHERE l.decision = 'accept' AND l.trace_id NOT IN (SELECT trace_id FROM raw_traces)
        ORDER BY 1""").fetchall()
    return [f"{trace_id}: " + (f"{state} ({reason})" if state else "no longer in raw_traces")
            for trace_id, state, reason in rows]


def build_goldens(con: duckdb.DuckDBPyConnection, redactor: Redactor) -> list[dict[str, Any]]:
    """DeepEval goldens from the current accepted labels, redacted, sorted by name. Raises
    MissingTraceError when a label's trace is gone (a golden is never dropped silently)."""
    if missing := missing_traces(con):
        raise MissingTraceError(
            f"{len(missing)} accepted labels have no stored trace, so their goldens cannot be built: "
            + "; ".join(missing[:20]) + ". Restore the traces (re-ingest the files) or relabel.")
    rows = con.execute("""
        SELECT l.*, coalesce(l.input, t.original_query) AS golden_input, t.language,
               t.query_type, t.tenant
        FROM current_labels l JOIN raw_traces t USING (trace_id)
        WHERE l.decision = 'accept' ORDER BY l.trace_id""").df()
    if rows.empty:
        return []
    contexts = retrieval_contexts(con, rows["trace_id"].tolist())
    chunk_text = dict(con.execute("SELECT chunk_id, text FROM document_chunks").fetchall())
    from_incidents = trace_incidents(con)
    goldens = []
    for row in rows.to_dict("records"):
        sources = list(row["expected_sources"])
        # the incidents whose failing traces the golden stands for (issue 48): kept only when
        # there are some, so that goldens of no incident are byte for byte what they were
        incidents = sorted({i for t in (row["trace_id"], *row["source_trace_ids"])
                            for i in from_incidents.get(t, ())})
        context = [chunk_text[s] for s in sources if s in chunk_text]
        goldens.append({
            "name": golden_id(row["trace_id"]),
            "input": redactor.redact(row["golden_input"]),
            "expected_output": redactor.redact(row["expected_output"]),
            "context": [redactor.redact(t) for t in context] or None,
            "retrieval_context": [redactor.redact(c["text"]) for c in contexts.get(row["trace_id"], [])
                                  if c["text"]] or None,
            "additional_metadata": {
                "origin": row["origin"], "failure_type": row["failure_type"],
                "tags": [redactor.redact(t) for t in row["tags"]], "expected_sources": sources,
                "source_trace_ids": list(row["source_trace_ids"]), "trace_id": row["trace_id"],
                "cluster_id": row["cluster_id"], "cluster_weight": _number(row["cluster_weight"]),
                "priority": row["priority"], "curator": redactor.redact(row["curator"]),
                "labeled_at": row["labeled_at"].isoformat(), "label_id": row["label_id"],
                "language": row["language"], "query_type": row["query_type"], "tenant": row["tenant"],
                **({"incidents": incidents} if incidents else {}),
            },
        })
    return goldens


def _number(value: Any) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), 3)


@dataclass
class ReleaseResult:
    version: str | None  # the new version, or None when nothing changed
    parent: str | None
    message: str
    diff: Diff = field(default_factory=Diff)
    manifest: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RedactionPolicy:
    """What a release redacts: part of the release, recorded in its manifest and inherited by
    the next release unless a release changes it."""

    kinds: tuple[str, ...] = KINDS
    keep_email_domains: tuple[str, ...] = ()
    phone_regions: tuple[str, ...] = DEFAULT_PHONE_REGIONS

    def redactor(self) -> Redactor:
        return Redactor(self.kinds, self.keep_email_domains, self.phone_regions)

    def as_dict(self) -> dict[str, list[str]]:
        return {"kinds": list(self.kinds), "keep_email_domains": sorted(self.keep_email_domains),
                "phone_regions": list(self.phone_regions)}


def release_policy(goldens_dir: Path, kinds: Sequence[str] | None = None,
                   keep_email_domains: Sequence[str] | None = None) -> tuple[RedactionPolicy, RedactionPolicy | None]:
    """(the next release's policy, the newest release's): the newest release's policy with the
    fields given here changed (a release made before policies were recorded counts as the
    default policy)."""
    versions = release_versions(goldens_dir)
    recorded = read_manifest(goldens_dir, versions[-1]).get("redaction_policy") if versions else None
    parent = RedactionPolicy(**{k: tuple(v) for k, v in recorded.items()}) if recorded else \
        (RedactionPolicy() if versions else None)
    base = parent or RedactionPolicy()
    return RedactionPolicy(tuple(kinds) if kinds is not None else base.kinds,
                           tuple(keep_email_domains) if keep_email_domains is not None else base.keep_email_domains,
                           base.phone_regions), parent


def publish_release(goldens_dir: Path, goldens: Sequence[dict], notes: str, released_by: str,
                    redaction: dict[str, int], now: datetime | None = None, attempts: int = 50,
                    policy: RedactionPolicy | None = None,
                    under_parent_policy: Sequence[dict] | None = None) -> ReleaseResult:
    """Write the next `vNNNN/` unless it would equal the newest release. `policy` is recorded;
    `under_parent_policy` (the same goldens redacted with the parent's policy) tells content
    changes from policy changes in the diff."""
    policy = policy or RedactionPolicy()
    goldens_dir.mkdir(parents=True, exist_ok=True)
    sweep_stale_staging(goldens_dir)
    payload = serialize(goldens)
    for _ in range(attempts):
        versions = release_versions(goldens_dir)
        parent = versions[-1] if versions else None
        parent_goldens = read_goldens(goldens_dir, parent) if parent else []
        if parent and serialize(parent_goldens) == payload:
            return ReleaseResult(None, parent, f"nothing changed since {parent}: no new release")
        if not goldens:
            return ReleaseResult(None, parent, "no accepted labels: nothing to release")
        number = max((int(v[1:]) for v in versions), default=0) + 1
        version = f"v{number:04d}"
        parent_policy = read_manifest(goldens_dir, parent).get("redaction_policy") if parent else None
        diff = diff_goldens(parent_goldens, goldens, under_parent_policy)
        manifest = manifest_of(version, parent, goldens, payload, notes, released_by, redaction,
                               diff, now or datetime.now(UTC), policy.as_dict(), parent_policy)
        staging = Path(tempfile.mkdtemp(dir=goldens_dir, prefix=STAGING_PREFIX))
        try:
            _write(staging / "goldens.json", payload)
            _write(staging / "manifest.json", json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
            _write(staging / "CHANGES.md", changes_markdown(manifest, diff, parent_goldens, goldens))
            os.chmod(staging, PUBLISHED_DIR_MODE)  # mkdtemp makes it 0700
            os.rename(staging, goldens_dir / version)  # fails if another release took the number
            fsync_directory(goldens_dir)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if (goldens_dir / version).exists():
                continue
            raise
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        write_changelog(goldens_dir)
        return ReleaseResult(version, parent, f"released {version} ({diff.counts()})", diff, manifest)
    raise RuntimeError(f"could not take a release number after {attempts} attempts")


def _write(path: Path, text: str) -> None:
    write_atomically(path, text, PUBLISHED_FILE_MODE, durable=True)


def sweep_stale_staging(goldens_dir: Path, age: timedelta = STALE_STAGING) -> list[str]:
    """Remove what killed releases left behind: staging folders and changelog temporaries not
    touched for `age` (a release in progress writes its staging folder within seconds)."""
    removed = []
    for path in goldens_dir.iterdir():
        if not path.name.startswith((STAGING_PREFIX, CHANGELOG_PREFIX)):
            continue
        try:
            if time.time() - path.stat().st_mtime < age.total_seconds():
                continue
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            removed.append(path.name)
        except FileNotFoundError:
            continue  # another release swept it
    return removed


def write_changelog(goldens_dir: Path) -> None:
    """CHANGELOG.md: every release's CHANGES.md, newest first (rewritten atomically).

    Under a lock, so that of two releases finishing together the one writing last lists both.
    """
    with open(goldens_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = [(goldens_dir / v / "CHANGES.md").read_text(encoding="utf-8")
                   for v in reversed(release_versions(goldens_dir))]
        write_atomically(goldens_dir / "CHANGELOG.md", "# Golden releases\n\n" + "\n".join(entries),
                         PUBLISHED_FILE_MODE, durable=True)
