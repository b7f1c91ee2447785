"""How a file version is cut into pieces, and the KV key of each."""

from __future__ import annotations

from fluxon_video.fs.config import FluxonFsExport
from fluxon_video.fs.file_ref import VersionedFile
from fluxon_video.fs.kv import piece_key


def piece_count(file: VersionedFile, piece_size: int) -> int:
    return -(-file.size // piece_size)


def piece_len(file: VersionedFile, piece_size: int, index: int) -> int:
    """Bytes in piece ``index`` (the last one may be short)."""
    return min(piece_size, file.size - index * piece_size)


def key_of(export: FluxonFsExport, file: VersionedFile, index: int) -> str:
    return piece_key(export.cache_kv_key_prefix, export.name, file.relpath, file.version,
                     export.piece_size, index)
