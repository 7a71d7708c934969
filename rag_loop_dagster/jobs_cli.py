"""The `rag-loop` command: the library's commands (rag_loop.cli, free of Dagster), the ones that
run the project's Dagster jobs, so that nobody writes run-config YAML by hand, and `serve`, the
curator workspace with a way to release (rag_loop_dagster.releasing):

    rag-loop release --notes "June refresh" --by ana@example.com
    rag-loop eval --release latest            # or v0002; -c FILE for the rest of the config
    rag-loop run drift_job --partition-range 2026-11-01...2026-11-14

A run goes through the job of `definitions.py` in this process and is recorded in the Dagster
instance of the deployment's home (DAGSTER_HOME, default `$RAG_LOOP_HOME/dagster`, set up from
deploy/dagster.yaml the first time), so it shows in the UI beside the runs the UI launched. The
run carries this process's host, pid and start (assets/run_liveness.py): a run whose process
was killed is ended before the next one starts here, and by the daemon's run monitoring.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click
import yaml

from rag_loop.cli import main, release_text
from rag_loop.home import home

INSTANCE_SETTINGS = Path(__file__).resolve().parent.parent / "deploy" / "dagster.yaml"


# the run launcher's module before the Dagster side moved into rag_loop_dagster/
_MOVED_MODULES = {"module: assets.run_liveness": "module: rag_loop_dagster.assets.run_liveness"}


def instance_home() -> Path:
    """DAGSTER_HOME, else the home's `dagster/` folder, with the project's instance settings
    (copied the first time; a home set up before the move to rag_loop_dagster/ has its module
    names brought up to date, or Dagster could not load its run launcher)."""
    folder = Path(os.environ.get("DAGSTER_HOME") or home().dagster_home)
    folder.mkdir(parents=True, exist_ok=True)
    settings = folder / "dagster.yaml"
    if not settings.exists() and INSTANCE_SETTINGS.exists():
        shutil.copy(INSTANCE_SETTINGS, settings)
    elif settings.exists():
        text = settings.read_text()
        updated = text
        for old, new in _MOVED_MODULES.items():
            updated = updated.replace(old, new)
        if updated != text:
            settings.write_text(updated)
            click.echo(f"{settings}: the run launcher's module renamed to rag_loop_dagster.assets.run_liveness",
                       err=True)
    os.environ["DAGSTER_HOME"] = str(folder)
    return folder


def run_job(name: str, run_config: Mapping[str, Any] | None = None, partition_range: str | None = None,
            log_file: Path | None = None) -> bool:
    """Execute job `name` of the project's definitions; True when the run succeeded. Then say
    how it went (`outcome_lines`: a verdict, the checks that failed, a report). With `log_file`,
    what the run prints (Dagster's event log at DEBUG, warnings, the libraries' output) is
    appended there instead of the terminal, which gets the outcome only."""
    import warnings

    from dagster import DagsterInstance
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    from rag_loop_dagster.assets.run_liveness import end_dead_runs, process_tags
    tags = process_tags()  # host, pid and start of this process: a run left behind by a kill is found
    if partition_range:
        first, _, last = partition_range.partition("...")
        if not first or not last:
            raise click.BadParameter(f"{partition_range!r}: expected FIRST...LAST", param_hint="--partition-range")
        tags |= {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}
    instance_home()
    ended: list[str] = []
    with output_to(log_file):
        from rag_loop_dagster.definitions import defs
        jobs = sorted(job.name for job in defs.resolve_all_job_defs() if not job.name.startswith("__"))
        if name not in jobs:
            raise click.BadParameter(f"no job {name!r}; the jobs: {', '.join(jobs)}", param_hint="JOB")
        job = defs.resolve_job_def(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            instance = DagsterInstance.get()
        with instance:
            # runs whose process was killed hold the instance's one run slot forever: end them first
            end_dead_runs(instance, echo=ended.append)
            for line in ended:
                click.echo(line, err=True)  # in the log too, when there is one
            result = job.execute_in_process(run_config=dict(run_config or {}), instance=instance, tags=tags,
                                            raise_on_error=False)
    lines = outcome_lines(name, result)
    if log_file:
        for line in ended:
            click.echo(line, err=True)
        with log_file.open("a", encoding="utf-8") as log:
            log.write("".join(f"{line}\n" for line in lines))
    for line in lines:
        click.echo(line)
    return result.success


@contextlib.contextmanager
def output_to(log_file: Path | None) -> Iterator[None]:
    """Standard output and error appended to `log_file` for the duration: Python's streams, and
    the file descriptors beneath them (what C libraries and child processes write); nothing
    changes without a file."""
    if log_file is None:
        yield
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        with log_file.open("a", encoding="utf-8", buffering=1) as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                    yield
            finally:
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])


def outcome_lines(name: str, result: Any) -> list[str]:
    """How a run went, from its events (an ExecuteInProcessResult): `NAME: SUCCESS|FAILURE (run
    ID)`, then what its assets say of themselves (`verdict` and `report` metadata), each failed
    gate of a check that lists them (`failed_gates`: the eval's hard and monitoring gates, one a
    line), the other failed checks by name on one line, and the error of each failed step that
    no verdict already gave."""
    from dagster import DagsterEventType

    from rag_loop.evaluation.gates import failure_words
    lines = [f"{name}: {'SUCCESS' if result.success else 'FAILURE'} (run {result.run_id})"]
    said: set[str] = set()
    verdicts, gates, errors, reports = [], [], [], []
    other_checks: dict[str, list[str]] = {}
    for event in result.all_events:
        if event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            metadata = event.step_materialization_data.materialization.metadata
            if "verdict" in metadata:
                said.add(str(metadata["verdict"].value))
                verdicts.append(f"  verdict: {metadata['verdict'].value}")
            if "report" in metadata:
                reports.append(f"  report: {metadata['report'].value}")
        elif event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluation = event.asset_check_evaluation_data
            if evaluation.passed:
                continue
            failed = evaluation.metadata.get("failed_gates")
            if failed is None or not failed.value:
                other_checks.setdefault(evaluation.severity.value, []).append(evaluation.check_name)
                continue
            gates.append(f"  {evaluation.check_name} on {evaluation.asset_key.to_user_string()} failed "
                         f"({evaluation.severity.value}{', blocking' if evaluation.blocking else ''}):")
            gates += [f"    - {failure_words(f)}" for f in failed.value]
        elif event.event_type == DagsterEventType.STEP_FAILURE:
            failure = event.step_failure_data
            error = failure.error
            while error is not None and error.cause is not None:  # the user's exception, not Dagster's wrapper
                error = error.cause
            text = (failure.user_failure_data.description if failure.user_failure_data
                    and failure.user_failure_data.description else error.message.strip() if error else "")
            if text not in said:
                said.add(text)
                errors.append(f"  {event.step_key} failed: {(text.splitlines() or ['see its run'])[0]}")
    if other_checks:
        gates.append("  checks that failed: " + "; ".join(
            f"{', '.join(names)} ({severity})" for severity, names in sorted(other_checks.items())))
    return lines + verdicts + errors + gates + reports


def _config(path: Path | None) -> dict[str, Any]:
    return (yaml.safe_load(path.read_text()) or {}) if path else {}


def _merged(base: dict[str, Any], ops: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """`base` run config with `ops.<op>.config` values set on top."""
    merged = dict(base)
    merged_ops = dict(merged.get("ops") or {})
    for op, values in ops.items():
        entry = dict(merged_ops.get(op) or {})
        entry["config"] = {**(entry.get("config") or {}), **values}
        merged_ops[op] = entry
    merged["ops"] = merged_ops
    return merged


_LOG = click.option("--log", "log_file", type=click.Path(dir_okay=False, writable=True, path_type=Path),
                    help="Append what the run prints (Dagster's event log, at DEBUG) to this file; the "
                         "terminal gets how it went: SUCCESS or FAILURE, a verdict, what failed.")
_CONFIG = click.option("-c", "--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                       help="A run config (YAML); the options below are set on top of it.")


@main.command("run")
@click.argument("job")
@_CONFIG
@click.option("--partition-range", help="FIRST...LAST days of a daily job, as one run.")
@_LOG
def run_command(job: str, config_file: Path | None, partition_range: str | None, log_file: Path | None) -> None:
    """Run a job of the project (rag_loop_job, ingest_job, label_job, release_goldens,
    regression_eval_job, drift_job); the exit status is 1 when the run fails (an eval that a
    hard gate blocks, too)."""
    sys.exit(0 if run_job(job, _config(config_file), partition_range, log_file) else 1)


@main.command("release")
@click.option("--notes", required=True, callback=release_text,
              help="What changed and why: kept in the release's manifest.")
@click.option("--by", "released_by", required=True, callback=release_text,
              help="Who releases (kept in the manifest; not empty, as --by \"$USER\" gives where USER is unset).")
@click.option("--settle-seconds", type=float, default=None,
              help="Label files younger than this wait for the next run (default: the asset's).")
@_CONFIG
@_LOG
def release_command(notes: str, released_by: str, settle_seconds: float | None, config_file: Path | None,
                    log_file: Path | None) -> None:
    """Store new label files and make the next golden release (the release_goldens job)."""
    ops: dict[str, dict[str, Any]] = {"golden_release": {"notes": notes, "released_by": released_by}}
    if settle_seconds is not None:
        ops["curated_labels"] = {"settle_seconds": settle_seconds}
    sys.exit(0 if run_job("release_goldens", _merged(_config(config_file), ops), log_file=log_file) else 1)


@main.command("eval")
@click.option("--release", default="latest", show_default=True, help='A release version (v0002) or "latest".')
@click.option("--mode", type=click.Choice(["live", "replay"]), default=None,
              help="live: ask the rag_app; replay: score what production answered (default: the config's).")
@click.option("--alignment", default=None, metavar="ID|latest|none",
              help="Judge with the pass thresholds fitted to curators' grades: an alignment_id of "
                   "judge_alignment, or latest (the newest that adopts one); none: the configured "
                   "thresholds. A new judge version: set trace_judgments' alignment alike, or the trust "
                   "floor finds no grades of it. Default: the config's (none).")
@click.option("--few-shot", "few_shot", default=None, metavar="ID|latest|none",
              help="Show an LLM judge curators' graded examples in its verdict prompts: a few_shot_id of "
                   "judge_few_shot (`rag-loop few-shot` measures them), or latest (the newest adopted); "
                   "none: no examples. A new judge version, as --alignment. Default: the config's (none).")
@click.option("--baseline-run", default=None, metavar="RUN_ID",
              help="Compare with this run (default: the previous run of the release that passed its hard "
                   "gates, if the same judge version scored it).")
@_CONFIG
@_LOG
def eval_command(release: str, mode: str | None, alignment: str | None, few_shot: str | None,
                 baseline_run: str | None, config_file: Path | None, log_file: Path | None) -> None:
    """Evaluate a golden release on the rag_app with the judge (the regression_eval_job job).
    Prints the verdict, each gate that failed (metric, slice, by how much against the baseline)
    and the report's path; a blocking gate that fails makes the exit status 1.

    The RAG service under test: RAG_LOOP_RAG_APP_URL, an HTTP endpoint that gets one JSON POST
    per golden (its fields: docs/regression-eval.md), else the config's Python rag_app."""
    chosen = {"mode": mode, "baseline_run": baseline_run,
              **{name: "" if value.strip().lower() == "none" else value.strip()
                 for name, value in (("alignment", alignment), ("few_shot", few_shot)) if value is not None}}
    values: dict[str, Any] = {"release": release, **{k: v for k, v in chosen.items() if v is not None}}
    config = _merged(_config(config_file), {"regression_eval": values})
    sys.exit(0 if run_job("regression_eval_job", config, log_file=log_file) else 1)


