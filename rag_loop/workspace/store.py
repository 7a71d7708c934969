"""What the curator workspace reads and writes: only files, never the DuckDB database a Dagster
run may be writing (DuckDB allows one writing process or many readers, not both).

Hand-over: the queue stage exports `<batch>.parquet` (the queue rows and each trace's details)
and `knowledge.parquet` beside its JSONL/CSV; the workspace queries them with an in-memory
DuckDB, and writes each curator's labels as label files (`<curator>-<batch>.jsonl` in the
labels folder), which the label sensor and `curated_labels` ingest: labels keep one path into
the database. A label is checked with the same rules as `curated_labels` before it is written,
and the workspace reads the label files back with them too: a trace's current label is the one
`curated_labels` would pick (`current_order`). Each label file is read again only when it changes.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from rag_loop.curation.label_rules import CheckedLabel, KnownSources, check_label
from rag_loop.curation.labels import (
    append_label,
    current_order,
    file_time,
    jsonl_rows,
    label_files,
    label_time,
    read_label_rows,
    valid_curator,
)
from rag_loop.workspace.security import SHOWN_CHARS

EXPORTS = ("knowledge.parquet", "intents.parquet")  # beside the queue exports, not one of them
JSON_COLUMNS = ("retrieval_context", "variant_trace_ids", "signals", "judge_scores", "expected_sources", "incidents",
                "tags", "details")
FILTERS = ("priority", "language", "cluster_id", "suggested_failure_type")
STATUSES = ("todo", "accept", "reject", "later")
BATCH_NAME = re.compile(r"[\w@+-][\w.@+-]{0,99}")
# what one label may hold, and why: the curator sees the reason with the error
LIMITS = {"expected_output": (SHOWN_CHARS, "a page shows 20,000 characters of a text, so a longer expected "
                                           "output could not be read back in full"),
          "reject_reason": (2_000, "a reason, not a document: the text it is about is in the trace")}
MAX_LISTED = {"expected_sources": 100, "tags": 50}
INTENT_SORTS = ("volume", "uncovered_volume", "failure_rate", "judged_pass_rate", "trend", "size")
RUN_ID = re.compile(r"^[\w-]{1,100}$")  # an eval run id names a file: no dots, no slashes
# what the queue page lists: the wide columns (context, details) stay in the file
LISTED = "trace_id, batch, priority, language, input, cluster_id, cluster_label, cluster_size, suggested_failure_type"


@dataclass(frozen=True)
class Decision:
    decision: str
    curator: str
    labeled_at: str  # the instant `current_order` compared, ISO 8601
    reject_reason: str | None = None
    expected_output: str | None = None
    judge_grades: tuple[dict[str, Any], ...] = ()  # validated JudgeGrade values


@dataclass(frozen=True)
class Label:
    """A valid line of a label file: its `current_order` key, its decision, and the row as written
    (undo writes it again)."""

    order: tuple[datetime, str, int]
    trace_id: str
    decision: Decision
    row: dict[str, Any]
    timed_by_file: bool = False  # no labeled_at: its time is its file's, which any write changes


@dataclass(frozen=True)
class _Read:
    """What the workspace read of one label file, and where it stopped: a write that appends
    (the file grew, the bytes before the old end unchanged) is all it reads next time."""

    stamp: tuple[int, int, int, object]  # size, mtime_ns, inode, and the stamp of the sources checked with
    end: int = 0  # bytes read up to and including the last line break
    lines: int = 0  # line breaks before `end`
    tail: bytes = b""  # the TAIL_BYTES before `end`
    whole: tuple[Label, ...] = ()  # the labels of the lines before `end`
    labels: tuple[Label, ...] = ()  # ... and of a last line without its line break (read again)

    def appended(self, stamp: tuple[int, int, int, object]) -> bool:
        """Whether a file now at `stamp` may have only grown since (the tail decides)."""
        return stamp[0] > self.stamp[0] and stamp[2:] == self.stamp[2:] and \
            not any(label.timed_by_file for label in self.whole)


TAIL_BYTES = 256


class _AnyTrace:
    """The trace ids a label may name, as far as the workspace can tell: any (it never opens
    raw_traces; curated_labels checks them)."""

    def __contains__(self, trace_id: object) -> bool:
        return True


def _require_curator(name: str) -> None:
    if not valid_curator(name):
        raise ValueError(f"curator: {name[:80]!r} is not a name of letters, digits and .@+- (no leading dot)")


def limit_errors(answer: dict[str, Any]) -> list[str]:
    """What in a curator's answer is longer than a label may be, with why (`LIMITS`, `MAX_LISTED`)."""
    errors = []
    for key, (most, why) in LIMITS.items():
        length = len(str(answer.get(key) or ""))
        if length > most:
            errors.append(f"{key}: {length:,} characters, at most {most:,} ({why})")
    for key, most in MAX_LISTED.items():
        if len(answer.get(key) or []) > most:
            errors.append(f"{key}: {len(answer[key]):,} given, at most {most}")
    return errors


