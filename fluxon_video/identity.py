"""Whose requests a process makes: a default identity, swappable per thread or task."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from fluxon_video.errors import FluxonFsConfigError
from fluxon_video.fs.config import FluxonFsConfig, RequestIdentity


class IdentityContext:
    """The identity new readers capture: the default, or one made current with ``using``."""

    def __init__(self, config: FluxonFsConfig,
                 default: RequestIdentity | str | None = None) -> None:
        self.config = config
        self._default: RequestIdentity | None = None
        self._temporary: contextvars.ContextVar[RequestIdentity | None] = \
            contextvars.ContextVar(f"fluxon_identity_{id(self)}", default=None)
        if default is not None:
            self.default = default  # type: ignore[assignment]

    def as_identity(self, identity: RequestIdentity | str) -> RequestIdentity:
        if isinstance(identity, RequestIdentity):
            return identity
        if isinstance(identity, str):
            return self.config.identity(identity)
        raise FluxonFsConfigError(
            f"an identity is a RequestIdentity or a configured name, got {identity!r}")

    @property
    def default(self) -> RequestIdentity | None:
        return self._default

    @default.setter
    def default(self, identity: RequestIdentity | str) -> None:
        self._default = self.as_identity(identity)

    @property
    def current(self) -> RequestIdentity | None:
        return self._temporary.get() or self._default

    @contextlib.contextmanager
    def using(self, identity: RequestIdentity | str) -> Iterator[RequestIdentity]:
        """Make identity current in this thread/task for the ``with`` block."""
        token = self._temporary.set(self.as_identity(identity))
        try:
            yield self._temporary.get()  # type: ignore[misc]
        finally:
            self._temporary.reset(token)

    def resolve(self, identity: RequestIdentity | str | None) -> RequestIdentity:
        """The identity given, else the current one; raises if there is none."""
        who = self.as_identity(identity) if identity is not None else self.current
        if who is None:
            raise FluxonFsConfigError(
                "no request identity is set: pass identity= to FluxonFsPatcher or set "
                "patcher.identity")
        return who
