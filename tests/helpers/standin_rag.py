"""A local stand-in for a user's RAG service over HTTP, for the `http` rag_app on loopback."""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RagService:
    """Answers POSTs by path: /ok, /nested, /error (500), /slow (hangs), /text, /empty."""

    def __init__(self):
        self.requests: list[dict] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                service.requests.append({"path": self.path, "body": body,
                                         "auth": self.headers.get("Authorization")})
                replies = {
                    "/ok": {"answer": f"echo {body.get('query')}",
                            "retrieval_context": ["plain text", {"chunk_id": "c1", "text": "object"}]},
                    "/nested": {"data": {"output": {"text": "nested"}, "sources": [{"content": "s"}]}},
                    "/empty": {"contexts": []},
                }
                if self.path == "/slow":
                    time.sleep(2)
                status = 500 if self.path == "/error" else 200
                payload = b"not json" if self.path == "/text" else json.dumps(
                    replies.get(self.path, {})).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(payload)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client hung up on /slow
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # shutdown() waits for the serving loop's next poll: 0.05 s, not the default 0.5 s per test
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