class Workspace:
    """The files of one deployment's curation folder, read for the pages and written for labels."""

    def __init__(self, curation_dir: Path, reports_dir: Path | None = None, goldens_dir: Path | None = None):
        self.queue_dir, self.labels_dir = curation_dir / "queue", curation_dir / "labels"
        self.reports_dir, self.goldens_dir = reports_dir, goldens_dir
        self._lock = threading.Lock()
        self._db: duckdb.DuckDBPyConnection | None = None  # made by the first query: see _sql
        self._db_lock = threading.Lock()
        self._files: dict[str, _Read] = {}  # by path under labels/
        self._decisions: tuple[object, dict[str, Decision]] | None = None
        self._known: tuple[object, KnownSources] | None = None
        self._choices: tuple[object, dict[str, list[str]]] | None = None

    def queue_file(self) -> Path | None:
        """The newest queue export the workspace can read (`<batch>.parquet`)."""
        stamped = [(stat.st_mtime, path) for path in self.queue_dir.glob("*.parquet")
                   if path.name not in EXPORTS and (stat := _stat(path)) is not None]  # replaced: skipped
        return max(stamped)[1] if stamped else None

    @contextmanager
    def _sql(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._db_lock:
            # in memory: the exported files only. One database, a connection (cursor) per query:
            # a database of its own costs ~17 ms of CPU, several times per page. Without the file
            # cache, a file replaced at the same path within its clock tick is never read stale.
            if self._db is None:
                self._db = duckdb.connect(config={"enable_external_file_cache": False})
            con = self._db.cursor()  # its own connection: its registered tables are its own
        try:
            yield con
        finally:
            con.close()

    def rows(self, filters: dict[str, str], status: str = "", page: int = 0, size: int = 50
             ) -> tuple[list[dict], int]:
        """One page of queue rows matching `filters` and `status`, "later" rows last; and the
        number of rows that match."""
        path = self.queue_file()
        if path is None:
            return [], 0
        decisions = self.decisions()
        wanted = {k: v for k, v in filters.items() if k in FILTERS and v}
        where = " AND ".join(f"{k} = ${k}" for k in wanted) or "true"
        signal = filters.get("signal")
        if signal:
            where += " AND list_contains(CAST(signals AS VARCHAR[]), $signal)"
            wanted["signal"] = signal
        with self._sql() as con:
            columns = {r[0] for r in con.execute("DESCRIBE SELECT * FROM read_parquet($path)",
                                                 {"path": str(path)}).fetchall()}
            # why a row ranks where it does (issue 48); an export made before it has none
            reason = "rank_reason" if "rank_reason" in columns else "NULL::VARCHAR AS rank_reason"
            con.register("decided", pa.table({"trace_id": pa.array(list(decisions), pa.string()),
                                              "decision": pa.array([d.decision for d in decisions.values()],
                                                                   pa.string())}))
            frame = con.execute(f"""
                SELECT q.*, coalesce(d.decision, 'todo') AS status, count(*) OVER () AS matching
                FROM (SELECT {LISTED}, {reason}, CAST(signals::JSON AS VARCHAR[]) AS signals,
                             row_number() OVER () AS position FROM read_parquet($path)) q
                LEFT JOIN decided d USING (trace_id)
                WHERE {where} {"AND coalesce(d.decision, 'todo') = $status" if status else ""}
                ORDER BY (coalesce(d.decision, 'todo') = 'later'), position
                LIMIT {int(size)} OFFSET {int(page) * int(size)}""",
                                {"path": str(path), **wanted, **({"status": status} if status else {})}).df()
        matching = int(frame["matching"].iloc[0]) if len(frame) else 0
        return [_decoded(row) for row in frame.drop(columns=["matching"]).to_dict("records")], matching

    def row(self, trace_id: str) -> dict | None:
        path = self.queue_file()
        if path is None:
            return None
        with self._sql() as con:
            frame = con.execute("SELECT * FROM read_parquet($path) WHERE trace_id = $id",
                                {"path": str(path), "id": trace_id}).df()
        return _decoded(frame.to_dict("records")[0]) if len(frame) else None

    def incident_rows(self, incident_id: str) -> list[dict]:
        """The queue rows standing for an incident's traces (their `incidents` names it), in queue
        order, with each row's status."""
        path = self.queue_file()
        if path is None:
            return []
        with self._sql() as con:
            columns = {r[0] for r in con.execute("DESCRIBE SELECT * FROM read_parquet($path)",
                                                 {"path": str(path)}).fetchall()}
            if "incidents" not in columns:
                return []
            frame = con.execute(f"SELECT {LISTED}, incidents FROM read_parquet($path) "
                                "WHERE incidents IS NOT NULL", {"path": str(path)}).df()
        decisions = self.decisions()
        rows = []
        for row in frame.to_dict("records"):
            try:
                owners = json.loads(row.pop("incidents"))
            except (TypeError, ValueError):
                continue
            if isinstance(owners, list) and incident_id in owners:
                decision = decisions.get(row["trace_id"])
                rows.append(row | {"status": decision.decision if decision else "todo"})
        return rows

    def choices(self) -> dict[str, list[str]]:
        """The values each queue filter can take (read again when the export changes)."""
        path = self.queue_file()
        if path is None:
            return {name: [] for name in FILTERS}
        stamp = (path, path.stat().st_mtime_ns)
        if self._choices is None or self._choices[0] != stamp:
            with self._sql() as con:
                values = {name: [v for (v,) in con.execute(
                    f"SELECT DISTINCT {name} FROM read_parquet($path) WHERE {name} IS NOT NULL ORDER BY 1",
                    {"path": str(path)}).fetchall()] for name in FILTERS}
            self._choices = (stamp, values)
        return self._choices[1]

    def search_sources(self, text: str, limit: int = 20) -> list[dict]:
        """Citable sources (`knowledge.parquet`: the knowledge base, else chunks seen in production
        traces) whose title, document id, chunk id or text has every word of `text` (case and
        accents folded): newest versions first, the knowledge base's before the traffic's. Each
        hit says what to cite (`source`) and where it was seen (`seen_in`)."""
        path = self.queue_dir / "knowledge.parquet"
        words = [w for w in re.split(r"\s+", text.strip().lower()) if w][:8]
        if not path.exists() or not words:
            return []
        where = " AND ".join(f"contains(haystack, strip_accents($w{i}))" for i in range(len(words)))
        with self._sql() as con:
            return con.execute(f"""
                SELECT coalesce(chunk_id, doc_id || coalesce('@' || version, '')) AS source, chunk_id, doc_id,
                       version, title, language, text, version IS NOT DISTINCT FROM newest_version AS newest,
                       coalesce(seen_in, 'knowledge_base') AS seen_in
                FROM (SELECT *, strip_accents(lower(concat_ws(' ', title, doc_id, chunk_id, text))) AS haystack
                      FROM (SELECT NULL::VARCHAR AS seen_in WHERE false  -- an export from before seen_in
                            UNION ALL BY NAME SELECT * FROM read_parquet($path)))
                WHERE {where}
                ORDER BY newest DESC, seen_in = 'knowledge_base' DESC, doc_id, chunk_id LIMIT {int(limit)}""",
                               {"path": str(path), **{f"w{i}": w for i, w in enumerate(words)}}).df().to_dict("records")

    def sources_note(self) -> str | None:
        """Why a search can find nothing at all (None when there are sources to search)."""
        path = self.queue_dir / "knowledge.parquet"
        if not path.exists():
            return "no sources exported yet: the curation queue has not run"
        with self._sql() as con:
            empty = not con.execute("SELECT count(*) FROM read_parquet($p)", {"p": str(path)}).fetchall()[0][0]
        return "no knowledge base and no retrieved chunks yet" if empty else None

    def known_sources(self) -> KnownSources:
        """The sources a label may name: the exported citable sources (what the label stage
        accepts too), read again when the export changes."""
        path = self.queue_dir / "knowledge.parquet"
        stamp = path.stat().st_mtime_ns if path.exists() else None
        if self._known is None or self._known[0] != stamp:
            if stamp is None:
                known = KnownSources({}, set(), set())
            else:
                with self._sql() as con:
                    known = KnownSources.from_rows(con.execute(
                        "SELECT chunk_id, doc_id, version, newest_version FROM read_parquet($p)",
                        {"p": str(path)}).fetchall())
            self._known = (stamp, known)
        return self._known[1]

    def labels(self) -> tuple[object, list[Label]]:
        """Every valid label line (valid by `curated_labels`' rules, any trace id) and a stamp that
        changes with them. A file is read again only when its size or time changes (or the
        citable sources do): a save re-reads the file it appended to, not every label file."""
        known = self.known_sources()
        sources = self._known[0] if self._known else None  # knowledge.parquet's time
        with self._lock:
            files = {}
            for path in label_files(self.labels_dir):
                stat = _stat(path)
                if stat is None:
                    continue  # removed while the folder was listed
                relative = str(path.relative_to(self.labels_dir))
                try:
                    files[relative] = _read_file(path, relative, stat, known, sources, self._files.get(relative))
                except OSError:
                    continue  # gone or unreadable: curated_labels reports it; the workspace shows the rest
            self._files = files
            return tuple((name, read.stamp) for name, read in files.items()), \
                [label for read in files.values() for label in read.labels]

    def decisions(self) -> dict[str, Decision]:
        """Each trace's current decision in the label files: its label that is last by
        `current_order`, the rule `current_labels` follows (recomputed when a file changes)."""
        stamp, labels = self.labels()
        with self._lock:
            if self._decisions is None or self._decisions[0] != stamp:
                newest: dict[str, Label] = {}
                for label in labels:
                    previous = newest.get(label.trace_id)
                    if previous is None or label.order > previous.order:
                        newest[label.trace_id] = label
                self._decisions = (stamp, {t: label.decision for t, label in newest.items()})
            return self._decisions[1]

    def progress(self) -> dict[str, dict[str, int]]:
        """Per curator, how many rows they accepted, rejected and put off."""
        counts: dict[str, dict[str, int]] = {}
        for decision in self.decisions().values():
            mine = counts.setdefault(decision.curator or "(unknown)", dict.fromkeys(STATUSES[1:], 0))
            if decision.decision in mine:
                mine[decision.decision] += 1
        return counts

    def check(self, curator: str, trace_id: str, answer: dict[str, Any]) -> tuple[CheckedLabel, dict]:
        """The label file record of a curator's answer and its verdict under `curated_labels`'
        rules (plus: a reject says why)."""
        row = self.row(trace_id)
        if row is None:
            return CheckedLabel({"trace_id": trace_id}, [f"trace_id: {trace_id!r} is not in the queue"]), {}
        if not valid_curator(curator):
            return CheckedLabel({"trace_id": trace_id}, ["curator: a name of letters, digits and .@+- "
                                                         "(no leading dot)"]), {}
        record = {key: row.get(key) for key in ("trace_id", "input", "cluster_id", "priority", "cluster_weight",
                                                 "suggested_failure_type", "judge_score", "variant_trace_ids",
                                                 "batch")}
        record.update(answer, curator=curator, labeled_at=datetime.now(UTC).isoformat())
        if answer.get("judge_grades"):
            grades, errors = shown_grades(answer["judge_grades"], row.get("judge_scores"))
            if errors:
                return CheckedLabel({"trace_id": trace_id}, errors), record
            record["judge_grades"] = grades
        if answer.get("decision") == "reject" and not str(answer.get("reject_reason") or "").strip():
            return CheckedLabel({"trace_id": trace_id}, ["reject_reason: say why the row is rejected"]), record
        if too_long := limit_errors(answer):
            return CheckedLabel({"trace_id": trace_id}, too_long), record
        traces = {trace_id, *(row.get("variant_trace_ids") or [])}
        return check_label(record, self.known_sources(), traces), record

    def save_label(self, curator: str, trace_id: str, answer: dict[str, Any]) -> CheckedLabel:
        """Check a curator's answer with `curated_labels`' rules and, if valid, append it to
        their label file (one line, under a lock: two tabs of one curator never interleave)."""
        checked, record = self.check(curator, trace_id, answer)
        if not checked.errors:
            self._append(curator, record)
        return checked

    def undo(self, curator: str, trace_id: str) -> str | None:
        """Put back what a trace's current label replaced: the label before it by `current_order`,
        written again as the newest (a label file is never edited), or "later" when there was
        none. Returns the decision now in force, or None when the trace has no label."""
        _require_curator(curator)
        labels = sorted((label for label in self.labels()[1] if label.trace_id == trace_id),
                        key=lambda label: label.order)
        if not labels:
            return None
        previous = dict(labels[-2].row) if len(labels) > 1 else {"trace_id": trace_id, "decision": "later",
                                                                  "batch": labels[-1].row.get("batch")}
        previous.update(curator=curator, labeled_at=datetime.now(UTC).isoformat())
        self._append(curator, previous)
        return str(previous["decision"])

    def _append(self, curator: str, record: dict[str, Any]) -> None:
        """Append to `<curator>-<batch>.jsonl` (`<curator>-queue.jsonl` when the batch is no file name)."""
        _require_curator(curator)
        batch = record.get("batch")
        name = batch if isinstance(batch, str) and BATCH_NAME.fullmatch(batch) else "queue"
        append_label(self.labels_dir / f"{curator}-{name}.jsonl", record)

    def intents(self, sort: str = "volume", singletons: bool = False) -> list[dict]:
        """The intent clusters of `intents.parquet`, sorted by `sort` (largest first)."""
        path = self.queue_dir / "intents.parquet"
        if not path.exists():
            return []
        column = sort if sort in INTENT_SORTS else "volume"
        # golden coverage (issue 48, the golden_coverage asset's export): the volume no golden covers
        coverage = self.reports_dir / "intent_coverage.parquet" if self.reports_dir else None
        found = ("SELECT cluster_id, uncovered_volume, covered, release AS coverage_release "
                 f"FROM read_parquet('{coverage.as_posix().replace(chr(39), chr(39) * 2)}')"
                 if coverage and coverage.is_file() else None)
        none = ("SELECT NULL::VARCHAR AS cluster_id, NULL::DOUBLE AS uncovered_volume, NULL::BOOLEAN AS covered, "
                "NULL::VARCHAR AS coverage_release")
        with self._sql() as con:
            for joined in ([found] if found else []) + [none]:  # an unreadable export: the page without it
                try:
                    return con.execute(f"""SELECT * FROM read_parquet($path) LEFT JOIN ({joined}) USING (cluster_id)
                                           WHERE $singletons OR NOT is_singleton
                                           ORDER BY {column} DESC NULLS LAST, cluster_id""",
                                       {"path": str(path), "singletons": singletons}).df().to_dict("records")
                except duckdb.Error:
                    if joined == none:
                        raise
        return []

    def eval_runs(self) -> list[dict]:
        """Every exported eval run (`<reports>/eval-*.parquet`), newest first."""
        files = sorted(self.reports_dir.glob("eval-*.parquet")) if self.reports_dir else []
        if not files:
            return []
        with self._sql() as con:
            return con.execute("""
                SELECT run_id, any_value(release_version) AS release_version, any_value(rag_app) AS rag_app,
                       any_value(rag_config) AS rag_config, any_value(started_at) AS started_at,
                       any_value(blocked) AS blocked, any_value(baseline_run_id) AS baseline_run_id,
                       count(DISTINCT golden) AS goldens
                FROM read_parquet($files) GROUP BY run_id ORDER BY started_at DESC""",
                               {"files": [str(f) for f in files]}).df().to_dict("records")

    def dashboard(self) -> tuple[dict | None, str | None]:
        """The dashboard's figures (`<reports>/dashboard.json`, the `dashboard` asset's export),
        or None and why not."""
        from rag_loop.reporting.dashboard_figures import DASHBOARD_FILE, FORMAT
        path = self.reports_dir / DASHBOARD_FILE if self.reports_dir else None
        if path is None or not path.is_file():
            return None, "no dashboard figures yet: materialize the dashboard asset (it runs with the loop)"
        try:
            figures = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            return None, f"{DASHBOARD_FILE} could not be read ({error}): materialize the dashboard asset again"
        if not isinstance(figures, dict) or figures.get("format") != FORMAT:
            return None, f"{DASHBOARD_FILE} is of another format: materialize the dashboard asset again"
        return figures, None

    def judge_agreement(self) -> tuple[list[dict], str | None]:
        """The judge's agreement with curators' grades (`<reports>/judge-agreement.json`, the
        `judge_calibration` asset's export), per metric, judge version and language; or why none."""
        from rag_loop.evaluation.agreement import AGREEMENT_FILE
        path = self.reports_dir / AGREEMENT_FILE if self.reports_dir else None
        if path is None or not path.is_file():
            return [], "no agreement figures yet: grade the judge's verdicts on trace pages, then run the label job"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            return [], f"{AGREEMENT_FILE} could not be read ({error}): run the label job again"
        rows = data.get("rows") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            return [], f"{AGREEMENT_FILE} is of another format: run the label job again"
        rows = [_figures(row) for row in rows if isinstance(row, dict)]
        return rows, None if rows else "no grades yet: grade the judge's verdicts on trace pages"

    def compare(self, run_id: str, baseline_id: str | None) -> list[dict]:
        """Per golden × metric: the expected output, the baseline's and this run's answers,
        scores and reasons; flips (pass → fail) first, then the largest drops."""
        if not self.reports_dir or not RUN_ID.match(run_id) or (baseline_id and not RUN_ID.match(baseline_id)):
            return []
        run = self.reports_dir / f"{run_id}.parquet"
        base = self.reports_dir / f"{baseline_id}.parquet" if baseline_id else None
        if not run.exists():
            return []
        with self._sql() as con:
            source = "SELECT * FROM read_parquet($base)" if base and base.exists() else \
                "SELECT * FROM read_parquet($run) WHERE false"
            return con.execute(f"""
                SELECT c.golden, c.metric, c.input, c.expected_output, c.language, c.query_type,
                       b.actual_output AS baseline_answer, b.score AS baseline_score, b.passed AS baseline_passed,
                       b.reason AS baseline_reason, c.actual_output AS answer, c.score, c.passed, c.reason,
                       c.errored, coalesce(b.passed AND NOT c.passed, false) AS flipped
                FROM read_parquet($run) c LEFT JOIN ({source}) b USING (golden, metric)
                ORDER BY flipped DESC, coalesce(b.score, 1) - coalesce(c.score, 0) DESC, c.golden, c.metric""",
                               {"run": str(run), **({"base": str(base)} if base and base.exists() else {})}
                               ).df().to_dict("records")


def _read_file(path: Path, relative: str, stat: os.stat_result, known: KnownSources, sources: object,
               before: _Read | None) -> _Read:
    """The valid labels of one label file (an unreadable line costs itself only), checked with
    `known` (of the export stamped `sources`): `before` as it is when the file is unchanged, read
    on from its end when the file was appended to, else read whole (a CSV always)."""
    stamp = (stat.st_size, stat.st_mtime_ns, stat.st_ino, sources)
    if before is not None and before.stamp == stamp:
        return before
    modified = file_time(stat)
    if path.suffix != ".jsonl":
        return _Read(stamp, labels=tuple(_labels_of(read_label_rows(path), relative, modified, known)))
    with open(path, "rb") as handle:
        base = before if before is not None and before.appended(stamp) else None
        if base is not None:
            handle.seek(base.end - len(base.tail))
            base = base if handle.read(len(base.tail)) == base.tail else None
        start = _Read(stamp) if base is None else base
        handle.seek(start.end)
        data = handle.read()
    cut = data.rfind(b"\n") + 1
    lines = start.lines + data.count(b"\n", 0, cut)
    whole = start.whole + tuple(_labels_of(jsonl_rows(data[:cut], start.lines + 1), relative, modified, known))
    rest = _labels_of(jsonl_rows(data[cut:], lines + 1), relative, modified, known)
    return _Read(stamp, start.end + cut, lines, (start.tail + data[:cut])[-TAIL_BYTES:], whole, whole + tuple(rest))


def _labels_of(rows: list[tuple[int, dict]], relative: str, modified: datetime, known: KnownSources) -> list[Label]:
    """The valid rows of a label file as labels: checked with `curated_labels`' rules (any trace id)."""
    labels = []
    for line_no, row in rows:
        checked = check_label(row, known, _AnyTrace())
        if checked.errors:
            continue
        values = checked.values
        at = label_time(values["labeled_at"], modified)
        labels.append(Label(current_order(at, relative, line_no), values["trace_id"], Decision(
            values["decision"], values["curator"], at.isoformat(), values["reject_reason"] or None,
            values["expected_output"] or None, tuple(values["judge_grades"])), row,
            timed_by_file=values["labeled_at"] is None))
    return labels


def shown_grades(grades: list[dict[str, Any]], judged: object) -> tuple[list[dict[str, Any]], list[str]]:
    """A form's grades with what the judge said of each metric as the page showed it (version,
    verdict, score: from the queue export, never from the form), or why not: a metric the judge
    did not score on this trace."""
    judged = judged if isinstance(judged, dict) else {}
    filled, errors = [], []
    for grade in grades:
        verdict = judged.get(grade.get("metric"))
        if not isinstance(verdict, dict):
            errors.append(f"judge_grades: the judge gave no verdict on {str(grade.get('metric'))[:80]!r} here")
            continue
        own = grade.get("curator_passed")
        own = {"pass": True, "fail": False}.get(own, own) if isinstance(own, str) else own  # as a label file has it
        filled.append({**grade, **({"curator_passed": own} if "curator_passed" in grade else {}),
                       "judge_version": verdict.get("judge_version") or "",
                       "judge_passed": verdict.get("passed"), "judge_score": verdict.get("score")})
    return filled, errors


AGREEMENT_FIGURES = ("agreement", "kappa", "ci_low", "ci_high", "judge_pass_rate", "curator_pass_rate")


def _figures(row: dict) -> dict:
    """An agreement row as the page formats it: each figure a finite number or None."""
    def number(value: object) -> float | None:
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
            and value == value and abs(value) != float("inf") else None
    row = {**row, **{key: number(row.get(key)) for key in AGREEMENT_FIGURES}}
    return row if row["ci_high"] is not None else {**row, "ci_low": None}


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _decoded(row: dict) -> dict:
    for key in JSON_COLUMNS:
        value = row.get(key)
        if isinstance(value, str):
            try:
                row[key] = json.loads(value)
            except json.JSONDecodeError:
                pass
        elif hasattr(value, "tolist"):
            row[key] = value.tolist()
    return {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
