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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from rag_loop.redaction import Redactor, false_positives, planted_recall
from rag_loop.storage import retrieval_contexts
from rag_loop.tables import GOLDEN_LINEAGE_COLUMNS, GOLDEN_RELEASES_COLUMNS

VERSION_PATTERN = re.compile(r"^v(\d{4,})$")
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


def golden_id(trace_id: str) -> str:
    """One golden per labeled trace: a relabel changes the golden, it does not add one."""
    return "g-" + hashlib.sha256(trace_id.encode()).hexdigest()[:12]


def build_goldens(con: duckdb.DuckDBPyConnection, redactor: Redactor) -> list[dict[str, Any]]:
    """DeepEval goldens from the current accepted labels, redacted, sorted by name."""
    rows = con.execute("""
        SELECT l.*, coalesce(l.input, t.original_query) AS golden_input, t.language,
               t.query_type, t.tenant
        FROM current_labels l JOIN raw_traces t USING (trace_id)
        WHERE l.decision = 'accept' ORDER BY l.trace_id""").df()
    if rows.empty:
        return []
    contexts = retrieval_contexts(con, rows["trace_id"].tolist())
    chunk_text = dict(con.execute("SELECT chunk_id, text FROM document_chunks").fetchall())
    goldens = []
    for row in rows.to_dict("records"):
        sources = list(row["expected_sources"])
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
            },
        })
    return goldens


def _number(value: Any) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), 3)


@dataclass
class Diff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "removed": len(self.removed), "changed": len(self.changed)}


def diff_goldens(parent: Sequence[dict], current: Sequence[dict]) -> Diff:
    """Goldens added, removed and changed (same name, other content), by name."""
    before, after = {g["name"]: g for g in parent}, {g["name"]: g for g in current}
    return Diff(added=sorted(after.keys() - before.keys()), removed=sorted(before.keys() - after.keys()),
                changed=sorted(n for n in after.keys() & before.keys() if after[n] != before[n]))


@dataclass
class ReleaseResult:
    version: str | None  # the new version, or None when nothing changed
    parent: str | None
    message: str
    diff: Diff = field(default_factory=Diff)
    manifest: dict[str, Any] = field(default_factory=dict)


def release_versions(goldens_dir: Path) -> list[str]:
    """Complete releases, oldest first."""
    if not goldens_dir.is_dir():
        return []
    versions = [p.name for p in goldens_dir.iterdir()
                if VERSION_PATTERN.match(p.name) and (p / "manifest.json").is_file()]
    return sorted(versions, key=lambda v: int(v[1:]))


def read_goldens(goldens_dir: Path, version: str) -> list[dict[str, Any]]:
    return json.loads((goldens_dir / version / "goldens.json").read_text(encoding="utf-8"))


