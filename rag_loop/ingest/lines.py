"""Read a JSONL file (plain or gzip) as numbered lines, quarantining what is not text.

The fast path lets Arrow's multithreaded CSV reader split lines (one binary column, no
quoting); it keeps line numbers exact because empty lines are kept. Anything it cannot do
exactly (a line longer than its block, a stray delimiter byte, a bad gzip) falls back to a
plain Python reader that is slow but exact.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

RAW_PREVIEW_CHARS = 2000
_DELIMITER = "\x1f"  # never valid unescaped inside a JSON line


@dataclass(frozen=True)
class Rejected:
    """A record that could not be stored, with its reason and a truncated copy of its text."""

    line_no: int
    reason: str
    raw: str
    span_id: str | None = None  # OTLP: the span refused, its neighbours on the line are kept


@dataclass
class LineBatch:
    """Consecutive lines of one file: `lines` has columns line_no (int64) and raw (string)."""

    lines: pa.Table
    rejected: list[Rejected] = field(default_factory=list)


def preview(raw: bytes | str) -> str:
    """The text kept in quarantine: decoded leniently and truncated."""
    if isinstance(raw, bytes):
        raw = raw[: RAW_PREVIEW_CHARS * 4].decode("utf-8", errors="replace")
    return raw[:RAW_PREVIEW_CHARS]


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


def open_binary(path: Path):
    """Open a file for reading bytes, decompressing gzip whatever its name."""
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def first_lines(path: Path, count: int, limit: int = 1 << 16) -> list[bytes]:
    """The first `count` non-blank lines (the first `limit` bytes of each), for sniffing the format."""
    found: list[bytes] = []
    with open_binary(path) as handle:
        while len(found) < count and (line := handle.readline(limit)):
            if line.strip():
                found.append(line)
            while not line.endswith(b"\n") and (line := handle.readline(limit)):
                pass  # skip the rest of a long line
    return found


class NeedsExactReader(Exception):
    """The fast reader cannot read this file exactly: read it again with `exact=True`."""


def read_as_glob(path: Path) -> bool:
    """Whether DuckDB's readers (read_json, read_csv) would take the path for a pattern and
    read every file it matches (`?.jsonl` is also `a.jsonl`): such a file is read in Python."""
    return any(c in str(path) for c in "*?[{")


def iter_line_batches(path: Path, max_record_bytes: int, exact: bool = False,
                      batch_bytes: int = 32 << 20) -> Iterator[LineBatch]:
    """Yield the file's lines in order, with oversized and non-UTF-8 lines rejected.

    The fast reader may raise `NeedsExactReader` after it yielded batches; the caller then
    discards what it did with them and reads again with `exact=True`.
    """
    if exact:
        return _python_batches(path, max_record_bytes, batch_rows=100_000)
    return _arrow_batches(path, max_record_bytes, batch_bytes)


def _arrow_batches(path: Path, max_record_bytes: int, batch_bytes: int) -> Iterator[LineBatch]:
    next_line = 1
    with open_binary(path) as handle:
        for chunk in whole_line_chunks(handle, batch_bytes):
            raw = _split_lines(chunk)
            line_no = pa.array(np.arange(next_line, next_line + len(raw), dtype=np.int64))
            next_line += len(raw)
            yield _split_valid(line_no, raw, max_record_bytes)


def whole_line_chunks(handle, size: int) -> Iterator[bytes]:
    """Blocks of about `size` bytes that end at a line end (the last one maybe not)."""
    carry = b""
    while block := handle.read(size):
        block = carry + block
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            carry = block
            continue
        carry = block[cut:]
        yield block[:cut]
    if carry:
        yield carry + b"\n"


def _split_lines(chunk: bytes) -> pa.Array:
    """The lines of `chunk` as one binary column, split by Arrow's multithreaded CSV reader."""
    if chunk.count(b"\r") != chunk.count(b"\r\n"):  # Arrow ends a line at a lone \r, we don't
        raise NeedsExactReader("a carriage return inside a line")
    if _DELIMITER.encode() in chunk:  # Arrow would split that line in two fields
        raise NeedsExactReader()
    try:
        table = pcsv.read_csv(
            pa.py_buffer(chunk),
            read_options=pcsv.ReadOptions(column_names=["raw"]),
            parse_options=pcsv.ParseOptions(
                delimiter=_DELIMITER, quote_char=False, escape_char=False,
                newlines_in_values=False, ignore_empty_lines=False),
            convert_options=pcsv.ConvertOptions(column_types={"raw": pa.binary()}))
    except pa.ArrowInvalid as error:  # a line longer than Arrow's block
        raise NeedsExactReader() from error
    return table.column("raw").combine_chunks()


def _split_valid(line_no: pa.Array, raw: pa.Array, max_record_bytes: int) -> LineBatch:
    """Keep UTF-8 lines within the size limit; reject the others with their reason."""
    oversized = pc.greater(pc.binary_length(raw), max_record_bytes)
    if not pc.any(oversized).as_py():
        try:
            return LineBatch(pa.table({"line_no": line_no, "raw": raw.cast(pa.string())}))
        except pa.ArrowInvalid:
            pass  # some line is not UTF-8: sort them out one by one below
    keep_no, keep_raw, rejected = [], [], []
    for number, value in zip(line_no.to_pylist(), raw.to_pylist()):
        reason = _reject_reason(value, max_record_bytes)
        if reason:
            rejected.append(Rejected(number, reason, preview(value)))
        else:
            keep_no.append(number)
            keep_raw.append(value.decode("utf-8"))
    lines = pa.table({"line_no": pa.array(keep_no, pa.int64()), "raw": pa.array(keep_raw, pa.string())})
    return LineBatch(lines, rejected)


def oversized_reason(size: int, max_record_bytes: int) -> str:
    return f"oversized: {size} bytes > {max_record_bytes}"


def _reject_reason(value: bytes, max_record_bytes: int) -> str | None:
    if len(value) > max_record_bytes:
        return oversized_reason(len(value), max_record_bytes)
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"invalid_utf8: byte {error.start}"
    return None


def _python_batches(path: Path, max_record_bytes: int, batch_rows: int) -> Iterator[LineBatch]:
    numbers: list[int] = []
    values: list[bytes] = []
    with open_binary(path) as handle:
        for number, line in enumerate(handle, start=1):
            if number == 1:  # a UTF-8 byte order mark opens the file, not its first record (Arrow, DuckDB)
                line = line.removeprefix(b"\xef\xbb\xbf")
            numbers.append(number)
            values.append(line.rstrip(b"\r\n"))
            if len(values) >= batch_rows:
                yield _split_valid(pa.array(numbers, pa.int64()), pa.array(values, pa.binary()),
                                   max_record_bytes)
                numbers, values = [], []
    if values:
        yield _split_valid(pa.array(numbers, pa.int64()), pa.array(values, pa.binary()),
                           max_record_bytes)
