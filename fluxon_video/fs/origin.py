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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from fluxon_video.fs.listing import FluxonFsFileEntry


@dataclass(frozen=True)
class FileStat:
    """A file version: what cache keys and version checks are built from.

    Any change the origin can see is a new version: for a POSIX root its size,
    mtime, ctime and inode; for an object store its size, last-modified (as
    ``mtime_ns``) and ETag (with the version id on a versioned bucket).
    """

    size: int
    mtime_ns: int
    ctime_ns: int = 0
    inode: int = 0
    etag: str = ""  # an object's ETag (and version id); empty for a file

    INTS: ClassVar[tuple[str, ...]] = ("size", "mtime_ns", "ctime_ns", "inode")

    @classmethod
    def of(cls, st: os.stat_result) -> FileStat:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)

    def as_fields(self) -> dict[str, int | str]:
        """The version as the agent protocol and the KV's stat entries carry it."""
        fields: dict[str, int | str] = {name: getattr(self, name) for name in self.INTS}
        if self.etag:
            fields["etag"] = self.etag
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> FileStat:
        """The inverse of as_fields (ValueError, KeyError or TypeError if malformed)."""
        etag = fields.get("etag", "")
        if not isinstance(etag, str):
            raise TypeError(f"etag must be a string, got {etag!r}")
        return cls(*(int(fields[name]) for name in cls.INTS), etag=etag)

    def key(self) -> str:
        """Every part of the version, for KV keys: a rewrite that restores size and
        mtime still has another ctime, inode or ETag, so it never shares a key."""
        base = f"{self.size}:{self.mtime_ns}:{self.ctime_ns}:{self.inode}"
        return f"{base}:e{len(self.etag.encode())}:{self.etag}" if self.etag else base

    def describe_change(self, current: FileStat) -> str:
        changed = [f"{name} {getattr(self, name)} -> {getattr(current, name)}"
                   for name in (*self.INTS, "etag")
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

    def stat_head(self, relpath: str, name: str, length: int) -> tuple[FileStat, bytes]:
        """The current version and its first ``length`` bytes (the whole file when
        shorter): what a cold open reads first, in one request to the agent."""
        ...

    def list_page(self, prefix: str, recursive: bool, pattern: str | None, cursor: str | None,
                  limit: int) -> tuple[list[FluxonFsFileEntry], str | None]:
        """(entries, next cursor or None): see fs/listing.py for the order."""
        ...
