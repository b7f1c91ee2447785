"""A TCP relay on loopback that holds each request for a while before passing it on.

A real Redis cannot be made slow per command without stalling every client
(DEBUG SLEEP blocks the server); the relay makes one client's view of it
slow, which is the fault under test: a KV that answers, late.
"""

from __future__ import annotations

import socket
import threading
import time

from fluxon_video.testing import LOOPBACK


class DelayRelay:
    """``LOOPBACK:port`` forwards to ``upstream``, each client->server chunk ``delay_s`` late."""

    def __init__(self, upstream_port: int, delay_s: float = 0.0) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection((LOOPBACK, self.upstream_port))
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, delayed: bool) -> None:
        try:
            while chunk := source.recv(1 << 16):
                if delayed and self.delay_s:
                    time.sleep(self.delay_s)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """Stop accepting and cut every relayed connection. Safe to call twice."""
        self._closed = True
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()

    def __enter__(self) -> DelayRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
