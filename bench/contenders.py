"""Who is timed: the peers on local files, and fluxon_video through FluxonFS.

Each contender opens a *handle* on one video at one output size and reads
clips through it with ``read(indices) -> (frames, stats or None)``. A handle
is what a competent user keeps per video while reading several clips of it:

- decord: ``VideoReader(path, width, height)``, ``get_batch(indices)`` (decord
  seeks to the keyframe and resizes itself).
- PyAV: an open container plus a frame index -> pts table built once per
  file by a packet scan (timed separately as ``index_ms``); each clip seeks to
  the keyframe before its first frame and decodes forward, converting only
  the targets (what Daft's LeRobot reader does).
- torchcodec: ``VideoDecoder(path, dimension_order="NHWC", seek_mode="exact")``
  with a decoder-side ``Resize``, ``get_frames_at(indices)``.
- fluxon: a ``FluxonFsVideoReaderPool`` (readers open lazily on the first
  read), or ``decode_local_frames`` on the local file.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

PEERS = ("decord", "pyav", "torchcodec")


class Handle(Protocol):
    def read(self, indices: Sequence[int]) -> tuple[np.ndarray, dict[str, Any] | None]: ...

    def close(self) -> None: ...


class DecordHandle:
    def __init__(self, path: Path, height: int, width: int, native: bool, threads: int) -> None:
        import decord

        size = {} if native else {"width": width, "height": height}
        self.reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=threads, **size)

    def read(self, indices: Sequence[int]) -> tuple[np.ndarray, None]:
        return self.reader.get_batch(list(indices)).asnumpy(), None

    def close(self) -> None:
        del self.reader


def pyav_open(path: Path) -> Any:
    """av.open; for AVI, which stores no pts for I/P-frames, with the demuxer
    inferring them (+genpts), as a user matching frames by pts must."""
    import av

    options = {"fflags": "+genpts"} if path.suffix == ".avi" else {}
    return av.open(str(path), container_options=options)


class PyAVIndex:
    """Presentation-order pts of every frame and of every keyframe: one packet scan."""

    def __init__(self, path: Path) -> None:
        t0 = time.perf_counter()
        pts, keys = [], []
        with pyav_open(path) as container:
            stream = container.streams.video[0]
            for packet in container.demux(stream):
                if packet.pts is None:  # the demuxer's final empty packet
                    continue
                pts.append(packet.pts)
                if packet.is_keyframe:
                    keys.append(packet.pts)
        self.pts = sorted(pts)
        self.keyframes = sorted(keys)
        self.ms = (time.perf_counter() - t0) * 1e3

    def seek_target(self, index: int) -> int:
        """The pts of the last keyframe shown at or before frame ``index``."""
        k = bisect.bisect_right(self.keyframes, self.pts[index]) - 1
        return self.keyframes[max(k, 0)]


def pyav_decode_from(container: Any, stream: Any, seek_pts: int, want: dict[int, int],
                     height: int, width: int) -> dict[int, np.ndarray]:
    """Seek PyAV to the keyframe at or before seek_pts and decode forward until the
    last wanted pts: {frame index: RGB frame} for every pts in want (pts -> index)."""
    container.seek(seek_pts, backward=True, any_frame=False, stream=stream)
    last = max(want)
    got: dict[int, np.ndarray] = {}
    for frame in container.decode(stream):
        if frame.pts in want:
            got[want[frame.pts]] = frame.to_ndarray(format="rgb24", width=width, height=height,
                                                    interpolation="BILINEAR")
        if frame.pts is not None and frame.pts >= last:
            break
    return got


class PyAVHandle:
    _indexes: dict[Path, PyAVIndex] = {}

    @classmethod
    def prepare(cls, path: Path) -> float:
        """Scan the file once (not timed with the clips); returns the scan's ms."""
        if path not in cls._indexes:
            cls._indexes[path] = PyAVIndex(path)
        return cls._indexes[path].ms

    def __init__(self, path: Path, height: int, width: int, native: bool, threads: int) -> None:
        self.prepare(path)
        self.index = self._indexes[path]
        self.container = pyav_open(path)
        self.stream = self.container.streams.video[0]
        self.stream.thread_type = "AUTO"
        self.stream.codec_context.thread_count = threads
        self.height, self.width = height, width
        self.fallbacks = 0

    def _decode_from(self, seek_pts: int, want: dict[int, int]) -> dict[int, np.ndarray]:
        return pyav_decode_from(self.container, self.stream, seek_pts, want, self.height,
                                self.width)

    def read(self, indices: Sequence[int]) -> tuple[np.ndarray, dict[str, Any]]:
        want = {self.index.pts[i]: i for i in indices}
        got = self._decode_from(self.index.seek_target(min(indices)), want)
        if len(got) < len(want):
            # A seek that landed past a target: what a careful user does next.
            self.fallbacks += 1
            got = self._decode_from(self.index.keyframes[0], want)
        return np.stack([got[i] for i in indices]), {"pyav_fallbacks": self.fallbacks}

    def close(self) -> None:
        self.container.close()