def serialize(goldens: Sequence[dict]) -> str:
    return json.dumps(list(goldens), ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def publish_release(goldens_dir: Path, goldens: Sequence[dict], notes: str, released_by: str,
                    redaction: dict[str, int], now: datetime | None = None,
                    attempts: int = 50) -> ReleaseResult:
    """Write the next `vNNNN/` unless it would equal the newest release."""
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
        diff = diff_goldens(parent_goldens, goldens)
        manifest = _manifest(version, parent, goldens, payload, notes, released_by, redaction,
                             diff, now or datetime.now(UTC))
        staging = Path(tempfile.mkdtemp(dir=goldens_dir, prefix=STAGING_PREFIX))
        try:
            _write(staging / "goldens.json", payload)
            _write(staging / "manifest.json", json.dumps(manifest, ensure_ascii=False, indent=1) + "\n")
            _write(staging / "CHANGES.md", _changes(manifest, diff, parent_goldens, goldens))
            os.chmod(staging, PUBLISHED_DIR_MODE)  # mkdtemp makes it 0700
            os.rename(staging, goldens_dir / version)  # fails if another release took the number
            _fsync_directory(goldens_dir)
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
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(path, PUBLISHED_FILE_MODE)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


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


def _manifest(version: str, parent: str | None, goldens: Sequence[dict], payload: str, notes: str,
              released_by: str, redaction: dict[str, int], diff: Diff, now: datetime) -> dict[str, Any]:
    meta = [g["additional_metadata"] for g in goldens]
    return {
        "version": version, "parent_version": parent, "created_at": now.isoformat(),
        "released_by": released_by, "notes": notes, "goldens": len(goldens),
        "counts": {
            "origin": dict(sorted(Counter(m["origin"] for m in meta).items())),
            "failure_type": dict(sorted(Counter(m["failure_type"] for m in meta).items())),
            "tag": dict(sorted(Counter(t for m in meta for t in m["tags"]).items())),
            "language": dict(sorted(Counter(str(m.get("language")) for m in meta).items())),
        },
        "sha256": hashlib.sha256(payload.encode()).hexdigest(), "redaction": redaction,
        "diff": diff.counts(), "format": "DeepEval goldens JSON (EvaluationDataset.add_goldens_from_json_file)",
    }


def _changes(manifest: dict, diff: Diff, parent: Sequence[dict], current: Sequence[dict]) -> str:
    before, after = {g["name"]: g for g in parent}, {g["name"]: g for g in current}
    lines = [f"## {manifest['version']} ({manifest['created_at'][:19]}Z, by {manifest['released_by'] or 'unknown'})",
             "", manifest["notes"] or "(no notes)", "",
             (f"{manifest['goldens']} goldens; parent {manifest['parent_version'] or 'none'}: "
              f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.changed)} changed."), ""]
    for title, names, source in (("Added", diff.added, after), ("Removed", diff.removed, before),
                                 ("Changed", diff.changed, after)):
        if names:
            lines.append(f"### {title}")
            lines += [f"- `{n}` {source[n]['additional_metadata']['failure_type']}: "
                      f"{source[n]['input'][:100]}" for n in names]
            lines.append("")
    return "\n".join(lines) + "\n"


def write_changelog(goldens_dir: Path) -> None:
    """CHANGELOG.md: every release's CHANGES.md, newest first (rewritten atomically).

    Under a lock, so that of two releases finishing together the one writing last lists both.
    """
    with open(goldens_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = [(goldens_dir / v / "CHANGES.md").read_text(encoding="utf-8")
                   for v in reversed(release_versions(goldens_dir))]
        handle, temporary = tempfile.mkstemp(dir=goldens_dir, prefix=CHANGELOG_PREFIX)
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write("# Golden releases\n\n" + "\n".join(entries))
        os.chmod(temporary, PUBLISHED_FILE_MODE)  # mkstemp makes it 0600
        os.replace(temporary, goldens_dir / "CHANGELOG.md")
        _fsync_directory(goldens_dir)


def refresh_release_tables(con: duckdb.DuckDBPyConnection, goldens_dir: Path) -> int:
    """(Re)build `golden_releases` and `golden_lineage` from the release files on disk.

    Lineage: release → golden → label → traces (the representative and the variants it stood
    for) → cluster. Returns the number of releases.
    """
    releases, lineage = [], []
    for version in release_versions(goldens_dir):
        manifest = json.loads((goldens_dir / version / "manifest.json").read_text(encoding="utf-8"))
        releases.append({"version": version, "parent_version": manifest["parent_version"],
                         "created_at": manifest["created_at"], "released_by": manifest["released_by"],
                         "notes": manifest["notes"], "goldens": manifest["goldens"],
                         **manifest["diff"], "redacted": sum(manifest["redaction"].values()),
                         "sha256": manifest["sha256"], "path": str(goldens_dir / version)})
        for golden in read_goldens(goldens_dir, version):
            meta = golden["additional_metadata"]
            lineage.append({"version": version, "golden": golden["name"], "label_id": meta["label_id"],
                            "trace_id": meta["trace_id"], "source_trace_ids": meta["source_trace_ids"],
                            "cluster_id": meta["cluster_id"]})
    _replace(con, "golden_releases", releases, GOLDEN_RELEASES_COLUMNS)
    _replace(con, "golden_lineage", lineage, GOLDEN_LINEAGE_COLUMNS)
    return len(releases)


def _replace(con: duckdb.DuckDBPyConnection, name: str, rows: list[dict], columns: str) -> None:
    con.execute(f"CREATE OR REPLACE TABLE {name} ({columns})")
    if rows:
        keys = list(rows[0])
        con.executemany(f"INSERT INTO {name} ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})",
                        [[row[k] for k in keys] for row in rows])
