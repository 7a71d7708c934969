"""Golden releases on disk, as every stage reads them: `vNNNN/` folders holding goldens.json,
manifest.json and CHANGES.md; a version is complete once its manifest is there."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

VERSION_PATTERN = re.compile(r"^v(\d{4,})$")


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
