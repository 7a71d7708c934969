"""What a release says about itself: its manifest (counts, hash, redaction, diff) and CHANGES.md,
and the diff of two releases' goldens by name."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class Diff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    redacted_differently: list[str] = field(default_factory=list)  # only the redaction policy differs

    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "removed": len(self.removed), "changed": len(self.changed),
                "redacted_differently": len(self.redacted_differently)}


def diff_goldens(parent: Sequence[dict], current: Sequence[dict],
                 current_under_parent_policy: Sequence[dict] | None = None) -> Diff:
    """Goldens added, removed and changed (same name, other content), by name. A golden that
    differs from its parent only because the redaction policy changed (redacted with the
    parent's policy it is the parent's) is `redacted_differently`, not changed."""
    before, after = {g["name"]: g for g in parent}, {g["name"]: g for g in current}
    old_policy = {g["name"]: g for g in current_under_parent_policy or ()}
    differ = sorted(n for n in after.keys() & before.keys() if after[n] != before[n])
    by_policy = [n for n in differ if old_policy.get(n) == before[n]]
    return Diff(added=sorted(after.keys() - before.keys()), removed=sorted(before.keys() - after.keys()),
                changed=[n for n in differ if n not in by_policy], redacted_differently=by_policy)


def manifest_of(version: str, parent: str | None, goldens: Sequence[dict], payload: str, notes: str,
                released_by: str, redaction: dict[str, int], diff: Diff, now: datetime,
                policy: dict[str, Any], parent_policy: dict[str, Any] | None) -> dict[str, Any]:
    meta = [g["additional_metadata"] for g in goldens]
    change = {"from": parent_policy, "to": policy} if parent and parent_policy != policy else None
    return {
        "version": version, "parent_version": parent, "created_at": now.isoformat(),
        "released_by": released_by, "notes": notes, "goldens": len(goldens),
        "counts": {
            "origin": dict(sorted(Counter(m["origin"] for m in meta).items())),
            "failure_type": dict(sorted(Counter(m["failure_type"] for m in meta).items())),
            "tag": dict(sorted(Counter(t for m in meta for t in m["tags"]).items())),
            "language": dict(sorted(Counter(str(m.get("language")) for m in meta).items())),
            "incident": dict(sorted(Counter(i for m in meta for i in m.get("incidents") or ()).items())),
        },
        "sha256": hashlib.sha256(payload.encode()).hexdigest(), "redaction": redaction,
        "redaction_policy": policy, "redaction_policy_change": change,
        # golden lineage to incidents (issue 48): incident id -> the goldens built from its traces
        "incidents": {i: sorted(g["name"] for g, m in zip(goldens, meta) if i in (m.get("incidents") or ()))
                      for i in sorted({i for m in meta for i in m.get("incidents") or ()})},
        "diff": diff.counts(), "format": "DeepEval goldens JSON (EvaluationDataset.add_goldens_from_json_file)",
    }


def changes_markdown(manifest: dict, diff: Diff, parent: Sequence[dict], current: Sequence[dict]) -> str:
    before, after = {g["name"]: g for g in parent}, {g["name"]: g for g in current}
    lines = [f"## {manifest['version']} ({manifest['created_at'][:19]}Z, by {manifest['released_by'] or 'unknown'})",
             "", manifest["notes"] or "(no notes)", "",
             (f"{manifest['goldens']} goldens; parent {manifest['parent_version'] or 'none'}: "
              f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.changed)} changed."), ""]
    if incidents := manifest.get("incidents"):  # issue 48: goldens from incidents' failing traces
        lines += ["From incidents: " + "; ".join(f"{i} ({len(names)} goldens)" for i, names in incidents.items())
                  + ".", ""]
    if change := manifest.get("redaction_policy_change"):
        before_policy = change["from"] or {}
        moved = {k: before_policy.get(k) for k in change["to"] if before_policy.get(k) != change["to"][k]}
        lines += ["Redaction policy changed: " + "; ".join(f"{k}: {v} → {change['to'][k]}" for k, v in moved.items())
                  + f" ({len(diff.redacted_differently)} goldens differ by it alone).", ""]
    for title, names, source in (("Added", diff.added, after), ("Removed", diff.removed, before),
                                 ("Changed", diff.changed, after),
                                 ("Redacted differently (policy change only)", diff.redacted_differently, after)):
        if names:
            lines.append(f"### {title}")
            lines += [f"- `{n}` {source[n]['additional_metadata']['failure_type']}: "
                      f"{source[n]['input'][:100]}" for n in names]
            lines.append("")
    return "\n".join(lines) + "\n"


