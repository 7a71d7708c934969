"""A local stand-in for an OpenAI-compatible chat endpoint, for judge tests on loopback.

It answers `POST /v1/chat/completions` with canned JSON that fits the JSON schema the client
sent in `response_format` (enums take their first value, so verdicts are "yes"), records
every request, and can be switched to fail (HTTP 500) or to hang past the client's timeout,
to answer after `delay` seconds, and to refuse a share `flaky` of requests at random with
429 (retry-after-ms 20), 500, 503 or a stall past the client's timeout.
"""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REFUSALS = (429, 500, 503, 0)  # 0: the connection stalls past the client's timeout


def instance_of(schema: dict[str, Any], definitions: dict[str, Any]) -> Any:
    """A value that validates against `schema` (enough of JSON Schema for pydantic models)."""
    if "$ref" in schema:
        return instance_of(definitions[schema["$ref"].split("/")[-1]], definitions)
    for combined in ("anyOf", "oneOf", "allOf"):
        if combined in schema:
            options = [s for s in schema[combined] if s.get("type") != "null"] or schema[combined]
            return instance_of(options[0], definitions)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: instance_of(sub, definitions) for name, sub in properties.items()}
    if kind == "array":
        return [instance_of(schema.get("items", {"type": "string"}), definitions)]
    if kind in ("number", "integer"):
        return 10
    if kind == "boolean":
        return True
    return "stand-in"


class StandIn:
    def __init__(self):
        self.requests: list[dict[str, Any]] = []
        self.mode = "ok"  # "ok" | "slow" (answers after 0.3 s) | "fail" | "hang"
        self.content: str | None = None  # a fixed reply instead of one that fits the schema
        self.delay = 0.0  # seconds before each answer
        self.flaky = 0.0  # share of requests refused with 429 / 500 / 503 or stalled
        self.stall_seconds = 3.0
        self.refused: list[int] = []  # status of each refusal (0: stalled)
        self.in_flight = self.max_in_flight = 0
        self._lock, self._random, self._refusals = threading.Lock(), random.Random(7), 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append({"path": self.path, "authorization": self.headers.get("Authorization"),
                                       "body": body})
                with owner._lock:
                    owner.in_flight += 1
                    owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
                    refusal = REFUSALS[owner._refusals % len(REFUSALS)] \
                        if owner._random.random() < owner.flaky else None
                    owner._refusals += refusal is not None  # each kind in turn
                try:
                    self._answer(body, refusal)
                except OSError:  # the client gave up waiting
                    pass
                finally:
                    with owner._lock:
                        owner.in_flight -= 1

            def _answer(self, body, refusal):
                if refusal is not None:
                    owner.refused.append(refusal)
                    if refusal == 0:
                        time.sleep(owner.stall_seconds)
                        return
                    self.send_response(refusal)
                    self.send_header("retry-after-ms", "20")  # the client honours a server-directed delay
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "busy"}}')
                    return
                if owner.delay:
                    time.sleep(owner.delay)
                if owner.mode == "hang":
                    time.sleep(3)
                if owner.mode == "slow":
                    time.sleep(0.3)
                if owner.mode in ("fail", "hang"):
                    try:
                        self.send_response(500)
                        self.end_headers()
                        self.wfile.write(b'{"error": {"message": "judge down"}}')
                    except OSError:  # the client gave up waiting (the "hang" case)
                        pass
                    return
                schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
                content = owner.content if owner.content is not None else json.dumps(
                    instance_of(schema, schema.get("$defs", {})))
                reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content}}],
                         "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # the judge opens many connections at once
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
