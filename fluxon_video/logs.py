"""Logging: every message goes to ``logging.getLogger("fluxon_video")`` (silent
until the application configures logging), and repeated warnings are rate-limited."""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("fluxon_video")
logger.addHandler(logging.NullHandler())


def get_logger(name: str) -> logging.Logger:
    """``fluxon_video.<name>``."""
    return logger.getChild(name)


class RateLimited:
    """Logs a message kind at most once per ``interval_s``; says how many were held back."""

    def __init__(self, log: logging.Logger, interval_s: float = 10.0) -> None:
        self.log = log
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warning(self, kind: str, message: str, *args: object) -> None:
        if not self.log.isEnabledFor(logging.WARNING):
            return
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(kind, -1e18) < self.interval_s:
                self._held[kind] = self._held.get(kind, 0) + 1
                return
            self._last[kind] = now
            held = self._held.pop(kind, 0)
        if held:
            message += f" ({held} more like it in the last {self.interval_s:.0f} s)"
        self.log.warning(message, *args)
