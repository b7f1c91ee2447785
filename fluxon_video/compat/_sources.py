"""What the drop-ins take as a source, and the FluxonFS they read locations through.

A source is opened as one :class:`~fluxon_video.FluxonFsVideoReader`:

- bytes (bytearray, memoryview; a torch uint8 tensor's bytes), a seekable
  binary file object: ``fluxon_video.open_video``;
- a string or path naming a FluxonFS location, when a FluxonFS is
  configured (:func:`use`, else ``$FLUXON_VIDEO_CONFIG``): a URI
  (``s3://bucket/key``, ``gs://``, ``https://``, ``file://``), an absolute
  path under an export's root, or ``EXPORT:RELPATH`` of a configured export:
  ``FluxonFsPatcher.open_video_reader``, through the agent and the KV;
- any other string or path: a local file (``file://`` URIs included when no
  FluxonFS is configured).
"""

from __future__ import annotations

import io
import os
import re
import threading
import urllib.parse
from typing import Any, Self

from fluxon_video.errors import (
    FluxonFsBadRequestError,
    FluxonFsConfigError,
    FluxonFsSourceTypeError,
)
from fluxon_video.fs.config import load_config
from fluxon_video.opening import open_video
from fluxon_video.options import ReadOptions
from fluxon_video.patcher import FluxonFsPatcher
from fluxon_video.reader import FluxonFsVideoReader
from fluxon_video.validation import Threads

