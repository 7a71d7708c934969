"""What the daily-partitioned assets share (drift, online quality): the partitions, and one
check result per check over the days of a partition range."""

import os
import warnings
from collections.abc import Callable, Sequence
from datetime import date, datetime

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    BackfillPolicy,
    BetaWarning,
    DailyPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
)

from rag_loop.drift.checks import Verdict, over_days
from rag_loop.reporting import plots
from rag_loop.reporting.dashboard import change_markers

# a range of days as one run has no stable API in Dagster 1.13 but this beta parameter
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=BetaWarning)

# partitions are part of the definitions, so the first day is read when the code location
# loads: set RAG_LOOP_DRIFT_START to the first day of your traffic (`make demo`: 2026-11-01)
DAILY = DailyPartitionsDefinition(start_date=os.environ.get("RAG_LOOP_DRIFT_START", "2026-01-01"))
DRIFT_CRON = os.environ.get("RAG_LOOP_DRIFT_CRON", "30 1 * * *")  # after the day closes, UTC


def daily(group_name: str) -> dict:
    """Asset arguments of a daily-partitioned asset in `group_name` (a range runs as one run)."""
    return {"group_name": group_name, "partitions_def": DAILY, "backfill_policy": BackfillPolicy.single_run()}


def partition_days(context: AssetExecutionContext) -> list[date]:
    return [datetime.strptime(key, "%Y-%m-%d").date() for key in context.partition_keys]


def series_chart(con, sql: str, columns: Sequence[str] | None, title: str) -> dict:
    """A figure over every stored day, with deploy / prompt / index / document markers."""
    frame = con.execute(sql).df()
    if frame.empty:
        return {}
    columns = list(columns or [c for c in frame.columns if c != "day"])
    png = plots.time_series(frame, columns, title, change_markers(con))
    return {"over_time": MetadataValue.md(plots.markdown_image(png, title))}


def day_checks(context: AssetExecutionContext, check_names: Sequence[str],
               run_day: Callable[[date], list[Verdict]], table: str,
               chart: Callable[[], dict] | None = None, in_workspace: MetadataValue | None = None
               ) -> MaterializeResult:
    """Run every day of the partition range; one check result per check over those days;
    `in_workspace`: the link to the figures' page in the curator workspace (its dashboard)."""
    by_check: dict[str, list[tuple[date, Verdict]]] = {name: [] for name in check_names}
    for day in partition_days(context):
        for verdict in run_day(day):
            by_check[verdict.name].append((day, verdict))
        context.log.info(f"{table}: {day} done")
    checks, fired_days = [], set()
    for name, verdicts in by_check.items():
        fired_days.update(d for d, v in verdicts if v.fired)
        outcome = over_days([v for _, v in verdicts])
        rows = pd.DataFrame([{"day": str(d), "value": v.value, "n": v.n, "fired": v.fired,
                              "evaluated": v.evaluated, "severity": v.severity or "", "note": v.note}
                             for d, v in verdicts])
        last = verdicts[-1][1] if verdicts else None
        checks.append(AssetCheckResult(
            check_name=name, passed=outcome.passed,
            severity=AssetCheckSeverity.ERROR if outcome.severity == "ERROR" else AssetCheckSeverity.WARN,
            description=outcome.note,
            metadata={"days": len(verdicts), "days_fired": [str(d) for d, v in verdicts if v.fired],
                      "days_not_evaluated": [str(d) for d, v in verdicts if not v.evaluated],
                      "outcome": outcome.note,
                      "n": last.n if last else 0, "value": last.value if last and last.value is not None else -1.0,
                      "per_day": MetadataValue.md(rows.to_markdown(index=False) if len(rows) else "-"),
                      "details": MetadataValue.json({str(d): v.details for d, v in verdicts})}))
    return MaterializeResult(metadata={"days": len(partition_days(context)), "table": table,
                                       "days_with_alerts": sorted(str(d) for d in fired_days),
                                       **({"in_workspace": in_workspace} if in_workspace is not None else {}),
                                       **(chart() if chart is not None else {})},
                             check_results=checks)


def check_specs(asset_name: str, checks: dict[str, str]) -> list[AssetCheckSpec]:
    return [AssetCheckSpec(name, asset=asset_name, description=text) for name, text in checks.items()]
