"""Who is timed: the peers and fluxon_video, each behind a *handle* on one video (what a
competent user keeps per video while reading several clips of it; bench/README.md says
how each library is used)."""

from __future__ import annotations

import bisect
import io
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness import error_text

PEERS = ("decord", "pyav", "torchcodec", "spdl")
MODULES = {"decord": "decord", "pyav": "av", "torchcodec": "torchcodec.decoders",
           "spdl": "spdl.io", "fluxon-local": "fluxon_video._decode"}


def _source(source: Any) -> Any:
    """The libraries take a path as str, or a file object as it is."""
    return str(source) if isinstance(source, Path) else source


class Handle:
    """A reader kept for one video: ``read(indices)`` -> (N, H, W, 3) uint8; ``stats``: the
    reader's counts of the last read (None: it has none); ``close`` drops the reader."""

    stats: dict[str, Any] | None = None

    def close(self) -> None:
        self.__dict__.clear()


class DecordHandle(Handle):
    def __init__(self, source: Any, height: int | None, width: int | None,
                 threads: int) -> None:
        import decord

        size = {} if height is None else {"width": width, "height": height}
        self.reader = decord.VideoReader(_source(source), ctx=decord.cpu(0),
                                         num_threads=threads, **size)

    def read(self, indices: Sequence[int]) -> np.ndarray:
        return self.reader.get_batch(list(indices)).asnumpy()


class TorchcodecHandle(Handle):
    def __init__(self, source: Any, height: int | None, width: int | None, threads: int,
                 seek_mode: str = "exact") -> None:
        from torchcodec.decoders import VideoDecoder
        from torchcodec.transforms import Resize

        self.decoder = VideoDecoder(
            _source(source), dimension_order="NHWC", num_ffmpeg_threads=threads,
            seek_mode=seek_mode, transforms=None if height is None else [Resize((height, width))])

    def read(self, indices: Sequence[int]) -> np.ndarray:
        return self.decoder.get_frames_at(list(indices)).data.numpy()


def spdl_filter(height: int, width: int) -> str:
    """SPDL's filter: the ffmpeg CLI reference's (bench/frames.py), at native size too."""
    return f"scale={width}:{height}:flags=bilinear,format=rgb24"


def sorted_unique(indices: Sequence[int]) -> tuple[list[int], list[int]]:
    """The sorted, distinct indices SPDL wants, and where each of ``indices`` is among them."""
    wanted = sorted(set(indices))
    at = {index: k for k, index in enumerate(wanted)}
    return wanted, [at[i] for i in indices]


class SpdlHandle(Handle):
    """spdl.io: the video's packets demuxed once (the whole file: SPDL's model), then
    ``sample_decode_video`` per clip on ``packets.clone()`` (it consumes what it is given;
    timed with the read). AVI needs +genpts: without it a clip gets a neighbouring frame."""

    def __init__(self, source: Any, height: int, width: int, threads: int) -> None:
        import spdl.io

        self.spdl = spdl.io
        config = (spdl.io.demux_config(format_options={"fflags": "+genpts"})
                  if needs_genpts(source) else None)
        self.packets = spdl.io.demux_video(_source(source), demux_config=config)
        self.filter = spdl_filter(height, width)
        self.config = spdl.io.decode_config(decoder_options={"threads": str(threads)})

    def read(self, indices: Sequence[int]) -> np.ndarray:
        wanted, order = sorted_unique(indices)
        frames = self.spdl.sample_decode_video(self.packets.clone(), wanted,
                                               decode_config=self.config, filter_desc=self.filter)
        out = np.stack([self.spdl.to_numpy(self.spdl.convert_frames(f)) for f in frames])
        return out if order == list(range(len(wanted))) else out[order]


def needs_genpts(source: Any) -> bool:
    """AVI stores no pts for I/P-frames: PyAV and SPDL users have the demuxer infer them."""
    return isinstance(source, Path) and source.suffix == ".avi"


def pyav_open(source: Any) -> Any:
    import av

    if needs_genpts(source):
        return av.open(str(source), container_options={"fflags": "+genpts"})
    return av.open(_source(source))


def pyav_frames_at(container: Any, stream: Any, seconds: Sequence[float], height: int,
                   width: int, tol: float) -> list[np.ndarray]:
    """The frame on screen at each of the sorted ``seconds`` (the last whose time is at most
    ``tol`` past it), converted like the reference: one seek to the keyframe before the
    first and a forward decode."""
    container.seek(int(seconds[0] / stream.time_base), stream=stream, backward=True)
    out: list[np.ndarray] = []
    prev = None

    def rgb(frame: Any) -> np.ndarray:
        return frame.to_ndarray(width=width, height=height, format="rgb24",
                                interpolation="BILINEAR")
    for frame in container.decode(stream):
        while len(out) < len(seconds) and frame.time > seconds[len(out)] + tol:
            if prev is None:
                raise RuntimeError(f"the seek landed after {seconds[len(out)]:.3f} s")
            out.append(rgb(prev))
        if len(out) == len(seconds):
            break
        prev = frame
    while len(out) < len(seconds) and prev is not None:  # the end of the stream
        out.append(rgb(prev))
    return out


