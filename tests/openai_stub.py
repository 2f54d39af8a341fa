"""An OpenAI-compatible chat-completions endpoint on loopback, for tests of endpoint clients.

A subclass says what it answers (:meth:`OpenAIStub.reply`); the stub records every request
(path, Authorization header, JSON body) and serves on a free port until :meth:`close`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OpenAIStub:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                auth = self.headers.get("Authorization")
                stub.requests.append({"path": self.path, "auth": auth, "body": body})
                reply = stub.reply(body)
                data = b"internal error" if reply is None else json.dumps(reply).encode()
                try:
                    self.send_response(500 if reply is None else 200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def bodies(self) -> list[dict]:
        return [r["body"] for r in self.requests]

    def reply(self, body: dict) -> dict | None:
        """The response to a request's JSON body; None answers HTTP 500."""
        raise NotImplementedError

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
