"""`rag-loop label`: walk the curation queue in the terminal, row by row, no spreadsheet.
`rag-loop calibrate FILE`: check a judge against human faithfulness labels.
`rag-loop summary`: print what the pipeline stored.
`rag-loop ingest preview --mapping FILE DATA`: what a mapping makes of your own log files.
`rag-loop demo generate` / `rag-loop demo curate --round 1|2`: the embedded demo's data and
its scripted curator (the demo package is imported only when a demo command runs).

Each row shows the trace, its cluster and signals; the prompts come pre-filled with the
suggestions and re-ask until the value is valid. Every answered row is appended at once to
`<labels dir>/<curator>-<batch>.jsonl`, which the labels sensor picks up; rows already
accepted or rejected in that directory are skipped, so a session can stop and resume, and
rows put off for [l]ater come back, after the others. A reject asks for its reason.

`rag-loop serve` (the curator workspace, rag_loop.workspace) is declared with the job commands
in rag_loop_dagster.jobs_cli, which gives the workspace its way to release.

Nothing is read from the environment at import: each option names its variable (`envvar=`),
which click reads when a command runs.
"""

from __future__ import annotations

import getpass
import os
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import click
import duckdb

from rag_loop.curation.label_rules import DECISIONS, MAX_TAG_CHARS, KnownSources, check_source
from rag_loop.curation.labels import append_label, label_files, read_label_rows, valid_curator
from rag_loop.curation.queue_files import read_queue
from rag_loop.evaluation.settings import DEFAULT_THRESHOLDS, LlmJudgeSettings
from rag_loop.home import DEMO_INPUTS, home
from rag_loop.schema import FailureType, Origin


def _db_option(help: str) -> Callable:
    return click.option("--db", envvar="RAG_LOOP_DB", show_envvar=True,
                        default=lambda: str(home().database),
                        show_default="rag_loop.duckdb in $RAG_LOOP_HOME", help=help)


