"""`golden_releases` and `golden_lineage`, rebuilt from the release files on disk."""

from __future__ import annotations

from pathlib import Path

import duckdb

from rag_loop.store.ddl import GOLDEN_LINEAGE_COLUMNS, GOLDEN_RELEASES_COLUMNS
from rag_loop.store.releases import read_goldens, read_manifest, release_versions


def refresh_release_tables(con: duckdb.DuckDBPyConnection, goldens_dir: Path) -> int:
    """(Re)build `golden_releases` and `golden_lineage` from the release files on disk.

    Lineage: release → golden → label → traces (the representative and the variants it stood
    for) → cluster, and the incidents its traces belong to. Returns the number of releases.
    """
    releases, lineage = [], []
    for version in release_versions(goldens_dir):
        manifest = read_manifest(goldens_dir, version)
        releases.append({"version": version, "parent_version": manifest["parent_version"],
                         "created_at": manifest["created_at"], "released_by": manifest["released_by"],
                         "notes": manifest["notes"], "goldens": manifest["goldens"],
                         **{k: manifest["diff"].get(k, 0) for k in ("added", "removed", "changed",
                                                                    "redacted_differently")},
                         "redacted": sum(manifest["redaction"].values()),
                         "sha256": manifest["sha256"], "path": str(goldens_dir / version)})
        for golden in read_goldens(goldens_dir, version):
            meta = golden["additional_metadata"]
            lineage.append({"version": version, "golden": golden["name"], "label_id": meta["label_id"],
                            "trace_id": meta["trace_id"], "source_trace_ids": meta["source_trace_ids"],
                            "cluster_id": meta["cluster_id"], "incidents": meta.get("incidents") or []})
    _replace(con, "golden_releases", releases, GOLDEN_RELEASES_COLUMNS)
    _replace(con, "golden_lineage", lineage, GOLDEN_LINEAGE_COLUMNS)
    return len(releases)


def _replace(con: duckdb.DuckDBPyConnection, name: str, rows: list[dict], columns: str) -> None:
    con.execute(f"CREATE OR REPLACE TABLE {name} ({columns})")
    if rows:
        keys = list(rows[0])
        con.executemany(f"INSERT INTO {name} ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})",
                        [[row[k] for k in keys] for row in rows])
