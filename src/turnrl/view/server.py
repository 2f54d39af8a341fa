"""``turnrl view RUN [RUN ...]``: the viewer served on loopback by the standard library.

Three routes besides the page and its static files: ``api/runs`` (every run's summary, read
afresh on each request so a run in progress shows its new steps on Reload) and
``api/step?run=K&step=S`` (the trajectory records of one step).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from turnrl.view.data import AUDIT_NAME, run_summary
from turnrl.view.export import ASSETS, STATIC, render_page
from turnrl.view.records import EPISODES, RECORDS_DIR, read_step

CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css"}


def make_server(runs: list[Path], host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server for ``runs`` (not yet serving); ``port=0`` picks a free port."""
    runs = [Path(r) for r in runs]
    page = render_page(", ".join(r.name for r in runs)).encode()
    cache: dict[Path, tuple[tuple, dict]] = {}

    def summary(run: Path) -> dict:
        """A run's summary, read again only when its files changed (a run in progress)."""
        key = tuple(
            (p.stat().st_mtime_ns, p.stat().st_size) if p.exists() else None
            for p in (run / "metrics.jsonl", run / EPISODES, run / RECORDS_DIR, run / AUDIT_NAME)
        )
        if run not in cache or cache[run][0] != key:
            cache[run] = (key, run_summary(run))
        return cache[run][1]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            url = urlparse(self.path)
            path = url.path.lstrip("/")
            if path in ("", "index.html"):
                return self._send(page, "text/html; charset=utf-8")
            if path.startswith("static/") and path[len("static/") :] in ASSETS:
                name = path[len("static/") :]
                body = (STATIC / name).read_bytes()
                return self._send(body, CONTENT_TYPES[Path(name).suffix], cache=True)
            if path == "api/runs":
                return self._json([summary(r) for r in runs])
            if path == "api/step":
                q = parse_qs(url.query)
                try:
                    run, step = int(q["run"][0]), int(q["step"][0])
                    run_dir = runs[run]
                except (KeyError, ValueError, IndexError):
                    return self.send_error(HTTPStatus.BAD_REQUEST, "expected ?run=K&step=S")
                return self._json(read_step(run_dir, step))
            self.send_error(HTTPStatus.NOT_FOUND)

        def _json(self, data) -> None:
            self._send(json.dumps(data, separators=(",", ":")).encode(), "application/json")

        def _send(self, body: bytes, ctype: str, cache: bool = False) -> None:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "max-age=3600" if cache else "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002
            pass  # one line per request would bury the address the user needs

    return ThreadingHTTPServer((host, port), Handler)