def _curation_options(command: Callable) -> Callable:
    """--curation-dir (RAG_LOOP_CURATION_DIR) and the queue and labels folders inside it."""
    for option in reversed((
            click.option("--curation-dir", type=click.Path(file_okay=False, path_type=Path),
                         envvar="RAG_LOOP_CURATION_DIR", show_envvar=True,
                         default=lambda: home().curation_dir,
                         show_default="curation/ in $RAG_LOOP_HOME",
                         help="The curation folder: queue exports in queue/, label files in labels/."),
            click.option("--queue-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                         help="Where the newest queue export is taken from; default: <curation dir>/queue."),
            click.option("--labels-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                         help="Where label files are written; default: <curation dir>/labels."))):
        command = option(command)
    return command


@click.group()
@click.version_option(package_name="rag-loop", prog_name="rag-loop")
def main() -> None:
    """rag-loop: turn production RAG traffic into regression tests."""


@main.command()
@click.option("--queue", "queue_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A queue export (.jsonl or .csv); default: the newest in the queue folder.")
@_curation_options
@click.option("--curator", default=lambda: os.environ.get("USER") or getpass.getuser(),
              show_default="$USER")
@_db_option("The rag-loop database, read-only, to check expected_sources.")
@click.option("--limit", type=int, default=None, help="Stop after this many rows.")
def label(queue_file: Path | None, curation_dir: Path, queue_dir: Path | None, labels_dir: Path | None,
          curator: str, db: str, limit: int | None) -> None:
    """Label the curation queue row by row."""
    if not valid_curator(curator):
        raise click.BadParameter(f"{curator!r}: letters, digits and . @ + - only (it names the label file)",
                                 param_hint="--curator")
    queue_file = queue_file or _newest_queue(queue_dir or curation_dir / "queue")
    labels_dir = labels_dir or curation_dir / "labels"
    rows = read_queue(queue_file)
    done, later = _decided_trace_ids(labels_dir)
    todo = ([r for r in rows if r["trace_id"] not in done | later]
            + [r for r in rows if r["trace_id"] in later - done])[:limit]  # "later" comes back, last
    known = _known_sources(db)
    batch = rows[0].get("batch", queue_file.stem) if rows else queue_file.stem
    out = labels_dir / f"{curator}-{batch}.jsonl"
    labeled = sum(r["trace_id"] in done for r in rows)
    click.echo(f"{queue_file.name}: {len(rows)} rows, {labeled} already labeled; labels go to {out}")
    for number, row in enumerate(todo, start=1):
        click.echo("\n" + _progress(number, len(todo)))
        _show(row)
        answer = _ask(row, known)
        if answer is None:
            click.echo("Stopped; labeled rows are saved.")
            return
        append_label(out, {**row, **answer, "curator": curator, "labeled_at": datetime.now(UTC).isoformat()})
    click.echo(f"\nDone: {len(todo)} rows labeled in {out}.")


def _newest_queue(directory: Path) -> Path:
    files = sorted(directory.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise click.ClickException(f"no queue export in {directory}: materialize curation_queue first")
    return files[-1]


def _decided_trace_ids(directory: Path) -> tuple[set[str], set[str]]:
    """(accepted or rejected, put off for later) trace ids, by each trace's newest label (a line
    that cannot be read costs itself only)."""
    newest: dict[str, str] = {}
    for path in label_files(directory):
        for _, row in read_label_rows(path):
            newest[str(row.get("trace_id"))] = str(row.get("decision") or "").strip().lower()
    done = {t for t, d in newest.items() if d in ("accept", "reject")}
    return done, {t for t, d in newest.items() if d in ("later", "skip")}


def _known_sources(db: str) -> KnownSources | None:
    try:
        with duckdb.connect(db, read_only=True) as con:
            return KnownSources.load(con)
    except duckdb.Error as error:
        click.echo(f"(expected_sources are not checked: {error})", err=True)
        return None


def _progress(done: int, total: int, width: int = 30) -> str:
    filled = int(width * done / max(total, 1))
    return f"[{'#' * filled}{'-' * (width - filled)}] {done}/{total}"


def _show(row: dict) -> None:
    click.echo(f"{row.get('priority')} · cluster {row.get('cluster_id')} \"{row.get('cluster_label')}\" "
               f"({row.get('cluster_size')} queries, weight {row.get('cluster_weight')})")
    click.echo(f"Query:   {row.get('input')}")
    answer = row.get("actual_output")
    click.echo(f"Answer:  {answer}" if answer else "Answer:  (none: the request failed or timed out; "
               f"signals: {', '.join(row.get('signals') or []) or 'none'})")
    for chunk in row.get("retrieval_context") or []:
        text = chunk.get("text")
        shown = textwrap.shorten(str(text), 300, placeholder=" …") if text else "(no text: not in the knowledge base)"
        click.echo(f"Context: [{chunk.get('chunk_id')}] {shown}")
    for metric, verdict in (row.get("judge_scores") or {}).items():
        click.echo(f"Judge:   {metric} {verdict.get('score')} ({'pass' if verdict.get('passed') else 'fail'}): "
                   f"{textwrap.shorten(str(verdict.get('reason') or ''), 160, placeholder=' …')}")
    feedback = f" (feedback: {row['feedback_category']})" if row.get("feedback_category") else ""
    click.echo(f"Signals: {', '.join(row.get('signals') or []) or 'none'}{feedback}")
    click.echo(f"Suggested: failure_type={row.get('suggested_failure_type')} "
               f"({row.get('suggestion_reason')}), origin={row.get('suggested_origin')}")


def _ask(row: dict, known: KnownSources | None) -> dict | None:
    choice = click.prompt("Decision [a]ccept [r]eject [l]ater [q]uit",
                          type=click.Choice(["a", "r", "l", "q"]), show_choices=False)
    if choice == "q":
        return None
    decision = {"a": "accept", "r": "reject", "l": "later"}[choice]
    assert decision in DECISIONS
    if decision == "reject":
        return {"decision": decision, "reject_reason": click.prompt("Why reject it", value_proc=_required)}
    if decision != "accept":
        return {"decision": decision}
    sources = [c.get("chunk_id") for c in row.get("retrieval_context") or [] if c.get("chunk_id")]
    return {
        "decision": decision,
        "expected_output": click.prompt("Expected output", value_proc=_required),
        "expected_sources": click.prompt("Expected sources (comma-separated)",
                                         default=", ".join(sources[:1]),
                                         value_proc=lambda v: _sources(v, known)),
        "tags": click.prompt("Tags (comma-separated)", default=row.get("language") or "",
                             value_proc=_tags),
        "origin": click.prompt("Origin", type=click.Choice([o.value for o in Origin]),
                               default=row.get("suggested_origin") or Origin.PRODUCTION_FAILURE.value),
        "failure_type": click.prompt("Failure type", type=click.Choice([f.value for f in FailureType]),
                                     default=row.get("suggested_failure_type") or FailureType.NONE.value),
    }


def _required(value: str) -> str:
    if not value.strip():
        raise click.UsageError("required")
    return value.strip()


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _sources(value: str, known: KnownSources | None) -> list[str]:
    sources = _split(value)
    for source in sources if known else []:
        error, warning = check_source(source, known)
        if error:
            raise click.UsageError(error)
        if warning:
            click.echo(f"warning: {warning}")
    return sources


def _tags(value: str) -> list[str]:
    tags = _split(value)
    for tag in tags:
        if len(tag) > MAX_TAG_CHARS:
            raise click.UsageError(f"tag {tag[:20]!r}… is longer than {MAX_TAG_CHARS} characters")
    return tags


_LLM = LlmJudgeSettings()


def _judge(kind: str, llm: LlmJudgeSettings):
    """The judge the `--judge` option names: offline rules, or DeepEval's metrics on an LLM."""
    if kind == "offline":
        from rag_loop.evaluation.judges.offline import OfflineJudge
        return OfflineJudge()
    from rag_loop.evaluation.judges.llm import LlmJudge
    return LlmJudge(llm)


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--judge", "kind", type=click.Choice(["offline", "openai-compatible"]),
              default="offline", show_default=True)
@click.option("--base-url", default=_LLM.base_url, show_default=True)
@click.option("--model", default=_LLM.model, show_default=True)
@click.option("--api-key-env", default=_LLM.api_key_env, show_default=True)
@click.option("--threshold", type=float, default=None,
              help="Faithful at or above this score; default: the pipeline's Faithfulness threshold.")
@_db_option("Where the figures are stored.")
def calibrate(file: Path, kind: str, base_url: str, model: str, api_key_env: str,
              threshold: float | None, db: str) -> None:
    """Judge FILE's human-labelled answers (JSONL/CSV: question, contexts, answer,
    label_faithful) and print how the judge agrees with the humans."""
    from rag_loop.evaluation.calibration import run_calibration, summary_lines
    judge = _judge(kind, LlmJudgeSettings(base_url=base_url, model=model, api_key_env=api_key_env))
    cut = threshold if threshold is not None else DEFAULT_THRESHOLDS["Faithfulness"]
    with duckdb.connect(db) as con:
        result, stored = run_calibration(con, file, judge, cut)
    for line in summary_lines(result):
        click.echo(line)
    for error in result.errors[:10]:
        click.echo(f"set aside: line {error['line']}: {error['reason']}")
    click.echo(f"stored as {stored} in {db} (judge_calibrations)")


def _metric_threshold(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict:
    """`--threshold "Contextual Relevancy=0.5"` (repeatable) over the pipeline's thresholds."""
    thresholds = dict(DEFAULT_THRESHOLDS)
    for item in value:
        name, _, cut = item.rpartition("=")
        try:
            thresholds[name.strip()] = float(cut)
        except ValueError:
            raise click.BadParameter(f"{item!r}: expected METRIC=NUMBER") from None
    return thresholds


@main.command("few-shot")
@click.option("--base-url", default=_LLM.base_url, show_default=True)
@click.option("--model", default=_LLM.model, show_default=True)
@click.option("--api-key-env", default=_LLM.api_key_env, show_default=True)
@click.option("--threshold", "thresholds", multiple=True, callback=_metric_threshold,
              help="METRIC=NUMBER, the verdict's pass threshold (repeatable); default: the pipeline's.")
@click.option("--per-metric", type=int, default=4, show_default=True, help="Examples shown per metric.")
@_db_option("Curators' grades are read from it; the measurement is stored in it (judge_few_shot).")
def few_shot(base_url: str, model: str, api_key_env: str, thresholds: dict, per_metric: int, db: str) -> None:
    """Measure curators' graded verdicts as few-shot examples in an LLM judge's prompts: shown
    from half of each metric's graded traces, scored on the other half only, adopted where the
    held-out kappa gains beyond chance. Costs two judge calls per held-out trace and metric.
    Adopt with trace_judgments' `few_shot` setting (an id, or "latest")."""
    from rag_loop.evaluation.few_shot import FewShotSettings, graded_cases, measure_few_shot, store_few_shot
    from rag_loop.evaluation.judges.llm import LlmJudge
    settings = LlmJudgeSettings(base_url=base_url, model=model, api_key_env=api_key_env)
    with duckdb.connect(db) as con:
        grades = graded_cases(con)
        if grades.empty:
            raise click.ClickException("no graded verdicts yet: curators grade the judge on the trace page")
        table, published = measure_few_shot(grades, lambda shown: LlmJudge(settings, few_shot=shown),
                                            thresholds, FewShotSettings(per_metric=per_metric))
        store_few_shot(con, table, published)
    for row in table.itertuples():
        click.echo(f"{row.metric}: {'adopted' if row.adopted else 'not adopted'}: {row.why}")
    click.echo(f"few_shot_id {published.few_shot_id} stored in {db} (judge_few_shot)")


@main.command()
@_db_option("The rag-loop database, read-only.")
@click.option("--next-steps", is_flag=True, help="Then print what to do next (label, release, evaluate).")
@click.option("--lake", "uri", envvar="RAG_LOOP_LAKE", show_envvar=True, default=None,
              help="A lake-backed deployment's lake (its views read the lake's files).")
def summary(db: str, next_steps: bool, uri: str | None) -> None:
    """Print what the pipeline stored: tables, selection, clusters, releases, evals, drift."""
    from rag_loop.reporting.summary import print_summary
    from rag_loop.store.lake import Lake
    print_summary(db, next_steps, lake=Lake.of(uri) if uri else None)


def release_text(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A click callback for `rag-loop release --notes / --by`: refused unless a release may keep
    it (given, visible text, a sane length; `release_request_errors`)."""
    from rag_loop.goldens.release import release_request_errors
    notes, released_by = (value, "-") if param.name == "notes" else ("-", value)
    errors = release_request_errors(notes, released_by)
    if errors:
        raise click.BadParameter(errors[0].split(": ", 1)[1])
    return value.strip()


@main.group()
def ingest() -> None:
    """Your own log shape: see what a mapping file makes of your files before a run stores them."""


@ingest.command("preview")
@click.option("--mapping", "mapping_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The mapping file (YAML; docs/ingestion.md says its fields).")
@click.option("--preset", help="A shipped mapping instead (rag-loop ingest preset lists them).")
@click.argument("data", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--limit", type=int, default=5, show_default=True, help="Mapped traces shown.")
def preview(mapping_file: Path | None, preset: str | None, data: tuple[Path, ...], limit: int) -> None:
    """Map DATA (files, or folders) with the mapping and check the records as ingestion would,
    storing nothing: the first traces, each field's coverage and most common failure, what would
    be quarantined and what the loop cannot do with what is missing."""
    from rag_loop.ingest.field_map import MappingError
    from rag_loop.ingest.preview import preview as preview_mapping
    if (mapping_file is None) == (preset is None):
        raise click.UsageError("give --mapping FILE or --preset NAME")
    try:
        click.echo(preview_mapping(mapping_file or _preset(preset), list(data), limit).text())
    except MappingError as error:
        raise click.ClickException(f"the mapping cannot be used: {error}") from error


@ingest.command("preset")
@click.argument("name", required=False)
def preset(name: str | None) -> None:
    """Print the shipped mapping NAME (to save as rag-loop-mapping.yaml beside the exported
    files), or list them."""
    from rag_loop.ingest.presets import PRESETS
    if name is None:
        click.echo("\n".join(PRESETS))
        return
    click.echo(_preset(name).read_text(), nl=False)


def _preset(name: str) -> Path:
    from rag_loop.ingest.presets import preset_path
    try:
        return preset_path(name)
    except KeyError as error:
        raise click.ClickException(str(error.args[0])) from error


@main.group()
def demo() -> None:
    """The embedded demo: generate its data, label its queue as a scripted curator."""


@demo.command()
@click.option("--round", "round_number", type=click.Choice(["1", "2"]), required=True,
              help="1: label the first 40 rows of the queue; 2: 30 more, relabel two, withdraw one.")
@click.option("--queue", "queue_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A queue export (.jsonl); default: the newest in the queue folder.")
@_curation_options
def curate(round_number: str, queue_file: Path | None, curation_dir: Path, queue_dir: Path | None,
           labels_dir: Path | None) -> None:
    """Label one round of the demo queue from the demo's ground truth (a rerun keeps the file)."""
    from rag_loop.demo.curator import curate as curate_round
    queue_file = queue_file or _newest_queue(queue_dir or curation_dir / "queue")
    out = curate_round(queue_file, labels_dir or curation_dir / "labels", int(round_number))
    click.echo(f"demo curator, round {round_number}: labels from {queue_file.name} written to {out}")


@demo.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=lambda: DEMO_INPUTS, show_default="data/demo in the project",
              help="Where the demo world is written.")
@click.option("--seed", type=int, default=7, show_default=True)
def generate(out: Path, seed: int) -> None:
    """Generate the demo world (knowledge base, 14 days of traffic, planted events); the same
    seed writes the same files."""
    from rag_loop.demo.generate import write_demo
    click.echo(write_demo(out, seed))


def _reports_option(command: Callable) -> Callable:
    return click.option("--reports-dir", type=click.Path(file_okay=False, path_type=Path),
                        envvar="RAG_LOOP_REPORTS_DIR", show_envvar=True, default=lambda: home().reports_dir,
                        show_default="reports/ in $RAG_LOOP_HOME",
                        help="Where the postmortem (incident-INC-NNNN.md) is written.")(command)


def _goldens_option(command: Callable) -> Callable:
    return click.option("--goldens-dir", type=click.Path(file_okay=False, path_type=Path),
                        envvar="RAG_LOOP_GOLDENS_DIR", show_envvar=True, default=lambda: home().goldens_dir,
                        show_default="goldens/ in $RAG_LOOP_HOME", help="The golden releases (vNNNN/).")(command)


def _writable_db(db: str):
    """The database, for writing outside Dagster (`incidents`, `incident_traces`; a lake
    migration; as `rag-loop calibrate` writes judge_calibrations); a run holding it is said plainly."""
    if not Path(db).is_file():  # connecting would make an empty database there
        raise click.ClickException(f"no database at {db}: run the loop first, or pass --db")
    try:
        return duckdb.connect(db)
    except duckdb.Error as error:
        raise click.ClickException(f"cannot open {db} for writing ({error}); a Dagster run may hold it: "
                                   "retry when it ends") from error


@main.group()
def incident() -> None:
    """Quality incidents (seed 004 §14): open one on a window of traffic, get its postmortem filled
    from the data, put its failing traces first in the curation queue, close it with the release
    that holds its regression goldens."""


@incident.command("open")
@click.option("--from", "start", required=True, help="Start of the window: YYYY-MM-DD or an ISO date-time (UTC).")
@click.option("--to", "end", required=True,
              help="End of the window: a date is included whole; a date-time is excluded.")
@click.option("--slice", "slices", multiple=True, metavar="KEY=VALUE",
              help="Only traffic with KEY=VALUE (repeatable; a key twice: either value). Keys: language, "
                   "tenant, query_type, risk_level, environment, service, rag_version, prompt_version, "
                   "index_version, model_name, intent (a cluster id).")
@click.option("--query-contains", help="Only requests whose query contains this text (any case), e.g. an error code.")
@click.option("--title", help="A title; default: the window and slices.")
@click.option("--gating-release", help="The release that gated the last deploy (vNNNN), when the records "
                                       "do not say; default: inferred from eval runs and release dates.")
@click.option("--by", "opened_by", default=lambda: os.environ.get("USER") or getpass.getuser(),
              show_default="$USER")
@_db_option("The rag-loop database (the incident is stored in it).")
@_reports_option
@_goldens_option
def incident_open(start: str, end: str, slices: tuple[str, ...], query_contains: str | None, title: str | None,
                  gating_release: str | None, opened_by: str, db: str, reports_dir: Path, goldens_dir: Path) -> None:
    """Open an incident on a window of traffic and write its postmortem skeleton."""
    from rag_loop.incidents.record import IncidentError, IncidentRequest, parse_instant, parse_slices
    from rag_loop.incidents.runbook import open_incident
    try:
        request = IncidentRequest(parse_instant(start), parse_instant(end, end=True), parse_slices(slices),
                                  title, query_contains.strip() if query_contains else None, opened_by,
                                  gating_release)
        with _writable_db(db) as con:
            report = open_incident(con, request, reports_dir, goldens_dir)
    except IncidentError as error:
        raise click.UsageError(str(error)) from error
    impact = report.facts.impact
    click.echo(f"{report.incident['incident_id']}: {impact['requests']} requests in the window, "
               f"{impact['failing']} failing; their failing traces are P0 (origin incident) in the next "
               f"curation queue")
    if not impact["requests"]:
        click.echo("no request in the window matches: the postmortem says so")
    click.echo(f"postmortem: {report.postmortem}")


@incident.command("close")
@click.argument("incident_id")
@click.option("--actions", required=True, help="The corrective actions taken (kept in the postmortem).")
@click.option("--release", help="The release holding its regression goldens; default: the newest holding any.")
@_db_option("The rag-loop database.")
@_reports_option
@_goldens_option
def incident_close(incident_id: str, actions: str, release: str | None, db: str, reports_dir: Path,
                   goldens_dir: Path) -> None:
    """Close INCIDENT_ID: record its corrective actions and the release with its regression goldens."""
    from rag_loop.incidents.record import IncidentError
    from rag_loop.incidents.runbook import close_incident
    try:
        with _writable_db(db) as con:
            report = close_incident(con, incident_id, actions, reports_dir, goldens_dir, release)
    except IncidentError as error:
        raise click.UsageError(str(error)) from error
    chosen = report.incident["release_version"]
    click.echo(f"{incident_id} closed; regression goldens in {chosen}" if chosen else
               f"{incident_id} closed; warning: no release holds a golden from its traces yet")
    click.echo(f"postmortem: {report.postmortem}")


@incident.command("show")
@click.argument("incident_id")
@_db_option("The rag-loop database.")
@_reports_option
@_goldens_option
def incident_show(incident_id: str, db: str, reports_dir: Path, goldens_dir: Path) -> None:
    """Print INCIDENT_ID: its traces' goldens per release and the eval runs that tested them
    since (the postmortem is rewritten with them)."""
    from rag_loop.incidents.record import IncidentError
    from rag_loop.incidents.runbook import show_incident
    try:
        with _writable_db(db) as con:
            report = show_incident(con, incident_id, reports_dir, goldens_dir)
    except IncidentError as error:
        raise click.UsageError(str(error)) from error
    click.echo(report.text, nl=False)


@incident.command("golden")
@click.argument("name")
@_db_option("The rag-loop database.")
@_goldens_option
def incident_golden(name: str, db: str, goldens_dir: Path) -> None:
    """Print where golden NAME came from: per release, its trace(s) and incident(s); and the
    eval runs that tested it."""
    from rag_loop.incidents.facts import golden_origin
    try:
        with duckdb.connect(db, read_only=True) as con:
            found = golden_origin(con, goldens_dir, name)
    except duckdb.Error as error:
        raise click.ClickException(f"cannot read {db}: {error}") from error
    if not found["releases"]:
        raise click.UsageError(f"no release in {goldens_dir} holds a golden {name[:40]!r}")
    for row in found["releases"]:
        click.echo(f"{row['version']}: trace {row['trace_id']} (stands for {len(row['traces'])}: "
                   f"{', '.join(map(str, row['traces'][:10]))}); origin {row['origin']}; incidents: "
                   f"{', '.join(row['incidents']) or 'none'}")
    runs = found["runs"]
    click.echo(f"eval runs that tested it: {len(runs)}")
    for run in runs.itertuples():
        click.echo(f"  {run.run_id} ({run.release_version}, {run.started_at}): {run.passed} passed, "
                   f"{run.failed} failed, {run.errored} errored")


@main.group()
def lake() -> None:
    """The trace lake of a lake-backed deployment (RAG_LOOP_LAKE): Delta Lake tables that hold
    the trace-sized tables (rag_loop.store.deployment)."""


@lake.command("migrate")
@click.option("--to", "to", type=click.Choice(["lake", "embedded"]), required=True,
              help="lake: the trace-sized tables from the DuckDB file into the lake; embedded: back.")
@click.option("--lake", "uri", envvar="RAG_LOOP_LAKE", show_envvar=True, required=True,
              help="The lake: a folder or an s3:// URI (delta-rs reads AWS_* for its credentials).")
@_db_option("The rag-loop database.")
def migrate_lake(to: str, uri: str, db: str) -> None:
    """Move the trace-sized tables between the DuckDB file and the lake. Idempotent: what is in
    its home already stays; each table is written in one lake commit, then swapped in one
    database transaction. Runs never move tables: they refuse, and point here."""
    from rag_loop.store.deployment import WrongHome, migrate
    from rag_loop.store.lake import Lake
    lake = Lake.of(uri)
    with _writable_db(db) as con:
        try:
            moved = migrate(lake.attach(con), lake, to)
        except WrongHome as error:
            raise click.ClickException(str(error)) from error
    for table, rows in moved.items():
        click.echo(f"{table}: {rows} rows moved to the {'lake' if to == 'lake' else 'DuckDB file'}")
    click.echo(f"{len(moved)} tables moved" if moved else "nothing to move: every table is in its home")
