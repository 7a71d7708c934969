"""rag-loop on Dagster: the assets (one module per group), the one Definitions object and the
`rag-loop run / release / eval` commands. The library, `rag_loop`, stays free of Dagster."""
