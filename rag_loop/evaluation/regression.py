"""One regression eval: release × system under test × judge → stored run, report and gates."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from rag_loop.evaluation.alignment import judge_version
from rag_loop.evaluation.calibration import latest_calibration
from rag_loop.evaluation.gates import (
    NO_BASELINE_FIGURE,
    GateOutcome,
    baseline_note,
    baseline_run,
    compare,
    evaluate_gates,
    flips,
    load_results,
    summarize,
)
from rag_loop.evaluation.judges.base import Judge, JudgeUsage, cases_at_once
from rag_loop.evaluation.runner import Case, build_cases, release_of, score_cases, store_run
from rag_loop.evaluation.settings import EvalError, EvalSettings, load_app
from rag_loop.evaluation.trust import JudgeTrust, apply_trust, judge_trust
from rag_loop.logs import Log, quiet


@dataclass
class RegressionReport:
    run_id: str
    release: str
    baseline_run_id: str | None
    table: pd.DataFrame  # summary per metric × slice, with baseline deltas
    flipped: pd.DataFrame
    gates: list[GateOutcome]
    usage: JudgeUsage
    cases: int
    errored: int
    seconds: float
    # every gate failure as stored in eval_runs.gate_failures (metric, blocking, slice, value, n,
    # problems), the run's own (deadline, errored results) included
    failures: list[dict[str, Any]] = field(default_factory=list)
    trust: dict[str, JudgeTrust] = field(default_factory=dict)  # per gated metric, with a trust floor
    judge_version: str = ""  # the version that scored the run (alignment and few-shot included)
    alignment_id: str | None = None  # the thresholds fitted to curators' grades, if adopted
    few_shot_id: str | None = None  # the curators' examples in the judge's prompts, if shown
    # the baseline was judged by another judge version: said, and (unless named) not compared
    baseline_note: str | None = None

    @property
    def blocked(self) -> bool:
        return any(f["blocking"] for f in self.failures)


def run_regression(con: duckdb.DuckDBPyConnection, goldens_dir: Path, judge: Judge,
                   settings: EvalSettings, log: Log = quiet,
                   app: Callable[..., Mapping[str, Any]] | None = None) -> RegressionReport:
    """Score the release, store the run, compare with the baseline, evaluate the gates.

    In live mode `app` answers each golden (default: the function `settings.rag_app` names).

    Raises EvalError (after storing everything) when more than `max_error_rate` of the
    case × metric results errored.
    """
    release, goldens, sha256 = release_of(goldens_dir, settings.release)
    if settings.mode == "live":
        app = app or load_app(settings.rag_app)
    else:
        app = None
    cases = build_cases(goldens, settings.mode, app, settings.rag_config, con)
    # the judge version: the judge as it is (curators' examples in its prompts, if shown) and the
    # alignment of its thresholds; what online judging with the same settings records, and
    # whose agreement with curators the trust floor looks up
    judge_id, version = judge_version(judge, settings.alignment)
    description = {**judge.describe(), "judge_version": version}
    if settings.alignment is not None:
        description["alignment"] = settings.alignment.describe()
    log(f"{release}: {len(cases)} cases, mode {settings.mode}, judge {judge_id} version {version}")
    judge.open(con)
    try:  # as online judging: a case's metrics at once, as many cases as the judge's calls allow
        run = score_cases(cases, lambda case: judge.metrics(settings.thresholds_for(_language(case))),
                          cases_at_once(settings.concurrency, judge), log, settings.deadline_seconds,
                          judge.end_calls)
    finally:  # what was paid for is kept, whatever happened
        judge.close(con)
    usage = judge.usage
    description["calibration"] = latest_calibration(con, description["model"])  # vs humans, if known
    trust: dict[str, JudgeTrust] = {}
    if settings.trust is not None:  # vs curators' grades of this judge version's online verdicts
        trust = judge_trust(con, [g.metric for g in settings.gates], version, settings.trust)
        description["trust"] = {metric: t.words() for metric, t in trust.items()}
    run_id = store_run(con, run, cases, {
        "release_version": release, "release_sha256": sha256, "mode": settings.mode,
        "rag_app": settings.rag_app if settings.mode == "live" else "replay",
        "rag_config": dict(settings.rag_config), "judge": description,
        "metrics": dict(settings.thresholds), "gates": [asdict(g) for g in settings.gates],
        "judge_calls": usage.calls, "judge_cache_hits": usage.cache_hits,
        "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd})
    baseline_id = baseline_run(con, release, run_id, settings.baseline_run)
    # another judge version's baseline is another instrument: never compared silently
    note = baseline_note(con, baseline_id, version, named=bool(settings.baseline_run))
    if note is not None:
        description["baseline"] = {"run_id": baseline_id, "compared": bool(settings.baseline_run), "note": note}
        con.execute("UPDATE eval_runs SET judge = ? WHERE run_id = ?", [json.dumps(description, default=str), run_id])
        if not settings.baseline_run:
            baseline_id = None
    con.execute("UPDATE eval_runs SET baseline_run_id = ? WHERE run_id = ?", [baseline_id, run_id])
    results, before = load_results(con, run_id), load_results(con, baseline_id)
    table = compare(summarize(results, settings.severe_below),
                    summarize(before, settings.severe_below) if before is not None else None)
    flipped = flips(results, before)
    _append(con, "eval_summary", table.assign(run_id=run_id, baseline_run_id=baseline_id))
    _append(con, "eval_flips", flipped.assign(run_id=run_id, baseline_run_id=baseline_id))
    outcomes = evaluate_gates(table, settings.gates,
                              note if note is not None and baseline_id is None else NO_BASELINE_FIGURE)
    failures = [{"metric": o.gate.metric, "blocking": o.gate.blocking, **f}
                for o in outcomes for f in o.failures]
    if settings.trust is not None:
        failures = apply_trust(failures, trust, settings.trust)
    total = len(results)
    untrusted = bool(total) and run.errored / total > settings.max_error_rate
    if run.unfinished:  # cut off by its deadline: blocked, never a baseline
        failures.append({"metric": "run deadline", "blocking": True, "slice": "all", "value": "all",
                         "n": len(cases), "problems": f"{run.unfinished}/{len(cases)} cases not scored "
                                                      f"within {settings.deadline_seconds:g} s"})
    if untrusted:  # blocked, so that it never becomes a baseline
        failures.append({"metric": "errored results", "blocking": True, "slice": "all",
                         "value": "all", "n": total, "problems": f"{run.errored}/{total} errored "
                                                                 f"(> {settings.max_error_rate:.0%})"})
    not_evaluated = [{"metric": o.gate.metric, "blocking": o.gate.blocking, **f}
                     for o in outcomes for f in o.not_evaluated]
    con.execute("UPDATE eval_runs SET blocked = ?, gate_failures = ?, gates_not_evaluated = ? WHERE run_id = ?",
                [any(f["blocking"] for f in failures), json.dumps(failures), json.dumps(not_evaluated), run_id])
    report = RegressionReport(run_id, release, baseline_id, table, flipped, outcomes, usage,
                              len(cases), run.errored, run.seconds, failures, trust, version,
                              settings.alignment.alignment_id if settings.alignment is not None else None,
                              (description.get("few_shot") or {}).get("few_shot_id"), note)
    if untrusted:
        raise EvalError(f"{run.errored}/{total} results errored (> {settings.max_error_rate:.0%}); "
                        f"run {run_id} is stored but cannot be trusted")
    return report


def _language(case: Case) -> str | None:
    """The golden's language (what a per-language aligned threshold is chosen by)."""
    return (case.golden.get("additional_metadata") or {}).get("language")


def _append(con: duckdb.DuckDBPyConnection, name: str, frame: pd.DataFrame) -> None:
    if frame.empty:
        return
    con.register("_rows", frame)
    try:
        con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM _rows")
    finally:
        con.unregister("_rows")
