"""What an export's origin is: the interface every storage backend implements.

An origin holds the files of one export root and answers three calls:
``stat`` (the file's current version), ``read_range`` (bytes of the version
the caller names, refused if the file is at another one) and ``list_page``
(one page of a listing in a fixed order). Access checks and the relpath rule
are not its job: ExportStorage applies them before calling it, the same for
every backend, so an origin only ever sees a normalised relpath inside its root.

A version is whatever the origin can see change: (size, mtime, ctime, inode)
for a POSIX directory; an object store's would be its size, ETag and
last-modified, with reads that name the ETag (If-Match) so a newer object is
refused rather than mixed with the old one's bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from fluxon_video.fs.listing import FluxonFsFileEntry


@dataclass(frozen=True)
class FileStat:
    """A file version: what cache keys and version checks are built from.

    Any change the origin can see (for a POSIX root: size, mtime, ctime,
    inode) is a new version.
    """

    size: int
    mtime_ns: int
    ctime_ns: int = 0
    inode: int = 0

    @classmethod
    def of(cls, st: os.stat_result) -> FileStat:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)

    def describe_change(self, current: FileStat) -> str:
        changed = [f"{name} {getattr(self, name)} -> {getattr(current, name)}"
                   for name in ("size", "mtime_ns", "ctime_ns", "inode")
                   if getattr(self, name) != getattr(current, name)]
        return ", ".join(changed) or "no change"


class Origin(Protocol):
    """The files under one export root. ``name`` arguments are export:relpath,
    for error messages: an origin never names its own paths or URLs in them."""

    def stat(self, relpath: str, name: str) -> FileStat:
        """The file's current version; FluxonFsNotFoundError if it is no file."""
        ...

    def read_range(self, relpath: str, name: str, offset: int, length: int,
                   expected: FileStat) -> bytes:
        """Exactly ``length`` bytes at ``offset`` of version ``expected``;
        FluxonFsFileChangedError if the file is at another version."""
        ...

    def list_page(self, prefix: str, recursive: bool, pattern: str | None, cursor: str | None,
                  limit: int) -> tuple[list[FluxonFsFileEntry], str | None]:
        """(entries, next cursor or None): see fs/listing.py for the order."""
        ...
