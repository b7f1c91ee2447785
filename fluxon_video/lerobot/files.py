"""Where a LeRobot dataset's files are: a local directory, or a folder of a
FluxonFS export (read through the agent and the shared cache).

A dataset names its files by paths relative to its root (``meta/info.json``,
``data/chunk-000/file-000.parquet``, ``videos/<camera>/chunk-000/file-000.mp4``);
this is the one place that turns such a path into bytes or a video reader.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from fluxon_video.errors import FluxonFsConfigError, FluxonFsNotFoundError
from fluxon_video.fs.uris import is_uri
from fluxon_video.opening import open_video
from fluxon_video.reader import FluxonFsVideoReader
from fluxon_video.sources import RangeSource

if TYPE_CHECKING:
    from fluxon_video.patcher import FluxonFsPatcher


class DatasetFiles:
    """The files under one dataset root.

    Without ``patcher``, ``root`` is a local directory. With one, ``root`` is a
    FluxonFS folder: ``EXPORT:PREFIX``, a URI (``s3://bucket/datasets/pusht``)
    or an absolute path under an export's root (``patcher.resolve`` maps both).
    Pickles as configuration (a DataLoader worker builds its own client)."""

    def __init__(self, root: str | os.PathLike[str],
                 patcher: FluxonFsPatcher | None = None) -> None:
        text = os.fspath(root)
        self.patcher = patcher
        if patcher is None:
            path = Path(text).expanduser()
            if not path.is_dir():
                raise FluxonFsNotFoundError(f"{path}: no such dataset directory")
            self.local: Path | None = path
            self.export, self.prefix = "", ""
            return
        self.local = None
        if is_uri(text):
            self.export, prefix = patcher.resolve(text)
        else:
            export, colon, prefix = text.partition(":")
            if not colon or export not in patcher.config.exports:
                raise FluxonFsConfigError(
                    f"{text!r}: with a patcher, a dataset root is EXPORT:PREFIX, a URI or an "
                    f"absolute path under an export's root (exports: "
                    f"{', '.join(sorted(patcher.config.exports))})")
            self.export = export
        self.prefix = prefix.strip("/")

    def name(self, relpath: str) -> str:
        """How errors name a file of the dataset."""
        if self.local is not None:
            return str(self.local / relpath)
        return f"{self.export}:{self._remote(relpath)}"

    def _remote(self, relpath: str) -> str:
        return f"{self.prefix}/{relpath}" if self.prefix else relpath

    def read_bytes(self, relpath: str) -> bytes:
        """The whole file (metadata and tables: small next to the videos)."""
        if self.local is not None:
            try:
                return (self.local / relpath).read_bytes()
            except FileNotFoundError:
                raise FluxonFsNotFoundError(f"{self.name(relpath)}: no such file") from None
        assert self.patcher is not None
        remote = self._remote(relpath)
        size = self.patcher.file_version(self.export, remote).size
        return self.patcher.read_range(self.export, remote, 0, size) if size else b""

    def open_binary(self, relpath: str) -> BinaryIO:
        """The file for ranged reads (a parquet reader's: its footer, then the
        column chunks it needs), seekable; a FluxonFS file reads its version of
        now, and a read after it changed fails (FluxonFsFileChangedError)."""
        if self.local is not None:
            try:
                return open(self.local / relpath, "rb")
            except FileNotFoundError:
                raise FluxonFsNotFoundError(f"{self.name(relpath)}: no such file") from None
        assert self.patcher is not None
        source = self.patcher.open_range_source(self.export, self._remote(relpath))
        return io.BufferedReader(_RangeFile(source, self.name(relpath)), buffer_size=64 << 10)

    def version(self, relpath: str) -> str:
        """What names this version of the file: a node-local cache derived from
        it is keyed by it (a local file: its path, size, mtime and inode; a
        FluxonFS file: the export, its path, the version an authorised stat
        gives and the identity asking)."""
        if self.local is not None:
            path = (self.local / relpath).resolve()
            try:
                st = path.stat()
            except FileNotFoundError:
                raise FluxonFsNotFoundError(f"{self.name(relpath)}: no such file") from None
            return f"{path}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
        assert self.patcher is not None
        version = self.patcher.file_version(self.export, self._remote(relpath))
        return f"{self.name(relpath)}|{version!r}|{self.patcher.identity!r}"

    def list(self, folder: str, suffix: str) -> list[str]:
        """Relpaths (from the root) of the files under ``folder`` ending in
        ``suffix``, sorted."""
        if self.local is not None:
            base = self.local / folder
            return sorted(str(p.relative_to(self.local)) for p in base.rglob(f"*{suffix}")
                          if p.is_file())
        assert self.patcher is not None
        cut = len(self.prefix) + 1 if self.prefix else 0
        entries = self.patcher.list_files(self.export, self._remote(folder).rstrip("/") + "/",
                                          pattern=f"*{suffix}")
        return sorted(entry.relpath[cut:] for entry in entries)

    def open_reader(self, relpath: str, num_threads: int = 1) -> FluxonFsVideoReader:
        """A reader of a video at its native size (LeRobot decodes at native size)."""
        if self.local is not None:
            return open_video(self.local / relpath, num_threads=num_threads)
        assert self.patcher is not None
        return self.patcher.open_video_reader(self.export, self._remote(relpath),
                                              num_threads=num_threads)

    def __repr__(self) -> str:
        where = self.local if self.local is not None else f"{self.export}:{self.prefix}"
        return f"DatasetFiles({where})"


class _RangeFile(io.RawIOBase):
    """A range source (one held file version) as a seekable binary stream; each
    read checks first that the file is still that version."""

    def __init__(self, source: RangeSource, name: str) -> None:
        self._source, self._name, self._pos = source, name, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._source.size}[whence]
        if base + offset < 0:
            raise ValueError(f"{self._name}: seek before the start")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        length = max(0, min(len(buffer), self._source.size - self._pos))
        if length == 0:
            return 0
        self._source.check_current()  # the version rule, as a reader's reads
        data = self._source.read_range(self._pos, length)
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)
