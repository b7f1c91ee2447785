"""The public exception hierarchy.

Every error fluxon_video raises derives from :class:`FluxonFsError`. Where a
builtin exception says the same thing, the class derives from it too, so
``except IndexError`` or ``except FileNotFoundError`` keep working in code
written against other decoders.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


class FluxonFsError(Exception):
    """Base class of every fluxon_video error.

    Besides its message, an error about a file says which one, as fields
    (None where they do not apply or are not known): ``export`` and
    ``relpath`` for a FluxonFS file, ``path`` for a local one, and ``reason``,
    the message without the file's name (what went wrong)."""

    export: str | None = None
    relpath: str | None = None
    path: str | None = None
    reason: str | None = None


@contextmanager
def located(export: str | None = None, relpath: str | None = None,
            path: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Fill in which file the FluxonFsErrors raised inside are about (where the
    raising code did not), and their reason: the message after the file's name."""
    try:
        yield
    except FluxonFsError as exc:
        if exc.export is None and exc.relpath is None and exc.path is None:
            exc.export, exc.relpath = export, relpath
            exc.path = None if path is None else os.fspath(path)
        if exc.reason is None:
            message = str(exc)
            for name in (f"{exc.export}:{exc.relpath}", exc.path):
                if name and message.startswith(f"{name}: "):
                    message = message[len(name) + 2:]
                    break
            exc.reason = message
        raise


class FluxonFsConfigError(FluxonFsError, ValueError):
    """Bad configuration or argument (unknown key, non-positive size, ...)."""


class FluxonFsUnavailableError(FluxonFsError, RuntimeError):
    """The package was built without FFmpeg support."""


class FluxonFsClosedError(FluxonFsError, ValueError):
    """The reader, pool or byte source was closed."""


class FluxonFsFrameIndexError(FluxonFsError, IndexError):
    """A requested frame index is negative or past the last frame."""


class FluxonFsDecodeError(FluxonFsError, ValueError):
    """FFmpeg could not demux or decode the data."""


class FluxonFsDamagedStreamError(FluxonFsDecodeError):
    """A requested frame depends on data the decoder rejected or flagged
    corrupt (the default ``on_damage="error"``)."""


class FluxonFsNoVideoStreamError(FluxonFsDecodeError):
    """The container holds no video stream."""


class FluxonFsNoAudioStreamError(FluxonFsDecodeError):
    """Audio was asked for and the container holds no audio stream."""


class FluxonFsAudioRangeError(FluxonFsError, IndexError):
    """Audio was asked for a span the stream has no samples for, with
    ``pad_audio=False``."""


class FluxonFsIOError(FluxonFsError, OSError):
    """Reading bytes from the source failed."""


class FluxonFsShortReadError(FluxonFsIOError):
    """The source returned fewer bytes than the range asked for."""


class FluxonFsTimeoutError(FluxonFsIOError, TimeoutError):
    """A byte range did not arrive in time."""


class FluxonFsNotFoundError(FluxonFsIOError, FileNotFoundError):
    """The export or the file does not exist, or is not a regular file."""


class FluxonFsPermissionError(FluxonFsIOError, PermissionError):
    """The request identity may not read this export or path."""


class FluxonFsAuthenticationError(FluxonFsPermissionError):
    """The bearer token is missing or no identity has it (the agent's 401; a
    refusal of a known identity is the parent class, a 403)."""


class FluxonFsFileChangedError(FluxonFsIOError):
    """The file's size or mtime changed since the reader opened it."""


class FluxonFsOverloadedError(FluxonFsIOError):
    """The storage cannot take the request now: out of file descriptors or
    memory, or its connection table is full (the agent's 503). Not an answer
    about the file: another replica may serve it, or the same one later
    (``retry_after_s``, the agent's Retry-After, when it gave one)."""

    retry_after_s: float | None = None


class FluxonFsBadRequestError(FluxonFsError, ValueError):
    """A request the agent refused as malformed (bad path, bad range)."""


class FluxonFsSourceTypeError(FluxonFsBadRequestError, TypeError):
    """A video source of a type no reader takes (not a path, bytes, a seekable
    binary file object or a range source): a TypeError, as other decoders raise."""


__all__ = [name for name in dir() if name.startswith("FluxonFs")]  # (located: internal)
