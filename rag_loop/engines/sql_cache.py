"""The DuckDB engine's compiled SQL kept across processes: every Dagster run, `rag-loop run` and
test worker is a fresh process, which would otherwise build and compile each stage's Ibis
expression again (0.1–1 s a stage, twice for its first check of placed settings).

An entry is found only by everything the SQL depends on: the stage's name, its build (a function
of rag_loop), its canonical settings (rag_loop.engines.literals), its inputs' schemas, and a
fingerprint of rag_loop's source and of the Python, Ibis, sqlglot and DuckDB versions — a changed
line of rag_loop or an upgrade compiles afresh. Each entry holds its key, checked on reading, and
is written whole (a temporary file renamed); one that cannot be read is a miss.

It lives in the user's cache folder (`$XDG_CACHE_HOME/rag-loop/sql`, else `~/.cache/rag-loop/sql`),
shared by every deployment (it holds no deployment's data, only SQL text); `RAG_LOOP_SQL_CACHE`
moves it, and set empty turns it off. Read when called, never at import."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import types
import uuid
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

VARIABLE = "RAG_LOOP_SQL_CACHE"
PACKAGE = Path(__file__).resolve().parent.parent  # rag_loop/
KEPT = 500  # entries (10-50 kB each); the least recently used go beyond


def cache_folder(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where the entries live; None when `RAG_LOOP_SQL_CACHE` is set empty (no cache)."""
    env = os.environ if environ is None else environ
    if VARIABLE in env:
        return Path(env[VARIABLE]) if env[VARIABLE] else None
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rag-loop" / "sql"


@functools.cache
def code_fingerprint() -> str:
    """rag_loop's `fingerprint`, once a process (12 ms)."""
    return fingerprint(PACKAGE)


def fingerprint(package: Path) -> str:
    """A digest of every Python file of `package` and of the versions that shape the SQL."""
    digest = hashlib.blake2b(digest_size=16)
    for name in ("ibis-framework", "sqlglot", "duckdb"):
        digest.update(f"{name}={version(name)}\n".encode())
    digest.update(f"python={sys.version_info[:3]}\n".encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(f"{path.relative_to(package)}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def stage_key(engine: type, name: str, build: Callable, settings: Any,
              schemas: Sequence[Any]) -> list[str] | None:
    """The entry's key, or None when the SQL may depend on what no key can see: a build or an
    engine defined outside rag_loop (its code is not in the fingerprint), a closure (its
    captured values), settings whose text shows an object's address."""
    text = repr(settings)
    if (not isinstance(build, types.FunctionType) or build.__closure__ or "<" in build.__qualname__
            or not _ours(build) or not _ours(engine) or " at 0x" in text):
        return None
    return [code_fingerprint(), f"{engine.__module__}.{engine.__qualname__}", name,
            f"{build.__module__}.{build.__qualname__}", text, repr(tuple(schemas))]


def _ours(thing: Any) -> bool:
    return thing.__module__ == "rag_loop" or thing.__module__.startswith("rag_loop.")


def read(key: list[str]) -> str | None:
    """The SQL stored under `key`; None when there is none, or it cannot be read or is not
    this key's."""
    path = _path(key)
    if path is None:
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if entry["key"] != key or not isinstance(entry["sql"], str):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    with contextlib.suppress(OSError):  # a folder shipped read-only is still read
        os.utime(path)  # recently used
    return entry["sql"]


def write(key: list[str], sql: str) -> None:
    """Store the SQL under `key`, whole or not at all; a folder that cannot be written is no
    error (the next process compiles again)."""
    path = _path(key)
    if path is None:
        return
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps({"key": key, "sql": sql}), encoding="utf-8")
        os.replace(partial, path)
        _prune(path.parent)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def _path(key: list[str]) -> Path | None:
    folder = cache_folder()
    if folder is None:
        return None
    return folder / f"{hashlib.sha256(json.dumps(key).encode()).hexdigest()}.json"


def _prune(folder: Path) -> None:
    """Beyond KEPT entries, the least recently used go."""
    entries = list(folder.glob("*.json"))
    if len(entries) <= KEPT:
        return
    for path in sorted(entries, key=lambda p: p.stat().st_mtime)[:len(entries) - KEPT]:
        path.unlink(missing_ok=True)
