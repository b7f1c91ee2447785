"""What the processes of bench/remote.py do: peer workers and fluxon passes.

A *pass* reads a list of items through one *row* (one pipeline: a peer with
its remote access method, or fluxon in one cache state) and returns every
item's time, the frame check and what the store's servers counted during the
pass (requests, body bytes, connections that carried requests).

- Peer workers live for the whole run, one process per library (PyAV,
  torchcodec, decord, SPDL), like DataLoader workers with persistent_workers=True:
  the fsspec filesystem (its aiohttp session and keep-alive connections) and
  the loaded codecs stay, but every item opens its file and its decoder anew.
- Every fluxon pass is a new process: "cold" after the parent flushed Redis,
  "warm-kv" with Redis as the cold pass left it. A cold clip pass then reads
  the same items again through the same pool ("warm-reader").

Timed: from the item's open (fsspec.open / GET / the pool call) to its frames
as a numpy array, closing included. Not timed: frame checks, counters, the
processes' start-up and library initialisation (one untimed local decode).
"""

from __future__ import annotations

import io
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contenders import (DecordHandle, FluxonLocalHandle, KeyframeIndex, PyAVHandle,
                        SpdlHandle, TorchcodecHandle)
from fluxon_access import make_patcher, settle
from frames import CheckResult, Reference
from machine import fluxon_versions, peer_versions
from passes import Pass, error_text
from store_counters import Counters

SIZE = 224
_REFS: dict[str, Reference] = {}


def reference(path: str) -> Reference:
    """The reference frames of a video, loaded once per process."""
    if path not in _REFS:
        _REFS[path] = Reference.load(Path(path))
    return _REFS[path]


# ---- peers ----

def open_peer(row: dict, source: Any, video: dict, threads: int) -> Any:
    """The row's library on one video. PyAV gets the frame -> pts table the parent took
    from ffprobe, untimed: the generous reading of "PyAV users keep their timestamps in
    the dataset manifest"."""
    family = row["family"]
    if family == "pyav":
        return PyAVHandle(source, KeyframeIndex(video["pts"], video["keys"]), SIZE, SIZE,
                          threads)
    if family == "torchcodec":
        return TorchcodecHandle(source, SIZE, SIZE, threads, row.get("seek_mode", "exact"))
    if family == "spdl":
        return SpdlHandle(source, SIZE, SIZE, threads)
    return DecordHandle(source, SIZE, SIZE, threads)


# Given a download as bytes (what their users pass); the others get io.BytesIO.
BYTES_FAMILIES = ("torchcodec", "spdl")


class PeerSource:
    """The row's remote access: an fsspec HTTP file object or one GET into memory (the
    HTTP Range server); with ``s3`` (bench/remote.py --store s3): an s3fs file object,
    an obstore reader (ObstoreFile) or one GET through s3fs."""

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

    def open(self, video: dict) -> tuple[Any, Callable[[], None]]:
        import fsspec

        where, mode = self.where(video), self.row["mode"]
        if mode == "download":
            data = self.fs.cat_file(where)  # one GET of the whole file
            bytes_ok = self.row["family"] in BYTES_FAMILIES
            return (data if bytes_ok else io.BytesIO(data)), lambda: None
        if mode == "obstore":
            import obstore

            f = ObstoreFile(obstore.open_reader(self.store, where,
                                                buffer_size=self.row["block_size"]))
            return f, f.close
        if mode == "s3fs":
            f = self.fs.open(where, "rb", **self.block)  # HEAD (size), then ranged GETs
            return f, f.close
        f = fsspec.open(where, "rb", **self.block).open()  # HEAD (size), then ranged GETs
        return f, f.close

    def read(self, video: dict, use: Callable[[Any], Any]) -> Any:
        """``use(file)`` on the video's file, closed afterwards."""
        f, close = self.open(video)
        try:
            return use(f)
        finally:
            close()


class ObstoreFile:
    """obstore.open_reader's file, as PyAV and torchcodec take it: its read() returns
    obstore.Bytes, which both refuse (they want bytes), so read() copies into bytes;
    seek, tell and the reader's buffering (buffer_size, one ranged GET per refill) are
    obstore's own."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def read(self, size: int = -1) -> bytes:
        return bytes(self.reader.read(size) if size is not None and size >= 0
                     else self.reader.read())

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.reader.seek(offset, whence)

    def tell(self) -> int:
        return self.reader.tell()

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        self.reader.close()


def peer_clips(row: dict, f: Any, video: dict, clips: Sequence[Sequence[int]],
               threads: int) -> tuple[list[np.ndarray], int]:
    """One item's clips one by one (or, for the union row, in one pass per cluster)."""
    handle = open_peer(row, f, video, threads)
    outs = handle.read_union(clips) if row.get("union") else [handle.read(c) for c in clips]
    handle.close()
    return outs, getattr(handle, "fallbacks", 0)


