"""`query_embeddings`: which vector (model, text hash) each candidate's query has; the vectors
themselves live in `embedding_cache`, so a rerun embeds nothing twice."""

from __future__ import annotations

import duckdb
import pandas as pd

from rag_loop.intents.members import MEMBERS_SQL
from rag_loop.logs import Log, quiet
from rag_loop.store.tables import replace_table
from rag_loop.vectors.cache import text_hash
from rag_loop.vectors.router import LanguageRouter


def embed_candidates(con: duckdb.DuckDBPyConnection, router: LanguageRouter,
                     log: Log = quiet) -> dict[str, object]:
    """(Re)build `query_embeddings` (trace_id, language, model_id, text_hash) for the
    candidates; vectors live in `embedding_cache`, so only new texts are embedded."""
    members = con.execute(MEMBERS_SQL).df()
    rows, figures, default_model, truncated = [], {}, {}, 0
    for language, group in members.groupby("language", sort=True):
        model_id, _ = router.embed(con, group["query"].tolist(), language, log=log)
        hashes = [text_hash(router.prepare(q, language)) for q in group["query"]]
        rows.append(pd.DataFrame({"trace_id": group["trace_id"], "language": language,
                                  "model_id": model_id, "text_hash": hashes}))
        figures[f"embedded_{language}"] = len(group)
        figures[f"model_{language}"] = model_id
        precision = getattr(router.for_language(language), "precision", None)
        if precision:
            figures[f"precision_{language}"] = precision
        if not router.configured(language):
            default_model[language] = len(group)
        cut = router.count_truncated(group["query"].drop_duplicates().tolist(), language) or 0
        if cut:
            log(f"{language}: {cut} distinct queries longer than {model_id}'s window were "
                "embedded from their first tokens")
        truncated += cut
    figures["languages_on_default_model"] = default_model  # no model of their own configured
    figures["truncated_queries"] = truncated
    table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        columns=["trace_id", "language", "model_id", "text_hash"])
    replace_table(con, "query_embeddings", table)
    return {"traces": len(table), **figures}
