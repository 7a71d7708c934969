"""A local stand-in for an OpenAI-compatible chat endpoint, for judge tests on loopback.

It answers `POST /v1/chat/completions` with canned JSON that fits the JSON schema the client
sent in `response_format` (enums take their first value, so verdicts are "yes"), records
every request, and can be switched to fail (HTTP 500) or to hang past the client's timeout,
to answer after `delay` seconds, and to refuse a share `flaky` of requests at random with
429 (retry-after-ms 20), 500, 503 or a stall past the client's timeout (`refusals`: which
kinds, in turn). `reply` answers a request its own way (a judge that follows few-shot
examples); each request records when it arrived and was answered.

It speaks HTTP/1.1 and every reply, errors included, carries its Content-Length, so a client
keeps its connections alive (`connections` counts the ones opened). A stall closes its
connection, as a proxy that gives up would.

`python -m tests.helpers.standin_openai --delay 0.2 --flaky 0.15` serves it in a process of its
own (a benchmark then measures the judge's CPU, not the stand-in's); it prints its base URL,
and `GET /stats` gives requests, refusals, calls in flight at most and connections opened
(`StandInProcess` starts and reads it).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
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
        self.reply: Callable[[dict[str, Any]], str | None] | None = None  # a reply per request (None: as usual)
        self.delay = 0.0  # seconds before each answer
        self.flaky = 0.0  # share of requests refused with 429 / 500 / 503 or stalled
        self.stall_seconds = 3.0
        self.refused: list[int] = []  # status of each refusal (0: stalled)
        self.refusals = REFUSALS  # the kinds of refusal, each in turn
        self.in_flight = self.max_in_flight = self.connections = 0
        self._lock, self._random, self._refusals = threading.Lock(), random.Random(7), 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: every reply says its length
            # a reply's headers and body are two writes: with Nagle's algorithm the body waits
            # for the client's delayed ACK of the headers, 40 ms per call on a kept-alive connection
            disable_nagle_algorithm = True

            def log_message(self, *args):  # quiet
                pass

            def setup(self):
                super().setup()
                with owner._lock:
                    owner.connections += 1

            def _send(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200 if self.path == "/stats" else 404, json.dumps(owner.stats()).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = {"path": self.path, "authorization": self.headers.get("Authorization"),
                           "body": body, "arrived": time.monotonic(), "answered": None}
                owner.requests.append(request)
                with owner._lock:
                    owner.in_flight += 1
                    owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
                    refusal = owner.refusals[owner._refusals % len(owner.refusals)] \
                        if owner._random.random() < owner.flaky else None
                    owner._refusals += refusal is not None  # each kind in turn
                try:
                    self._answer(body, refusal)
                except OSError:  # the client gave up waiting
                    pass
                finally:
                    request["answered"] = time.monotonic()
                    with owner._lock:
                        owner.in_flight -= 1

            def _answer(self, body, refusal):
                if refusal is not None:
                    owner.refused.append(refusal)
                    if refusal == 0:
                        time.sleep(owner.stall_seconds)
                        self.close_connection = True  # nothing was said: the connection is dropped
                        return
                    # the client honours a server-directed delay
                    self._send(refusal, b'{"error": {"message": "busy"}}', {"retry-after-ms": "20"})
                    return
                if owner.delay:
                    time.sleep(owner.delay)
                if owner.mode == "hang":
                    time.sleep(3)
                if owner.mode == "slow":
                    time.sleep(0.3)
                if owner.mode in ("fail", "hang"):
                    try:
                        self._send(500, b'{"error": {"message": "judge down"}}')
                    except OSError:  # the client gave up waiting (the "hang" case)
                        pass
                    return
                schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
                content = owner.reply(body) if owner.reply is not None else None
                if content is None:
                    content = owner.content if owner.content is not None else json.dumps(
                        instance_of(schema, schema.get("$defs", {})))
                reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content}}],
                         "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}
                self._send(200, json.dumps(reply).encode())

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # the judge opens many connections at once
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        # shutdown() waits for the serving loop's next poll: 0.05 s, not the default 0.5 s per test
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def stats(self) -> dict[str, Any]:
        """What was asked so far: requests, refusals by status, calls in flight at most, connections."""
        with self._lock:
            return {"requests": len(self.requests), "refused": list(self.refused),
                    "max_in_flight": self.max_in_flight, "connections": self.connections}

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class StandInProcess:
    """The stand-in served by a process of its own (`python -m tests.helpers.standin_openai`),
    so that its threads do not share the judge's interpreter; `stats()` asks it over HTTP."""

    def __init__(self, delay: float = 0.0, flaky: float = 0.0, stall_seconds: float = 3.0):
        self.arguments = ["--delay", str(delay), "--flaky", str(flaky), "--stall-seconds", str(stall_seconds)]
        self.process: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> StandInProcess:
        self.process = subprocess.Popen([sys.executable, "-m", "tests.helpers.standin_openai", *self.arguments],
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.base_url = self.process.stdout.readline().strip()
        if not self.base_url.startswith("http://"):
            self.process.kill()
            raise RuntimeError(f"the stand-in did not start: {self.base_url!r}")
        return self

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/stats", timeout=5) as reply:
            return json.loads(reply.read())

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description="serve the stand-in judge until killed")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--flaky", type=float, default=0.0)
    parser.add_argument("--stall-seconds", type=float, default=3.0)
    args = parser.parse_args()
    server = StandIn()
    server.delay, server.flaky, server.stall_seconds = args.delay, args.flaky, args.stall_seconds
    print(server.base_url, flush=True)
    server.server.serve_forever()


if __name__ == "__main__":
    main()