# The CLI's variables (fluxon_video/cli.py): one configuration for both.
CONFIG_ENV = "FLUXON_VIDEO_CONFIG"
IDENTITY_ENV = "FLUXON_VIDEO_IDENTITY"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class _Configured:
    """The FluxonFS the drop-ins read through: set by use(), else built once
    from $FLUXON_VIDEO_CONFIG on first need (None: no FluxonFS)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.patcher: FluxonFsPatcher | None = None
        self.owned = False        # built here from a config file: ours to close
        self.explicit = False     # set by use(): the environment is not consulted
        self.route_paths = True

    def set(self, patcher: FluxonFsPatcher | None, owned: bool, explicit: bool,
            route_paths: bool = True) -> None:
        with self.lock:
            old, old_owned = self.patcher, self.owned
            self.patcher, self.owned, self.explicit = patcher, owned, explicit
            self.route_paths = route_paths
        if old_owned and old is not None and old is not patcher:
            old.close()

    def get(self) -> FluxonFsPatcher | None:
        with self.lock:
            if self.patcher is None and not self.explicit and os.environ.get(CONFIG_ENV):
                self.patcher, self.owned = _from_config(os.environ[CONFIG_ENV], None), True
            return self.patcher


_CONFIGURED = _Configured()


def _from_config(path: str | os.PathLike[str], identity: str | None) -> FluxonFsPatcher:
    """A patcher of a config file, acting as ``identity``, else $FLUXON_VIDEO_IDENTITY,
    else the config's only identity (the CLI's rule)."""
    config = load_config(path)
    name = identity or os.environ.get(IDENTITY_ENV)
    if name is None and len(config.identities) == 1:
        name = next(iter(config.identities))
    if name is None:
        raise FluxonFsConfigError(
            f"{path}: name the identity to read as (use(config, identity=...) or "
            f"${IDENTITY_ENV}); the config defines "
            f"{', '.join(sorted(config.identities)) or 'no identities'}")
    return FluxonFsPatcher(config, identity=name)


def use(target: FluxonFsPatcher | str | os.PathLike[str] | None = None, *,
        identity: str | None = None, route_paths: bool = True) -> FluxonFsPatcher | None:
    """Point the drop-ins at FluxonFS, for this process (and the workers it forks).

    ``target``: a :class:`FluxonFsPatcher` (yours: never closed here), or the
    path of a config file (the patcher built from it acts as ``identity``,
    else ``$FLUXON_VIDEO_IDENTITY``, else the config's only identity).
    ``None`` forgets what was set: the drop-ins go back to
    ``$FLUXON_VIDEO_CONFIG`` (if set) on their next FluxonFS location.
    ``route_paths=False``: absolute paths are always local files, even under an
    export's root (URIs and ``EXPORT:RELPATH`` still go through FluxonFS).
    Returns the patcher now in use."""
    if target is None:
        _CONFIGURED.set(None, False, False)
    elif isinstance(target, FluxonFsPatcher):
        _CONFIGURED.set(target, False, True, route_paths)
    elif isinstance(target, (str, os.PathLike)):
        _CONFIGURED.set(_from_config(target, identity), True, True, route_paths)
    else:
        raise FluxonFsSourceTypeError(
            f"use() takes a FluxonFsPatcher, a config file's path or None, "
            f"got {type(target).__name__}")
    return _CONFIGURED.patcher


def configured_patcher() -> FluxonFsPatcher | None:
    """The patcher FluxonFS locations are read through (None: none is configured)."""
    return _CONFIGURED.get()


def _fluxonfs_target(text: str, patcher: FluxonFsPatcher | None) -> tuple[str | None, str] | None:
    """(export or None, relpath or URI) when ``text`` names a FluxonFS file;
    None when it is a local path."""
    if _SCHEME.match(text):
        if patcher is not None:
            return None, text
        if text.lower().startswith("file://"):
            return None  # a local file's URI, and no export to map it to
        raise FluxonFsConfigError(
            f"{text} is a URI, and no FluxonFS is configured to read it through: call "
            f"fluxon_video.compat.use(patcher or config path) or set ${CONFIG_ENV}")
    if patcher is None:
        return None
    if text.startswith("/"):
        if not _CONFIGURED.route_paths:
            return None
        try:
            return patcher.resolve(text)
        except FluxonFsBadRequestError:
            if os.path.lexists(text):
                return None  # under no export's root (or several): the local file
            raise
    export, colon, relpath = text.partition(":")
    if colon and export in patcher.config.exports and not os.path.lexists(text):
        return export, relpath
    return None


def _as_local(text: str) -> str:
    """A ``file://`` URI's path; anything else as it is."""
    if text.lower().startswith("file://"):
        return urllib.parse.unquote(urllib.parse.urlsplit(text).path)
    return text


def _tensor_bytes(source: Any) -> bytes | None:
    """A torch tensor's bytes (torchcodec takes encoded data as a uint8 tensor)."""
    if type(source).__module__.split(".")[0] != "torch" or not hasattr(source, "numpy"):
        return None
    return source.detach().cpu().contiguous().numpy().tobytes()


def open_reader(source: Any, *, height: int | None = None, width: int | None = None,
                num_threads: Threads = 1, stream_index: int | None = None,
                autorotate: bool = True) -> FluxonFsVideoReader:
    """A reader of ``source`` (see the module's rules), at ``height`` x ``width``
    (None: native), turned upright as the ffmpeg CLI turns it (``autorotate``)."""
    data = _tensor_bytes(source)
    if data is not None:
        source = data
    if isinstance(source, io.TextIOBase):
        raise FluxonFsSourceTypeError(
            "the file object reads text (open(..., 'r')?); open it with 'rb'")
    options = ReadOptions(height, width, num_threads, stream_index=stream_index,
                          autorotate=autorotate)
    if isinstance(source, (str, os.PathLike)) and not isinstance(source, bytes):
        text = os.fspath(source)
        if isinstance(text, str):
            patcher = configured_patcher() if (_SCHEME.match(text) or text.startswith("/")
                                               or ":" in text) else None
            target = _fluxonfs_target(text, patcher)
            if target is not None:
                assert patcher is not None
                return patcher.open_video_reader(target[0], target[1], options=options)
            source = _as_local(text)
    return open_video(source, options=options)


class OwnsReader:
    """The life cycle of a drop-in that owns one reader (``self._reader``, None
    until opened): ``close`` (idempotent), a context manager, and a close when
    collected, as the decoders they replace release theirs."""

    _reader: Any = None

    def close(self) -> None:
        """Release the reader (its decoder, page cache and fetch workers)."""
        if self._reader is not None:
            self._reader.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - collected at interpreter exit
            pass
