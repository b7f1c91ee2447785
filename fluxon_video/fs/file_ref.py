"""The value objects every client service takes: which file, as whom, at which version."""

from __future__ import annotations

from dataclasses import dataclass, field

from fluxon_video.errors import FluxonFsPermissionError
from fluxon_video.fs.config import RequestIdentity
from fluxon_video.fs.origin import FileStat


@dataclass(frozen=True)
class FileRef:
    """This file of this export, as this identity (relpath normalised)."""

    export: str
    relpath: str
    identity: RequestIdentity

    @property
    def name(self) -> str:
        """export:relpath, as every message names a file."""
        return f"{self.export}:{self.relpath}"



@dataclass(frozen=True)
class VersionedFile(FileRef):
    """This version of this file, as this identity: what pieces, blobs and
    warming are read and written for.

    ``grant`` is set by the stat that authorised the identity for this
    version (FileMetadata): the services serve KV bytes only for a file that
    carries their client's grant, so a version learnt elsewhere opens nothing.
    """

    version: FileStat
    grant: object = field(default=None, compare=False, repr=False)

    @property
    def file(self) -> FileRef:
        return FileRef(self.export, self.relpath, self.identity)

    @property
    def size(self) -> int:
        return self.version.size

    def require(self, grant: object) -> None:
        """Refuse a version no stat of this client authorised (fs/file_metadata.py)."""
        if self.grant is not grant:
            raise FluxonFsPermissionError(
                f"{self.name}: this version was not opened by this client's authorised stat")