class TorchcodecHandle:
    def __init__(self, path: Path, height: int, width: int, native: bool, threads: int) -> None:
        from torchcodec.decoders import VideoDecoder
        from torchcodec.transforms import Resize

        self.decoder = VideoDecoder(str(path), dimension_order="NHWC", num_ffmpeg_threads=threads,
                                    seek_mode="exact",
                                    transforms=None if native else [Resize((height, width))])

    def read(self, indices: Sequence[int]) -> tuple[np.ndarray, None]:
        return self.decoder.get_frames_at(list(indices)).data.numpy(), None

    def close(self) -> None:
        del self.decoder


class FluxonLocalHandle:
    """fluxon_video's decoder on the local file (no FluxonFS): the engine alone. As
    for PyAV, the file's index is built once, untimed, and one reader (one
    decoder) serves the clips of a pass."""

    _indexes: dict[Path, Any] = {}
    _index_ms: dict[Path, float] = {}

    @classmethod
    def prepare(cls, path: Path) -> float:
        """Scan the file once (not timed with the clips); returns the scan's ms."""
        import fluxon_video as fv

        if path not in cls._indexes:
            t0 = time.perf_counter()
            with fv.LocalVideoReader(path) as reader:
                cls._indexes[path] = reader.index
            cls._index_ms[path] = (time.perf_counter() - t0) * 1e3
        return cls._index_ms[path]

    def __init__(self, path: Path, height: int, width: int, native: bool, threads: int) -> None:
        import fluxon_video as fv

        self.prepare(path)
        self.height, self.width = height, width
        self.reader = fv.LocalVideoReader(path, threads, index=self._indexes[path])

    def read(self, indices: Sequence[int]) -> tuple[np.ndarray, dict[str, Any]]:
        frames, stats = self.reader.read_frames_numpy(indices, self.height, self.width)
        return frames, stats.as_dict()

    def close(self) -> None:
        self.reader.close()


class FluxonPoolHandle:
    """One video through a FluxonFsVideoReaderPool (the pool outlives the handle)."""

    def __init__(self, pool: Any, export: str, relpath: str, height: int, width: int,
                 threads: int) -> None:
        self.pool = pool
        self.args = {"export_name": export, "relpath": relpath, "height": height,
                     "width": width, "num_threads": threads}

    def read(self, indices: Sequence[int]) -> tuple[np.ndarray, dict[str, Any]]:
        result = self.pool.read_frames_numpy_with_stats(indices=indices, **self.args)
        return result.frames, result.stats.as_dict()

    def close(self) -> None:
        pass


LOCAL_HANDLES: dict[str, Callable[..., Handle]] = {
    "decord": DecordHandle,
    "pyav": PyAVHandle,
    "torchcodec": TorchcodecHandle,
    "fluxon-local": FluxonLocalHandle,
}


def unavailable(contender: str) -> str | None:
    """Why a contender cannot run here, or None when it imports."""
    module = {"decord": "decord", "pyav": "av", "torchcodec": "torchcodec.decoders",
              "fluxon-local": "fluxon_video._decode"}[contender]
    try:
        __import__(module)
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip, with a note"
        return f"{module} does not import: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    return None
