"""`read`: decode frames of one video to PNG or .npy files."""

from __future__ import annotations

import contextlib
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from fluxon_video.errors import FluxonFsIOError
from fluxon_video.patcher import FluxonFsPatcher


def write_png(path: Path, rgb: np.ndarray) -> None:
    """An 8-bit RGB PNG. Written directly (zlib + three chunks) so that one CLI
    call needs no image library."""
    height, width, _ = rgb.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, width * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                     + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b""))


@contextlib.contextmanager
def _writing(out: Path) -> Iterator[None]:
    """An OS error writing under ``out`` (a file in its place, no permission, a full
    disk) as one FluxonFsIOError naming it."""
    try:
        yield
    except OSError as exc:
        raise FluxonFsIOError(f"{out}: cannot write the frames there "
                              f"({exc.strerror or exc})") from exc


def read_frames(patcher: FluxonFsPatcher, export: str, relpath: str, frames: list[int],
                times: list[float], height: int | None, width: int | None, out: Path,
                fmt: str, autorotate: bool = False,
                on_damage: str = "error", stream_index: int | None = None,
                resize: str = "stretch",
                interpolation: str = "bilinear") -> list[dict[str, object]]:
    """Write the frames (and the frames displayed at ``times``) under ``out``; one row each."""
    with _writing(out):
        out.mkdir(parents=True, exist_ok=True)
    with patcher.open_video_reader(export, relpath, height, width, autorotate=autorotate,
                                   on_damage=on_damage, stream_index=stream_index,
                                   resize=resize, interpolation=interpolation) as reader:
        indices = list(frames) + reader.indices_at_times(times) if times else list(frames)
        decoded = reader.read_frames_numpy(indices)
        stamps = reader.timestamps_s()
        rows = []
        stem = Path(relpath).stem
        for k, index in enumerate(indices):
            resolved = index % len(reader)
            path = out / f"{stem}_{resolved:06d}.{fmt}"
            with _writing(out):
                if fmt == "png":
                    write_png(path, decoded[k])
                else:
                    np.save(path, decoded[k])
            rows.append({"frame": resolved, "time_s": round(float(stamps[resolved]), 6),
                         "height": reader.height, "width": reader.width, "file": str(path)})
        return rows