def peer_pass(task: dict) -> dict:
    row, videos, threads = task["row"], task["videos"], task["threads"]
    source = PeerSource(row, task.get("s3"))
    counters = Counters(task["store"], "peer")
    if task["workload"] == "metadata":
        return peer_metadata_pass(task, source, counters)
    one = Pass(row, CheckResult(exact_required=False), extra={"fallbacks": 0})
    before = counters.start()
    for item in task["items"]:
        video = videos[item["video"]]
        got = one.time(item["video"], lambda: source.read(
            video, lambda f: peer_clips(row, f, video, item["clips"], threads)))
        if got is not None:
            outs, fallbacks = got
            one.extra["fallbacks"] += fallbacks
            one.check_item(item["video"], item["clips"], outs, reference(video["ref"]))
    return one.result(counters.since(before))


def peer_metadata_pass(task: dict, source: PeerSource, counters: Counters) -> dict:
    """Time until frame count, fps and duration are known, opening the file with the peer."""
    row, videos = task["row"], task["videos"]
    one = Pass(row, None)
    before = counters.start()
    for item in task["items"]:
        video = videos[item["video"]]
        got = one.time(item["video"], lambda: source.read(video, lambda f: peer_metadata(row, f)))
        if got is not None:
            one.check_metadata(video, *got)
    return one.result(counters.since(before))


def peer_metadata(row: dict, f: Any) -> tuple[int, float, float]:
    family = row["family"]
    if family == "pyav":
        import av

        with av.open(f) as container:
            stream = container.streams.video[0]
            frames = stream.frames
            if not frames:  # no count in the header (Matroska): demux every packet
                frames = sum(1 for p in container.demux(stream) if p.pts is not None)
            fps = float(stream.average_rate)
            duration = (float(stream.duration * stream.time_base) if stream.duration
                        else container.duration / 1e6)
            return frames, fps, duration
    if family == "torchcodec":
        from torchcodec.decoders import VideoDecoder

        meta = VideoDecoder(f, seek_mode=row.get("seek_mode", "approximate")).metadata
        return int(meta.num_frames), float(meta.average_fps), float(meta.duration_seconds)
    import decord

    reader = decord.VideoReader(f, ctx=decord.cpu(0))
    frames, fps = len(reader), float(reader.get_avg_fps())
    return frames, fps, frames / fps


def _versions(family: str) -> dict[str, str]:
    import aiohttp
    import fsspec

    out = {"fsspec": fsspec.__version__, "aiohttp": aiohttp.__version__}
    for name in ("s3fs", "obstore"):  # the S3 scenario's access libraries, where installed
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            pass
    return {**out, **peer_versions(family, ("libavcodec", "libavformat", "libswscale"))}


def _warm_up(family: str, path: str, threads: int) -> None:
    """Load the library and its codecs, untimed (torchcodec's first use takes seconds)."""
    if family == "pyav":
        import av

        with av.open(path) as c:
            next(c.decode(video=0)).to_ndarray(format="rgb24", width=SIZE, height=SIZE)
        return
    handle = open_peer({"family": family}, path, {}, threads)
    handle.read([0])
    handle.close()
    import fsspec  # noqa: F401 - and its HTTP implementation
    import fsspec.implementations.http  # noqa: F401
    for name in ("s3fs", "obstore"):  # the S3 scenario's, where installed
        try:
            __import__(name)
        except ImportError:
            pass


def _answer(conn: Any, work: Callable[[], dict], task: dict | None = None) -> None:
    """Send what ``work`` returns, or why it failed."""
    try:
        conn.send(work())
    except Exception as exc:  # noqa: BLE001 - the parent records the failure
        failed = {"fatal": error_text(exc), "traceback": traceback.format_exc()[-2000:]}
        conn.send({"row": task.get("row"), **failed} if task is not None else failed)


def peer_worker(conn: Any, family: str, warm_path: str, threads: int) -> None:
    """A long-lived peer process: answers pass tasks until it receives None."""
    try:
        _warm_up(family, warm_path, threads)
        conn.send({"ready": True, "versions": _versions(family)})
    except Exception as exc:  # noqa: BLE001 - the peer does not work here: say why
        conn.send({"ready": False, "error": error_text(exc)})
        return
    while (task := conn.recv()) is not None:
        _answer(conn, lambda: peer_pass(task), task)


# ---- fluxon ----

ITEM_STATS = ("open_ms", "index_ms", "kv_round_trips", "kv_hits", "kv_misses", "remote_reads",
              "remote_bytes", "frames_decoded", "decoder_seeks", "stat_requests",
              "open_round_trips", "first_frame_waits")
METADATA_STATS = ("kv_round_trips", "kv_hits", "kv_misses", "remote_reads", "remote_bytes",
                  "index_ms", "stat_requests", "open_round_trips")


def fluxon_read(task: dict, pool: Any, relpath: str, clips: list[list[int]]) -> list[Any]:
    """One item through the pool: a batched item in one read_many call, else clip by clip."""
    from fluxon_video import FluxonFsVideoReadRequest

    export, threads = task["fluxon"]["export"], task["threads"]
    if task["workload"] == "batched":
        return pool.read_many_numpy_with_stats(
            [FluxonFsVideoReadRequest(export, relpath, SIZE, SIZE, threads, tuple(clip))
             for clip in clips])
    return [pool.read_frames_numpy_with_stats(export_name=export, relpath=relpath, height=SIZE,
                                              width=SIZE, num_threads=threads, indices=clip)
            for clip in clips]


