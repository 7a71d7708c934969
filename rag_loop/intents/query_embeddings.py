"""`query_embeddings`: which vector (model, text hash) each candidate's query has; the vectors
themselves live in `embedding_cache`, so a rerun embeds nothing twice."""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import pandas as pd

from rag_loop.intents.members import MEMBERS_SQL
from rag_loop.logs import Log, quiet
from rag_loop.store.tables import replace_table
from rag_loop.vectors.cache import text_hash
from rag_loop.vectors.router import LanguageRouter


@dataclass
class EmbeddingReport:
    """What `embed_candidates` embedded, per language."""

    traces: int = 0
    embedded: dict[str, int] = field(default_factory=dict)  # language -> candidates
    models: dict[str, str] = field(default_factory=dict)  # language -> model id
    precisions: dict[str, str] = field(default_factory=dict)  # language -> weights' precision
    languages_on_default_model: dict[str, int] = field(default_factory=dict)  # no model of their own
    truncated_queries: int = 0  # distinct queries beyond their model's window

    def figures(self) -> dict[str, object]:
        """Flat figures for metadata: embedded_<language>, model_<language>, precision_<language>."""
        return {**{f"embedded_{k}": v for k, v in self.embedded.items()},
                **{f"model_{k}": v for k, v in self.models.items()},
                **{f"precision_{k}": v for k, v in self.precisions.items()},
                "truncated_queries": self.truncated_queries}


def embed_candidates(con: duckdb.DuckDBPyConnection, router: LanguageRouter,
                     log: Log = quiet) -> EmbeddingReport:
    """(Re)build `query_embeddings` (trace_id, language, model_id, text_hash) for the
    candidates; vectors live in `embedding_cache`, so only new texts are embedded."""
    members = con.execute(MEMBERS_SQL).df()
    rows, report = [], EmbeddingReport()
    for language, group in members.groupby("language", sort=True):
        model_id, _ = router.embed(con, group["query"].tolist(), language, log=log)
        hashes = [text_hash(router.prepare(q, language)) for q in group["query"]]
        rows.append(pd.DataFrame({"trace_id": group["trace_id"], "language": language,
                                  "model_id": model_id, "text_hash": hashes}))
        report.embedded[language], report.models[language] = len(group), model_id
        precision = getattr(router.for_language(language), "precision", None)
        if precision:
            report.precisions[language] = precision
        if not router.configured(language):
            report.languages_on_default_model[language] = len(group)
        cut = router.count_truncated(group["query"].drop_duplicates().tolist(), language) or 0
        if cut:
            log(f"{language}: {cut} distinct queries longer than {model_id}'s window were "
                "embedded from their first tokens")
        report.truncated_queries += cut
    table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        columns=["trace_id", "language", "model_id", "text_hash"])
    replace_table(con, "query_embeddings", table)
    report.traces = len(table)
    return report