@main.command()
@click.option("--curation-dir", type=click.Path(file_okay=False, path_type=Path), envvar="RAG_LOOP_CURATION_DIR",
              show_envvar=True, default=lambda: home().curation_dir, show_default="curation/ in $RAG_LOOP_HOME",
              help="The curation folder: the queue export it shows, the labels folder it writes.")
@click.option("--reports-dir", type=click.Path(file_okay=False, path_type=Path), envvar="RAG_LOOP_REPORTS_DIR",
              show_envvar=True, default=lambda: home().reports_dir, show_default="reports/ in $RAG_LOOP_HOME",
              help="HTML reports of releases and evals, served at /reports/.")
@click.option("--goldens-dir", type=click.Path(file_okay=False, path_type=Path), envvar="RAG_LOOP_GOLDENS_DIR",
              show_envvar=True, default=lambda: home().goldens_dir, show_default="goldens/ in $RAG_LOOP_HOME",
              help="The golden releases it shows.")
@click.option("--dagster-url", envvar="RAG_LOOP_DAGSTER_URL", show_envvar=True, default=None,
              help="A Dagster webserver (e.g. http://127.0.0.1:3000) that launches a release from the "
                   "workspace, queued like any run; without it, the release runs `rag-loop release`.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on. Only a loopback address (127.0.0.1, ::1, localhost) goes "
                   "without --token; \"\", 0.0.0.0 and :: listen on every interface.")
