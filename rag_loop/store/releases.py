"""Golden releases on disk, as every stage reads them: `vNNNN/` folders holding goldens.json,
manifest.json and CHANGES.md; a version is complete once its manifest is there. A release is
never edited: every read checks goldens.json against the manifest's sha256."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

VERSION_PATTERN = re.compile(r"^v(\d{4,})$")


class ReleaseIntegrityError(ValueError):
    """A release's goldens.json is not the file its manifest was made for."""


def release_versions(goldens_dir: Path) -> list[str]:
    """Complete releases, oldest first."""
    if not goldens_dir.is_dir():
        return []
    versions = [p.name for p in goldens_dir.iterdir()
                if VERSION_PATTERN.match(p.name) and (p / "manifest.json").is_file()]
    return sorted(versions, key=lambda v: int(v[1:]))


def read_manifest(goldens_dir: Path, version: str) -> dict[str, Any]:
    return json.loads((goldens_dir / version / "manifest.json").read_text(encoding="utf-8"))


def read_goldens(goldens_dir: Path, version: str) -> list[dict[str, Any]]:
    """The goldens of a release, once their bytes match the manifest's sha256."""
    path = goldens_dir / version / "goldens.json"
    payload = path.read_bytes()
    expected, found = read_manifest(goldens_dir, version).get("sha256"), hashlib.sha256(payload).hexdigest()
    if found != expected:
        raise ReleaseIntegrityError(
            f"{path} does not match its manifest (sha256 {found}, manifest says {expected}): a "
            "release is never edited; restore the file, or label again and make a new release")
    return json.loads(payload.decode("utf-8"))


def serialize(goldens: Sequence[dict]) -> str:
    return json.dumps(list(goldens), ensure_ascii=False, indent=1, sort_keys=True) + "\n"
