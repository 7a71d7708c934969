"""The project's definitions with the model-free embedder: what the webserver test serves
(the bundled models run end to end in test_own_traces)."""

from rag_loop_dagster.assets.resources import build_resources
from rag_loop_dagster.definitions import build_definitions
from tests.helpers.fakes import HashingEmbedderResource

defs = build_definitions({**build_resources(), "embedder": HashingEmbedderResource()})