class KeyframeIndex:
    """Presentation-order pts of every frame and of every keyframe."""

    _scanned: dict[Path, KeyframeIndex] = {}

    def __init__(self, pts: list[int], keyframes: list[int], ms: float = 0.0) -> None:
        self.pts, self.keyframes, self.ms = pts, keyframes, ms

    @classmethod
    def scan(cls, path: Path) -> KeyframeIndex:
        """One packet scan of the file, once per process (its time is kept in ``ms``)."""
        if path not in cls._scanned:
            t0 = time.perf_counter()
            with pyav_open(path) as container:  # not the demuxer's final empty packet
                seen = [(p.pts, p.is_keyframe) for p in container.demux(
                    container.streams.video[0]) if p.pts is not None]
            cls._scanned[path] = cls(sorted(t for t, _ in seen),
                                     sorted(t for t, key in seen if key),
                                     (time.perf_counter() - t0) * 1e3)
        return cls._scanned[path]

    def keyframe_before(self, index: int) -> int:
        """The pts of the last keyframe shown at or before frame ``index``."""
        k = bisect.bisect_right(self.keyframes, self.pts[index]) - 1
        return self.keyframes[max(k, 0)]


class PyAVHandle(Handle):
    """Seek to the keyframe before a clip and decode forward; a seek that lands past a
    target (open-GOP leading pictures) is redone from the first keyframe, as a careful
    user does (``fallbacks`` counts them)."""

    def __init__(self, source: Any, index: KeyframeIndex, height: int, width: int,
                 threads: int) -> None:
        self.container = pyav_open(source)
        self.stream = self.container.streams.video[0]
        self.stream.thread_type = "AUTO"
        self.stream.codec_context.thread_count = threads
        self.index, self.height, self.width = index, height, width
        self.fallbacks = 0

    @property
    def stats(self) -> dict[str, Any]:
        return {"pyav_fallbacks": self.fallbacks}

    def _decode(self, indices: Sequence[int]) -> dict[int, np.ndarray]:
        """{frame index: RGB frame} for ``indices``, from the keyframe before the first."""
        want = {self.index.pts[i]: i for i in indices}
        got = self._decode_from(self.index.keyframe_before(min(indices)), want)
        if len(got) < len(want):
            self.fallbacks += 1
            got = self._decode_from(self.index.keyframes[0], want)
        return got

    def _decode_from(self, seek_pts: int, want: dict[int, int]) -> dict[int, np.ndarray]:
        self.container.seek(seek_pts, backward=True, any_frame=False, stream=self.stream)
        got: dict[int, np.ndarray] = {}
        last = max(want)
        for frame in self.container.decode(self.stream):
            if frame.pts in want:
                got[want[frame.pts]] = frame.to_ndarray(format="rgb24", width=self.width,
                                                        height=self.height,
                                                        interpolation="BILINEAR")
            if frame.pts is not None and frame.pts >= last:
                break
        return got

    def read(self, indices: Sequence[int]) -> np.ndarray:
        got = self._decode(indices)
        return np.stack([got[i] for i in indices])

    def read_union(self, clips: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Every clip's frames from one forward pass per cluster of the sorted union (a new
        seek only where the next target's keyframe lies beyond the cluster's last target)."""
        clusters: list[list[int]] = []
        for i in sorted({i for clip in clips for i in clip}):
            if clusters and self.index.keyframe_before(i) <= self.index.pts[clusters[-1][-1]]:
                clusters[-1].append(i)
            else:
                clusters.append([i])
        got = {k: v for cluster in clusters for k, v in self._decode(cluster).items()}
        return [np.stack([got[i] for i in clip]) for clip in clips]

    def close(self) -> None:
        self.container.close()


class FluxonLocalHandle(Handle):
    """fluxon_video's decoder on the local file (no FluxonFS): the engine alone. As for
    PyAV, the file's index is built once, untimed; one reader serves a pass's clips."""

    _indexes: dict[Path, tuple[Any, float]] = {}

    @classmethod
    def prepare(cls, path: Path) -> float:
        """Scan the file once (not timed with the clips); returns the scan's ms."""
        import fluxon_video as fv

        if path not in cls._indexes:
            t0 = time.perf_counter()
            with fv.LocalVideoReader(path) as reader:
                cls._indexes[path] = (reader.index, (time.perf_counter() - t0) * 1e3)
        return cls._indexes[path][1]

    def __init__(self, path: Path, height: int, width: int, threads: int) -> None:
        import fluxon_video as fv

        self.prepare(path)
        self.height, self.width = height, width
        self.reader = fv.LocalVideoReader(path, threads, index=self._indexes[path][0])

    def read(self, indices: Sequence[int]) -> np.ndarray:
        frames, stats = self.reader.read_frames_numpy(indices, self.height, self.width)
        self.stats = stats.as_dict()
        return frames

    def close(self) -> None:
        self.reader.close()


