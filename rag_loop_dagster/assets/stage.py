"""Every DuckDB table a stage writes is an asset, so the lineage graph is the truth.

A stage that writes several tables is one `multi_asset`: its own asset (named after the step)
and one AssetSpec per part table, all materialized by the same step. `stage_asset` turns a
function written like an `@asset` (returning one MaterializeResult) into that multi_asset; the
part tables get their row counts after the step. A stage whose outcome must fail the run after
all is recorded (an eval its hard gates block) returns `FailAfterRecording`.
"""

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date

import duckdb
from dagster import (
    AssetCheckSpec,
    AssetExecutionContext,
    AssetsDefinition,
    AssetSpec,
    Failure,
    MaterializeResult,
    MetadataValue,
    multi_asset,
)

from rag_loop.engines.incremental import DayState, Fingerprints, compute_changed
from rag_loop.store.deployment import TRACE_SIZED, recorded_lake
from rag_loop.store.tables import has_table

DAY_STATE = "day_state"  # the metadata entry a day-by-day asset records its DayState in

Deps = Sequence[object]


@dataclass(frozen=True)
class FailAfterRecording:
    """What a stage returns to record `result` (metadata, checks, part row counts) and then
    fail the run with `failure`, whose description is the first line of the run's error."""

    result: MaterializeResult
    failure: Failure


def stage_asset(*, parts: Mapping[str, str], group_name: str, description: str, deps: Deps = (),
                check_specs: Sequence[AssetCheckSpec] = (), **multi_asset_kwargs
                ) -> Callable[[Callable[..., MaterializeResult | FailAfterRecording]], AssetsDefinition]:
    """An asset that also writes the tables `parts` (name -> what it holds).

    The function takes a `duckdb` resource and returns the stage asset's MaterializeResult.
    """
    def decorator(fn: Callable[..., MaterializeResult | FailAfterRecording]) -> AssetsDefinition:
        name = fn.__name__
        specs = [AssetSpec(name, deps=deps, description=description, group_name=group_name,
                           kinds={"duckdb"}),
                 *(AssetSpec(part, deps=deps, description=f"{text} (written by {name})",
                             group_name=group_name, kinds={"duckdb"},
                             metadata={"dagster/table_name": part})
                   for part, text in parts.items())]

        @multi_asset(name=name, specs=specs, check_specs=list(check_specs), **multi_asset_kwargs)
        @functools.wraps(fn)
        def step(*args, **kwargs):
            result, failure = fn(*args, **kwargs), None
            if isinstance(result, FailAfterRecording):
                result, failure = result.result, result.failure
            yield MaterializeResult(asset_key=name, metadata=result.metadata,
                                    check_results=result.check_results)
            with kwargs["duckdb"].get_connection() as con:
                for part in parts:
                    rows = con.execute(f"SELECT count(*) FROM {part}").fetchall()[0][0] \
                        if has_table(con, part) else 0
                    yield MaterializeResult(asset_key=part, metadata={"dagster/row_count": rows})
            if failure is not None:
                raise failure

        return step

    return decorator


def changed_days(context: AssetExecutionContext, con: duckdb.DuckDBPyConnection, database: str,
                 table: str, inputs: Fingerprints, compute: Callable[[list[date] | None], object]) -> dict:
    """`compute(days)` for the days of `table` whose inputs or rows changed since the asset's
    latest materialization (`compute(None)`: the whole table, when there is none or it recorded
    another database); returns the metadata recording the new state and what was computed."""
    recorded, days = compute_changed(con, table, _recorded_state(context), DayState(database, inputs), compute)
    return {DAY_STATE: MetadataValue.json(recorded.as_json()),
            "days_computed": "all" if days is None else len(days),
            "days_computed_list": "all" if days is None else ", ".join(map(str, days)) or "none"}


def _recorded_state(context: AssetExecutionContext) -> DayState | None:
    event = context.instance.get_latest_materialization_event(context.asset_key)
    materialization = event.asset_materialization if event else None
    entry = materialization.metadata.get(DAY_STATE) if materialization else None
    return DayState.from_json(entry.value) if entry is not None else None


def stored_in(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """Where the table's rows are, for the asset's metadata: in the trace lake (a Spark run's;
    the database has a view of its files), or in the control database."""
    lake = recorded_lake(con) if name in TRACE_SIZED else None
    return f"trace lake: {lake.uri(name)} (a Delta table; the control database holds a view of its files)" \
        if lake else "control database"
