"""Every DuckDB table a stage writes is an asset, so the lineage graph is the truth.

A stage that writes several tables is one `multi_asset`: its own asset (named after the step)
and one AssetSpec per part table, all materialized by the same step. `stage_asset` turns a
function written like an `@asset` (returning one MaterializeResult) into that multi_asset; the
part tables get their row counts after the step.
"""

import functools
from collections.abc import Callable, Mapping, Sequence

from dagster import (
    AssetCheckSpec,
    AssetsDefinition,
    AssetSpec,
    MaterializeResult,
    multi_asset,
)

from rag_loop.store.tables import has_table

Deps = Sequence[object]


def stage_asset(*, parts: Mapping[str, str], group_name: str, description: str, deps: Deps = (),
                check_specs: Sequence[AssetCheckSpec] = (), **multi_asset_kwargs
                ) -> Callable[[Callable[..., MaterializeResult]], AssetsDefinition]:
    """An asset that also writes the tables `parts` (name -> what it holds).

    The function takes a `duckdb` resource and returns the stage asset's MaterializeResult.
    """
    def decorator(fn: Callable[..., MaterializeResult]) -> AssetsDefinition:
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
            result = fn(*args, **kwargs)
            yield MaterializeResult(asset_key=name, metadata=result.metadata,
                                    check_results=result.check_results)
            with kwargs["duckdb"].get_connection() as con:
                for part in parts:
                    rows = con.execute(f"SELECT count(*) FROM {part}").fetchall()[0][0] \
                        if has_table(con, part) else 0
                    yield MaterializeResult(asset_key=part, metadata={"dagster/row_count": rows})

        return step

    return decorator