class FluxonVideoHandle(Handle):
    """fluxon_video's ``open_video`` on a local file, as its users write it (the index is
    scanned at the open). threads 0: fluxon's num_threads="auto" (its 0 is refused; FFmpeg's
    0 is the same choice, a thread per core)."""

    def __init__(self, path: Path, height: int, width: int, threads: int) -> None:
        import fluxon_video as fv

        self.reader = fv.open_video(path, height, width, num_threads=threads or "auto")

    def read(self, indices: Sequence[int]) -> np.ndarray:
        return self.reader.read_frames_numpy(indices)

    def close(self) -> None:
        self.reader.close()


class FluxonPoolHandle(Handle):
    """One video through a FluxonFsVideoReaderPool (the pool outlives the handle)."""

    def __init__(self, pool: Any, export: str, relpath: str, height: int, width: int,
                 threads: int) -> None:
        self.pool = pool
        self.args = {"export_name": export, "relpath": relpath, "height": height,
                     "width": width, "num_threads": threads}

    def read(self, indices: Sequence[int]) -> np.ndarray:
        result = self.pool.read_frames_numpy_with_stats(indices=indices, **self.args)
        self.stats = result.stats.as_dict()
        return result.frames

    def close(self) -> None:
        pass


def open_handle(family: str, source: Any, height: int, width: int, threads: int, *,
                native: bool = False, seek_mode: str = "exact",
                index: KeyframeIndex | None = None) -> Handle:
    """A handle of ``family`` (PEERS, "fluxon-local": the decoder with the index built
    apart, "fluxon": open_video, "floor": FloorHandle) on a local path or a file object; native: decord and
    torchcodec are not asked to resize (SPDL is given the reference's filter at the
    native size). PyAV takes the frame -> pts table ``index`` (else a packet scan)."""
    if family == "pyav":
        return PyAVHandle(source, index or KeyframeIndex.scan(source), height, width, threads)
    if family == "fluxon-local":
        return FluxonLocalHandle(source, height, width, threads)
    if family == "fluxon":
        return FluxonVideoHandle(source, height, width, threads)
    if family == "floor":
        return FloorHandle(source, threads)
    if family == "spdl":
        return SpdlHandle(source, height, width, threads)
    size = (None, None) if native else (height, width)
    if family == "torchcodec":
        return TorchcodecHandle(source, *size, threads, seek_mode)
    return DecordHandle(source, *size, threads)


def index_ms(contender: str, path: Path) -> float | None:
    """The one-time scan a contender makes of a file before its clips, ms (None: none)."""
    if contender == "pyav":
        return KeyframeIndex.scan(path).ms
    return FluxonLocalHandle.prepare(path) if contender == "fluxon-local" else None


def unavailable(contender: str) -> str | None:
    """Why a contender cannot run here, or None when it imports."""
    try:
        __import__(MODULES[contender])
    except Exception as exc:  # noqa: BLE001 - any import failure means "skip, with a note"
        return f"{MODULES[contender]} does not import: {error_text(exc, 120)}"
    return None


class FloorHandle(Handle):
    """The "decode floor" as a contender: the file scanned once, then per clip libavcodec
    alone from the keyframe before its first frame to its last, nothing converted (no
    reader is faster with the same threads). ``read`` returns the floor's record
    (decode_ms, frames_decoded, decoder_seeks), not frames."""

    def __init__(self, path: Path, threads: int) -> None:
        from fluxon_video import _avio
        from fluxon_video._demux import scan_packets
        from fluxon_video.sources import LocalFileRangeSource

        self.threads, self.file = threads, LocalFileRangeSource(path)
        try:
            self.source = _avio.ByteSource(self.file, self.file.size, name=self.file.name)
        except BaseException:
            self.file.close()
            raise
        try:
            self.index = scan_packets(self.source, self.file.name)
        except BaseException:
            self.close()
            raise

    def read(self, indices: Sequence[int]) -> dict[str, Any]:
        from fluxon_video import _floor

        return _floor.decode_floor(self.source, list(indices), self.threads, self.file.name,
                                   self.index)

    def close(self) -> None:
        self.source.close()
        self.file.close()