def _fluxon_clips_pass(task: dict, pool: Any, counters: Counters, row: dict) -> dict:
    one = Pass(row, CheckResult(exact_required=True), extra={"per_item": [], "paths": {}})
    paths = one.extra["paths"]
    before = counters.start()
    for item in task["items"]:
        video = task["videos"][item["video"]]
        results = one.time(item["video"],
                           lambda: fluxon_read(task, pool, video["relpath"], item["clips"]))
        if results is None:
            continue
        # A batched item is one decode for the group: its stats are the first result's.
        stats = [results[0].stats] if task["workload"] == "batched" else [r.stats for r in results]
        one.extra["per_item"].append(
            {"video": item["video"], **{k: sum(getattr(s, k) for s in stats) for k in ITEM_STATS}})
        for s in stats:
            key = s.path + (f" ({s.fallback})" if s.fallback else "")
            paths[key] = paths.get(key, 0) + 1
        one.check_item(item["video"], item["clips"], [r.frames for r in results],
                       reference(video["ref"]))
    return one.result(counters.since(before))


def _fluxon_local_pass(task: dict) -> dict:
    """fluxon's decoder on the local files, no store: what decoding alone costs (reference).
    A new open per item, as in the other rows; each file's index is built once, untimed
    (the warm rows get theirs from Redis), as bench/run.py's fluxon-local row does."""
    videos, threads = task["videos"], task["threads"]
    for item in task["items"]:
        FluxonLocalHandle.prepare(Path(videos[item["video"]]["path"]))
    one = Pass({"family": "fluxon", "cache": "local file"}, CheckResult(exact_required=True),
               extra={"per_item": []})

    def read(path: Path, clips: list[list[int]]) -> tuple[list[np.ndarray], int]:
        handle = FluxonLocalHandle(path, SIZE, SIZE, threads)
        outs, decoded = [], 0
        try:
            for clip in clips:
                outs.append(handle.read(clip))
                decoded += handle.stats["frames_decoded"]
        finally:
            handle.close()
        return outs, decoded

    for item in task["items"]:
        video = videos[item["video"]]
        got = one.time(item["video"], lambda: read(Path(video["path"]), item["clips"]))
        if got is None:
            continue
        outs, frames_decoded = got
        one.extra["per_item"].append({"video": item["video"], "frames_decoded": frames_decoded,
                                      **{k: 0 for k in ITEM_STATS if k != "frames_decoded"}})
        one.check_item(item["video"], item["clips"], outs, reference(video["ref"]))
    return one.result({})


def _fluxon_metadata_pass(task: dict, patcher: Any, counters: Counters, row: dict) -> dict:
    one = Pass(row, None, extra={"per_item": []})
    before = counters.start()
    for item in task["items"]:
        video = task["videos"][item["video"]]
        got = one.time(item["video"], lambda: patcher.video_metadata_with_stats(
            task["fluxon"]["export"], video["relpath"]))
        if got is None:
            continue
        meta, stats = got
        one.extra["per_item"].append({"video": item["video"],
                                      **{k: getattr(stats, k) for k in METADATA_STATS},
                                      "index_source": stats.index_source})
        one.check_metadata(video, meta.num_frames, meta.average_fps, meta.duration_s)
    return one.result(counters.since(before))


def prime_shared_stats(task: dict, patcher: Any) -> None:
    """What another process of the same identity leaves behind (metadata_cache_shared)."""
    with patcher:
        for item in task["items"]:
            patcher.file_version(task["fluxon"]["export"],
                                 task["videos"][item["video"]]["relpath"])


def fluxon_pass(task: dict) -> list[dict]:
    """One new process: a cold or warm-kv pass (cold clips: then warm-reader, same pool)."""
    import fluxon_video as fv

    fv.decode_local_frames(task["warm_path"], [0], SIZE, SIZE, task["threads"])  # untimed
    counters = Counters(task["store"], "fluxon")
    patcher = make_patcher(task["fluxon"])
    if task.get("prime_shared_stats"):
        prime_shared_stats(task, patcher)
        return []
    pool = patcher.open_video_reader_pool()

    out = []
    try:
        row = {"family": "fluxon", "cache": task["cache"]}
        if task["workload"] == "metadata":
            out.append(_fluxon_metadata_pass(task, patcher, counters, row))
        else:
            out.append(_fluxon_clips_pass(task, pool, counters, row))
        settle(patcher)
        if task.get("warm_reader"):  # the same items again through the same pool
            out.append(_fluxon_clips_pass(task, pool, counters,
                                          {"family": "fluxon", "cache": "warm-reader"}))
            settle(patcher)
        if task.get("local_pass"):
            out.append(_fluxon_local_pass(task))
    finally:
        pool.close()
        patcher.close()
    return out


def fluxon_child(conn: Any, task: dict) -> None:
    _answer(conn, lambda: {"passes": fluxon_pass(task), "versions": fluxon_versions()})
