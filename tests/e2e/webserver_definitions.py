"""The project's definitions with the model-free embedder: what the webserver test serves
(the bundled models run end to end in test_own_traces)."""

# what the definitions load is loaded by them first, as workspace.yaml's code server does
# (without collections, then frozen: rag_loop_dagster/definitions.py)
from rag_loop_dagster.definitions import build_definitions, build_resources
from tests.helpers.fakes import HashingEmbedderResource

defs = build_definitions({**build_resources(), "embedder": HashingEmbedderResource()})