@click.option("--port", type=int, default=8765, show_default=True)
@click.option("--token", envvar="RAG_LOOP_WORKSPACE_TOKEN", show_envvar=True, default=None,
              help="Every request must carry it (open the printed link once per browser).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, envvar="RAG_LOOP_WORKSPACE_HOSTS", show_envvar=True,
              help="A host name curators open the workspace by (repeatable; the variable: space-separated). "
                   "Requests naming another host are refused (DNS rebinding). Default: the --host address, "
                   "and localhost on loopback; required when --host listens on every interface.")
def serve(curation_dir: Path, reports_dir: Path, goldens_dir: Path, dagster_url: str | None, host: str, port: int,
          token: str | None, allowed_hosts: tuple[str, ...]) -> None:
    """The curator workspace in the browser: the queue, a trace and its label, the sources."""
    import uvicorn

    from rag_loop.workspace.app import create_app
    from rag_loop.workspace.incidents import IncidentCommands
    from rag_loop.workspace.security import is_loopback, served_hosts
    from rag_loop.workspace.store import Workspace
    from rag_loop_dagster.releasing import WebserverRelease, release_in_own_process
    if not is_loopback(host) and not token:
        raise click.UsageError(f"--host {host!r} is not a loopback address: set --token (or "
                               "RAG_LOOP_WORKSPACE_TOKEN), or listen on 127.0.0.1")
    try:
        hosts = served_hosts(host, allowed_hosts)
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    link = f"http://{hosts[0]}:{port}/" + (f"?token={token}" if token else "")
    click.echo(f"rag-loop workspace on {link} (queue exports in {curation_dir / 'queue'}; "
               f"answers to {', '.join(hosts)})")
    release = WebserverRelease(dagster_url) if dagster_url else release_in_own_process
    uvicorn.run(create_app(Workspace(curation_dir, reports_dir, goldens_dir), token, release, hosts,
                           IncidentCommands(reports_dir, goldens_dir)), host=host, port=port, log_level="warning")


if __name__ == "__main__":
    main()
