"""One file version, read for one identity: what a reader's ByteSource fetches from."""

from __future__ import annotations

from fluxon_video.fs.client import FluxonFsClient
from fluxon_video.fs.counters import ReadCounters
from fluxon_video.fs.file_ref import VersionedFile


class FluxonFsRangeSource:
    """Range reads, blobs and the version check of one opened file version."""

    def __init__(self, client: FluxonFsClient, file: VersionedFile,
                 counters: ReadCounters | None = None) -> None:
        self.client = client
        self.file = file
        self.size = file.size
        self.name = file.name
        self.counters = counters if counters is not None else ReadCounters()

    def check_current(self) -> None:
        """FluxonFsFileChangedError if the file is no longer at this version."""
        self.client.files.check_current(self.file)

    def read_range(self, offset: int, length: int) -> bytes:
        return self.client.pieces.read_range(self.file, offset, length, self.counters)

    def read_extent(self, offset: int, length: int) -> bytes:
        """Like read_range, for bytes kept apart from the pages (ByteSource.fetch_extent):
        pieces it holds only part of are not staged."""
        return self.client.pieces.read_range(self.file, offset, length, self.counters,
                                             stage_partial=False)

    def load_blob(self, kind: str) -> bytes | None:
        """The blob of this kind stored for this version now, if any."""
        return self.client.blobs.load(self.file, kind, self.counters)

    def store_blob(self, kind: str, data: bytes) -> None:
        self.client.blobs.store(self.file, kind, data)

    def __repr__(self) -> str:
        return f"FluxonFsRangeSource({self.name!r}, size={self.size})"
