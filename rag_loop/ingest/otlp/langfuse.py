"""Spans as the Langfuse SDK (5.x, OpenTelemetry-based) writes them, read through the
conventions the OTLP mapping knows: `langfuse.observation.type` as the OpenInference span kind,
the observation's input and output as `input.value` / `output.value`, a retriever's output list
as GenAI's retrieval documents, a generation's model, usage and output message.

What the SDK emits was measured on a capture of its requests (`tests/fixtures/langfuse/`):
every structured value is a JSON text; session and user are the plain `session.id`, `user.id`.
"""

from __future__ import annotations

from typing import Any

from rag_loop.ingest.otlp.retrieved import GENAI_DOCUMENTS, json_value

OBSERVATION_TYPE = "langfuse.observation.type"
KINDS = {"generation": "LLM", "retriever": "RETRIEVER", "embedding": "EMBEDDING", "chain": "CHAIN",
         "agent": "AGENT", "tool": "TOOL", "evaluator": "EVALUATOR", "guardrail": "GUARDRAIL"}
_USAGE = {"llm.token_count.prompt": ("input", "prompt_tokens", "input_tokens"),
          "llm.token_count.completion": ("output", "completion_tokens", "output_tokens")}


def as_known_conventions(attrs: dict[str, Any]) -> dict[str, Any]:
    """`attrs` of a Langfuse observation with the OpenInference / GenAI keys the mapping reads
    added (never over a key the span has); any other span's attributes as they are."""
    kind = attrs.get(OBSERVATION_TYPE)
    if not isinstance(kind, str) or "openinference.span.kind" in attrs or "gen_ai.operation.name" in attrs:
        return attrs
    kind = kind.lower()
    added: dict[str, Any] = {"openinference.span.kind": KINDS.get(kind, "CHAIN")}
    for source, target in (("langfuse.observation.input", "input.value"),
                           ("langfuse.observation.output", "output.value")):
        if source in attrs:
            added[target] = attrs[source]
    output = attrs.get("langfuse.observation.output")
    parsed = json_value(output)
    if kind == "retriever" and output is not None:
        documents = parsed.get("documents") if isinstance(parsed, dict) else None
        added[GENAI_DOCUMENTS] = documents if isinstance(documents, list) else output
    if kind == "generation":
        if isinstance(parsed, dict | list):
            added["output.mime_type"] = "application/json"
        if isinstance(parsed, dict) and isinstance(parsed.get("content"), str):
            added["llm.output_messages.0.message.content"] = parsed["content"]
        if attrs.get("langfuse.observation.model.name") is not None:
            added["llm.model_name"] = attrs["langfuse.observation.model.name"]
        usage = json_value(attrs.get("langfuse.observation.usage_details"))
        for target, keys in _USAGE.items() if isinstance(usage, dict) else ():
            count = next((usage[k] for k in keys if isinstance(usage.get(k), int)), None)
            if count is not None and not isinstance(count, bool):
                added[target] = count
    return {**added, **attrs}
