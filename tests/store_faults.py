"""A relay in front of the test S3 server that answers chosen requests itself.

moto serves S3 faithfully but never throttles or refuses a request on its
own; the relay makes it look as if it did (503 SlowDown, 403 AccessDenied),
for the next ``n`` requests whose path contains a given text, and forwards
everything else untouched.
"""

from __future__ import annotations

import http.client
import http.server
import threading
from urllib.parse import urlsplit

from fluxon_video.testing import LOOPBACK, free_port

ERRORS = {503: "SlowDown", 403: "AccessDenied", 500: "InternalError"}


class FaultyRelay:
    """``url`` forwards to ``upstream`` unless a fault is armed (see ``fail``)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream).netloc
        self.port = free_port()
        self.faults: list[list] = []  # [status, path text, requests left]
        self.refused = 0
        self.forwarded: list[tuple[str, str]] = []  # (method, path) of what reached the store
        self._lock = threading.Lock()
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _serve(self) -> None:
                status = relay._take_fault(self.path)
                if status is not None:
                    body = (f"<Error><Code>{ERRORS[status]}</Code><Message>injected"
                            "</Message></Error>").encode()
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(body)
                    return
                with relay._lock:
                    relay.forwarded.append((self.command, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                upstream = http.client.HTTPConnection(relay.upstream, timeout=30)
                try:
                    upstream.request(self.command, self.path, body,
                                     {k: v for k, v in self.headers.items()
                                      if k.lower() != "host"})
                    response = upstream.getresponse()
                    data = response.read()
                finally:
                    upstream.close()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    # A HEAD's Content-Length is the object's size: keep it.
                    if key.lower() not in ("transfer-encoding", "connection") and (
                            key.lower() != "content-length" or self.command == "HEAD"):
                        self.send_header(key, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _serve

        self._server = http.server.ThreadingHTTPServer((LOOPBACK, self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def fail(self, status: int, path_text: str, times: int) -> None:
        """Answer the next ``times`` requests whose path contains ``path_text`` with ``status``."""
        with self._lock:
            self.faults.append([status, path_text, times])

    def _take_fault(self, path: str) -> int | None:
        with self._lock:
            for fault in self.faults:
                if fault[2] > 0 and fault[1] in path:
                    fault[2] -= 1
                    self.refused += 1
                    return fault[0]
        return None

    def __enter__(self) -> FaultyRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