def decode_floor_ms(path: Path, indices: Sequence[int], num_threads: int) -> float:
    """The decode floor of one clip, ms (a fresh scan and decoder: FloorHandle)."""
    handle = FloorHandle(path, num_threads)
    try:
        return float(handle.read(indices)["decode_ms"])
    finally:
        handle.close()


def peer_versions(family: str, av_libs: tuple[str, ...] = ("libavcodec", "libswscale")
                  ) -> dict[str, str]:
    """A peer library's version (PyAV: and the ``av_libs`` it was built with)."""
    if family == "decord":
        import decord

        return {"decord": decord.__version__}
    if family == "spdl":
        from importlib.metadata import version

        return {"spdl-io": version("spdl-io")}
    if family == "torchcodec":
        import torch
        import torchcodec

        return {"torchcodec": torchcodec.__version__, "torch": torch.__version__}
    import av

    return {"av": av.__version__, **{f"av's {lib}": ".".join(map(str, v))
                                     for lib, v in av.library_versions.items() if lib in av_libs}}


# ---- remote byte sources ----

# Given a download as bytes (what their users pass); the others get io.BytesIO.
BYTES_FAMILIES = ("torchcodec", "spdl")


class PeerSource:
    """A row's remote access: an fsspec HTTP file object or one GET into memory (the HTTP
    Range server); with ``s3``: an s3fs file object, an obstore reader (ObstoreFile) or
    one GET through s3fs."""

    def __init__(self, row: dict, s3: dict | None = None) -> None:
        self.row, self.s3 = row, s3
        self.block = {"block_size": row["block_size"]} if row.get("block_size") else {}
        if s3 is None:
            import fsspec

            self.fs = fsspec.filesystem("http", **self.block)  # the instance fsspec.open reuses
        elif row["mode"] == "obstore":
            from obstore.store import S3Store

            self.store = S3Store(s3["bucket"], endpoint=s3["endpoint"], region=s3["region"],
                                 access_key_id=s3["key"], secret_access_key=s3["secret"],
                                 client_options={"allow_http": True})
        else:
            import s3fs

            self.fs = s3fs.S3FileSystem(key=s3["key"], secret=s3["secret"],
                                        endpoint_url=s3["endpoint"],
                                        client_kwargs={"region_name": s3["region"]})

    def where(self, video: dict) -> str:
        if self.s3 is None:
            return video["url"]
        key = f"{self.s3['prefix']}/{video['relpath']}"
        return key if self.row["mode"] == "obstore" else f"{self.s3['bucket']}/{key}"

    def read(self, video: dict, use: Any) -> Any:
        """``use(file)`` on the video's file (HEAD for the size, then ranged GETs; or
        "download": one GET of the whole file), closed afterwards."""
        import fsspec

        where, mode = self.where(video), self.row["mode"]
        if mode == "download":
            data = self.fs.cat_file(where)
            return use(data if self.row["family"] in BYTES_FAMILIES else io.BytesIO(data))
        if mode == "obstore":
            import obstore

            f: Any = ObstoreFile(obstore.open_reader(self.store, where,
                                                     buffer_size=self.row["block_size"]))
        elif mode == "s3fs":
            f = self.fs.open(where, "rb", **self.block)
        else:
            f = fsspec.open(where, "rb", **self.block).open()
        try:
            return use(f)
        finally:
            f.close()


class ObstoreFile:
    """obstore.open_reader's file as PyAV and torchcodec take it: read() copies obstore.Bytes
    (which both refuse) into bytes; seek, tell and the buffering are obstore's own."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.seek, self.tell, self.close = reader.seek, reader.tell, reader.close

    def read(self, size: int = -1) -> bytes:
        return bytes(self.reader.read(size) if size is not None and size >= 0
                     else self.reader.read())

    def seekable(self) -> bool:
        return True


def peer_metadata(row: dict, f: Any) -> tuple[int, float, float]:
    """Frame count, fps and duration, opening the file with the row's peer."""
    if row["family"] == "pyav":
        import av

        with av.open(f) as container:
            stream = container.streams.video[0]
            frames = stream.frames or sum(1 for p in container.demux(stream)  # Matroska: none
                                          if p.pts is not None)
            duration = (float(stream.duration * stream.time_base) if stream.duration
                        else container.duration / 1e6)
            return frames, float(stream.average_rate), duration
    if row["family"] == "torchcodec":
        from torchcodec.decoders import VideoDecoder

        meta = VideoDecoder(f, seek_mode=row.get("seek_mode", "approximate")).metadata
        return int(meta.num_frames), float(meta.average_fps), float(meta.duration_seconds)
    import decord

    reader = decord.VideoReader(f, ctx=decord.cpu(0))
    frames, fps = len(reader), float(reader.get_avg_fps())
    return frames, fps, frames / fps
