"""What the processes of bench/remote.py do: peer workers and fluxon passes.

A *pass* reads a list of items through one *row* (one pipeline: a peer with
its remote access method, or fluxon in one cache state) and returns every
item's time, the frame check and what the store's servers counted during the
pass (requests, body bytes, connections that carried requests).

- Peer workers live for the whole run, one process per library (PyAV,
  torchcodec, decord), like DataLoader workers with persistent_workers=True:
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

import bisect
import io
import time
import traceback
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contenders import FluxonLocalHandle, pyav_decode_from
from frames import CheckResult, Reference
from tasks import make_patcher

SIZE = 224

# ---- the servers' counters ----


def scrape(url: str) -> dict[str, float]:
    """Prometheus text from ``url`` -> {sample name + sorted labels: value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def _sum(sample: dict[str, float], name: str, where: Callable[[str], bool] = lambda _: True) -> float:
    return sum(v for k, v in sample.items() if k.startswith(name + "{") and where(k))


class Counters:
    """Before/after a pass: the origin's requests and bytes, the relay's connections."""

    def __init__(self, store: dict, side: str) -> None:
        self.side = side  # "peer" (range server) or "fluxon" (agent)
        self.origin = store["range_metrics"] if side == "peer" else store["agent_metrics"]
        self.relay = store["range_control"] if side == "peer" else store["agent_relay_control"]

    def snapshot(self) -> dict[str, float]:
        o = scrape(self.origin)
        r = scrape(self.relay + "/metrics")
        if self.side == "peer":
            out = {"requests": _sum(o, "bench_range_requests_total"),
                   "bytes": _sum(o, "bench_range_served_bytes_total"),
                   "head_requests": _sum(o, "bench_range_requests_total",
                                         lambda k: "method=HEAD" in k)}
        else:
            out = {"requests": _sum(o, "fluxon_agent_requests_total",
                                    lambda k: "route=/v1/read" in k or "route=/v1/stat" in k),
                   "bytes": _sum(o, "fluxon_agent_served_bytes_total"),
                   "stat_requests": _sum(o, "fluxon_agent_requests_total",
                                         lambda k: "route=/v1/stat" in k)}
        out["relay_opened"] = _sum(r, "bench_relay_connections_opened_total")
        out["relay_bytes_down"] = _sum(r, "bench_relay_bytes_down_total")
        out["connections_used"] = _sum(r, "bench_relay_connections_used")
        return out

    def start(self) -> dict[str, float]:
        urllib.request.urlopen(self.relay + "/reset", timeout=10).read()
        return self.snapshot()

    def since(self, before: dict[str, float]) -> dict[str, float]:
        after = self.snapshot()
        out = {k: after[k] - before[k] for k in after if k != "connections_used"}
        out["connections_used"] = after["connections_used"]
        return out


# ---- references (cached per process) ----

_REFS: dict[str, Reference] = {}


def reference(path: str) -> Reference:
    if path not in _REFS:
        _REFS[path] = Reference.load(Path(path))
    return _REFS[path]


def _error(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


# ---- peers ----


class PyAVClips:
    """PyAV on a file object: seek to the keyframe before the clip, decode forward.

    Frame i -> pts comes from the video's pts table (presentation order),
    which the parent took from ffprobe and hands over untimed: the generous
    reading of "PyAV users keep their timestamps in the dataset manifest".
    A seek that lands past a target (open-GOP leading pictures) is redone
    from the first keyframe, as a careful user does.
    """

    def __init__(self, source: Any, video: dict, threads: int) -> None:
        import av

        self.container = av.open(source)
        self.stream = self.container.streams.video[0]
        self.stream.thread_type = "AUTO"
        self.stream.codec_context.thread_count = threads
        self.pts, self.keys = video["pts"], video["keys"]
        self.fallbacks = 0

    def _decode_from(self, seek_pts: int, want: dict[int, int]) -> dict[int, np.ndarray]:
        return pyav_decode_from(self.container, self.stream, seek_pts, want, SIZE, SIZE)

    def read(self, clip: Sequence[int]) -> np.ndarray:
        want = {self.pts[i]: i for i in clip}
        k = bisect.bisect_right(self.keys, self.pts[min(clip)]) - 1
        got = self._decode_from(self.keys[max(k, 0)], want)
        if len(got) < len(want):
            self.fallbacks += 1
            got = self._decode_from(self.keys[0], want)
        return np.stack([got[i] for i in clip])

    def read_union(self, clips: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Every clip's frames from one forward pass per cluster of the sorted union (a new
        seek only where the next target's keyframe lies beyond the cluster's last target)."""
        targets = sorted({i for clip in clips for i in clip})
        clusters: list[list[int]] = []
        for i in targets:
            if clusters and self._keyframe(i) <= self.pts[clusters[-1][-1]]:
                clusters[-1].append(i)
            else:
                clusters.append([i])
        got: dict[int, np.ndarray] = {}
        for cluster in clusters:
            want = {self.pts[i]: i for i in cluster}
            part = self._decode_from(self._keyframe(cluster[0]), want)
            if len(part) < len(want):
                self.fallbacks += 1
                part = self._decode_from(self.keys[0], want)
            got.update(part)
        return [np.stack([got[i] for i in clip]) for clip in clips]

    def _keyframe(self, index: int) -> int:
        k = bisect.bisect_right(self.keys, self.pts[index]) - 1
        return self.keys[max(k, 0)]

    def close(self) -> None:
        self.container.close()


class TorchcodecClips:
    def __init__(self, source: Any, video: dict, threads: int, seek_mode: str = "exact") -> None:
        from torchcodec.decoders import VideoDecoder
        from torchcodec.transforms import Resize

        self.decoder = VideoDecoder(source, dimension_order="NHWC", num_ffmpeg_threads=threads,
                                    seek_mode=seek_mode, transforms=[Resize((SIZE, SIZE))])
        self.fallbacks = 0

    def read(self, clip: Sequence[int]) -> np.ndarray:
        return self.decoder.get_frames_at(list(clip)).data.numpy()

    def close(self) -> None:
        del self.decoder


class DecordClips:
    """decord.VideoReader on a file object: decord calls ``read()`` once, for the whole file."""

    def __init__(self, source: Any, video: dict, threads: int) -> None:
        import decord

        self.reader = decord.VideoReader(source, ctx=decord.cpu(0), width=SIZE, height=SIZE,
                                         num_threads=threads)
        self.fallbacks = 0

    def read(self, clip: Sequence[int]) -> np.ndarray:
        return self.reader.get_batch(list(clip)).asnumpy()

    def close(self) -> None:
        del self.reader


OPENERS = {"pyav": PyAVClips, "torchcodec": TorchcodecClips, "decord": DecordClips}


class PeerSource:
    """The row's remote access: an fsspec HTTP file object, or one GET into memory."""

    def __init__(self, row: dict) -> None:
        import fsspec

        self.row = row
        self.block = {"block_size": row["block_size"]} if row.get("block_size") else {}
        self.fs = fsspec.filesystem("http", **self.block)  # the instance fsspec.open reuses

    def open(self, url: str) -> tuple[Any, Callable[[], None]]:
        import fsspec

        if self.row["mode"] == "download":
            data = self.fs.cat_file(url)  # one GET of the whole file
            return (data if self.row["family"] == "torchcodec" else io.BytesIO(data)), lambda: None
        f = fsspec.open(url, "rb", **self.block).open()  # HEAD (size), then ranged GETs
        return f, f.close


def _pass_result(row: dict, item_ms: list[float], server: dict, check: CheckResult | None,
                 errors: list[str], extra: dict | None = None,
                 item_videos: list[str] | None = None, flagged: list[str] | None = None) -> dict:
    return {"row": row, "item_ms": item_ms, "item_videos": item_videos or [],
            "flagged_videos": sorted(set(flagged or [])), "server": server,
            "check": check.as_dict() if check is not None else None,
            "errors": errors[:5], "error_count": len(errors), "extra": extra or {}}


def check_item(check: CheckResult, name: str, clips: Sequence[Sequence[int]],
               outs: Sequence[np.ndarray], ref: Reference, flagged: list[str]) -> None:
    """Check one item's clips; add them to the pass's check; note the video if flagged."""
    item = CheckResult(exact_required=check.exact_required)
    for clip, frames in zip(clips, outs):
        item.add(frames, clip, ref)
    check.frames += item.frames
    check.bit_exact += item.bit_exact
    check.worst_mean_abs_diff = max(check.worst_mean_abs_diff, item.worst_mean_abs_diff)
    check.wrong += [f"{name}: {w}" for w in item.wrong]
    check.off += [f"{name}: {o}" for o in item.off]
    del check.wrong[5:], check.off[5:]
    if not item.ok:
        flagged.append(name)


def peer_pass(task: dict) -> dict:
    row, videos, threads = task["row"], task["videos"], task["threads"]
    source = PeerSource(row)
    counters = Counters(task["store"], "peer")
    check = CheckResult(exact_required=False)
    item_ms: list[float] = []
    item_videos: list[str] = []
    flagged: list[str] = []
    errors: list[str] = []
    extra = {"fallbacks": 0}
    if task["workload"] == "metadata":
        return peer_metadata_pass(task, source, counters)
    opener = OPENERS[row["family"]]
    kwargs = {"seek_mode": row["seek_mode"]} if row.get("seek_mode") else {}
    before = counters.start()
    for item in task["items"]:
        video = videos[item["video"]]
        clips = item["clips"]
        try:
            t0 = time.perf_counter()
            f, close = source.open(video["url"])
            try:
                handle = opener(f, video, threads, **kwargs)
                if row.get("union"):
                    outs = handle.read_union(clips)
                else:
                    outs = [handle.read(clip) for clip in clips]  # one by one
                handle.close()
            finally:
                close()
            item_ms.append((time.perf_counter() - t0) * 1e3)
            item_videos.append(item["video"])
            extra["fallbacks"] += handle.fallbacks
        except Exception as exc:  # noqa: BLE001 - a failing peer is a finding, not a crash
            errors.append(f"{item['video']}: {_error(exc)}")
            flagged.append(item["video"])
            continue
        check_item(check, item["video"], clips, outs, reference(video["ref"]), flagged)
        del outs
    return _pass_result(row, item_ms, counters.since(before), check, errors, extra,
                        item_videos, flagged)


def _metadata_check(video: dict, frames: int, fps: float, duration: float) -> str:
    """'' when frame count, fps and duration are right (fps within 1%, duration within 2 frames)."""
    want_frames, want_fps = video["frames"], video["fps"]
    if frames != want_frames:
        return f"{video['name']}: {frames} frames, the ffmpeg CLI decodes {want_frames}"
    if abs(fps - want_fps) > 0.01 * want_fps:
        return f"{video['name']}: {fps:.3f} fps, expected {want_fps}"
    if abs(duration - want_frames / want_fps) > 2 / want_fps:
        return f"{video['name']}: duration {duration:.3f} s, expected {want_frames / want_fps:.3f}"
    return ""


def peer_metadata_pass(task: dict, source: PeerSource, counters: Counters) -> dict:
    """Time until frame count, fps and duration are known, opening the file with the peer."""
    row, videos = task["row"], task["videos"]
    item_ms: list[float] = []
    errors: list[str] = []
    wrong: list[str] = []
    before = counters.start()
    for item in task["items"]:
        video = videos[item["video"]]
        try:
            t0 = time.perf_counter()
            f, close = source.open(video["url"])
            try:
                frames, fps, duration = _peer_metadata(row, f)
            finally:
                close()
            item_ms.append((time.perf_counter() - t0) * 1e3)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{item['video']}: {_error(exc)}")
            continue
        bad = _metadata_check(video, frames, fps, duration)
        if bad:
            wrong.append(bad)
    result = _pass_result(row, item_ms, counters.since(before), None, errors)
    result["metadata_wrong"] = wrong[:5]
    result["metadata_wrong_count"] = len(wrong)
    return result


def _peer_metadata(row: dict, f: Any) -> tuple[int, float, float]:
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
    if family == "pyav":
        import av

        out["av"] = av.__version__
        out.update({f"av's {k}": ".".join(map(str, v)) for k, v in av.library_versions.items()
                    if k in ("libavcodec", "libavformat", "libswscale")})
    elif family == "torchcodec":
        import torch
        import torchcodec

        out.update({"torchcodec": torchcodec.__version__, "torch": torch.__version__})
    elif family == "decord":
        import decord

        out["decord"] = decord.__version__
    return out


def _warm_up(family: str, path: str, threads: int) -> None:
    """Load the library and its codecs, untimed (torchcodec's first use takes seconds)."""
    video = {"pts": None, "keys": None}
    if family == "pyav":
        import av

        with av.open(path) as c:
            next(c.decode(video=0)).to_ndarray(format="rgb24", width=SIZE, height=SIZE)
        return
    handle = OPENERS[family](path, video, threads)
    handle.read([0])
    handle.close()
    import fsspec  # noqa: F401 - and its HTTP implementation
    import fsspec.implementations.http  # noqa: F401


def peer_worker(conn: Any, family: str, warm_path: str, threads: int) -> None:
    """A long-lived peer process: answers pass tasks until it receives None."""
    try:
        _warm_up(family, warm_path, threads)
        conn.send({"ready": True, "versions": _versions(family)})
    except Exception as exc:  # noqa: BLE001 - the peer does not work here: say why
        conn.send({"ready": False, "error": _error(exc)})
        return
    while True:
        task = conn.recv()
        if task is None:
            return
        try:
            conn.send(peer_pass(task))
        except Exception as exc:  # noqa: BLE001
            conn.send({"row": task.get("row"), "fatal": _error(exc),
                       "traceback": traceback.format_exc()[-2000:]})


# ---- fluxon ----


ITEM_STATS = ("open_ms", "index_ms", "kv_round_trips", "kv_hits", "kv_misses", "remote_reads",
              "remote_bytes", "frames_decoded", "decoder_seeks", "stat_requests",
              "open_round_trips", "first_frame_waits")


def _fluxon_clips_pass(task: dict, pool: Any, counters: Counters, row: dict) -> dict:
    from fluxon_video import FluxonFsVideoReadRequest

    fx, videos, threads = task["fluxon"], task["videos"], task["threads"]
    check = CheckResult(exact_required=True)
    item_ms: list[float] = []
    item_videos: list[str] = []
    flagged: list[str] = []
    errors: list[str] = []
    per_item: list[dict] = []
    paths: dict[str, int] = {}
    before = counters.start()
    for item in task["items"]:
        video = videos[item["video"]]
        clips = item["clips"]
        try:
            t0 = time.perf_counter()
            if task["workload"] == "batched":
                results = pool.read_many_numpy_with_stats(
                    [FluxonFsVideoReadRequest(fx["export"], video["relpath"], SIZE, SIZE, threads,
                                              tuple(clip)) for clip in clips])
                stats = [results[0].stats]  # one decode for the group
            else:
                results = [pool.read_frames_numpy_with_stats(
                    export_name=fx["export"], relpath=video["relpath"], height=SIZE, width=SIZE,
                    num_threads=threads, indices=clip) for clip in clips]
                stats = [r.stats for r in results]
            item_ms.append((time.perf_counter() - t0) * 1e3)
            item_videos.append(item["video"])
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{item['video']}: {_error(exc)}")
            flagged.append(item["video"])
            continue
        per_item.append({"video": item["video"],
                         **{k: sum(getattr(s, k) for s in stats) for k in ITEM_STATS}})
        for s in stats:
            key = s.path + (f" ({s.fallback})" if s.fallback else "")
            paths[key] = paths.get(key, 0) + 1
        check_item(check, item["video"], clips, [r.frames for r in results],
                   reference(video["ref"]), flagged)
        del results
    server = counters.since(before)
    return _pass_result(row, item_ms, server, check, errors,
                        {"per_item": per_item, "paths": paths}, item_videos, flagged)


def _fluxon_local_pass(task: dict) -> dict:
    """fluxon's decoder on the local files, no store: what decoding alone costs (reference).
    A new open per item, as in the other rows; each file's index is built once, untimed
    (the warm rows get theirs from Redis), as bench/run.py's fluxon-local row does."""
    videos, threads = task["videos"], task["threads"]
    for item in task["items"]:
        FluxonLocalHandle.prepare(Path(videos[item["video"]]["path"]))
    check = CheckResult(exact_required=True)
    item_ms: list[float] = []
    item_videos: list[str] = []
    flagged: list[str] = []
    errors: list[str] = []
    per_item: list[dict] = []
    for item in task["items"]:
        video = videos[item["video"]]
        try:
            t0 = time.perf_counter()
            outs = []
            frames_decoded = 0
            handle = FluxonLocalHandle(Path(video["path"]), SIZE, SIZE, False, threads)
            try:
                for clip in item["clips"]:
                    frames, stats = handle.read(clip)
                    outs.append(frames)
                    frames_decoded += stats["frames_decoded"]
            finally:
                handle.close()
            item_ms.append((time.perf_counter() - t0) * 1e3)
            item_videos.append(item["video"])
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{item['video']}: {_error(exc)}")
            continue
        per_item.append({"video": item["video"], "frames_decoded": frames_decoded,
                         **{k: 0 for k in ITEM_STATS if k != "frames_decoded"}})
        check_item(check, item["video"], item["clips"], outs, reference(video["ref"]), flagged)
    return _pass_result({"family": "fluxon", "cache": "local file"}, item_ms, {}, check, errors,
                        {"per_item": per_item}, item_videos, flagged)


def _fluxon_metadata_pass(task: dict, patcher: Any, counters: Counters, row: dict) -> dict:
    videos = task["videos"]
    item_ms: list[float] = []
    errors: list[str] = []
    wrong: list[str] = []
    per_item: list[dict] = []
    before = counters.start()
    for item in task["items"]:
        video = videos[item["video"]]
        try:
            t0 = time.perf_counter()
            meta, stats = patcher.video_metadata_with_stats(task["fluxon"]["export"],
                                                            video["relpath"])
            item_ms.append((time.perf_counter() - t0) * 1e3)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{item['video']}: {_error(exc)}")
            continue
        per_item.append({"video": item["video"],
                         **{k: getattr(stats, k) for k in ("kv_round_trips", "kv_hits",
                                                            "kv_misses", "remote_reads",
                                                            "remote_bytes", "index_ms",
                                                            "stat_requests",
                                                            "open_round_trips")},
                         "index_source": stats.index_source})
        bad = _metadata_check(video, meta.num_frames, meta.average_fps, meta.duration_s)
        if bad:
            wrong.append(bad)
    result = _pass_result(row, item_ms, counters.since(before), None, errors,
                          {"per_item": per_item})
    result["metadata_wrong"] = wrong[:5]
    result["metadata_wrong_count"] = len(wrong)
    return result


def fluxon_pass(task: dict) -> list[dict]:
    """One new process: a cold or warm-kv pass (cold clips: then warm-reader, same pool)."""
    import fluxon_video as fv

    fv.decode_local_frames(task["warm_path"], [0], SIZE, SIZE, task["threads"])  # untimed
    counters = Counters(task["store"], "fluxon")
    patcher = make_patcher(task["fluxon"])
    if task.get("prime_shared_stats"):
        # What another process of the same identity leaves behind (metadata_cache_shared).
        with patcher:
            for item in task["items"]:
                patcher.file_version(task["fluxon"]["export"],
                                     task["videos"][item["video"]]["relpath"])
        return []
    pool = patcher.open_video_reader_pool()
    out = []

    def settle() -> None:  # every piece fetched so far is in the KV
        if not patcher.client.backfill.wait_idle(timeout=120):
            raise RuntimeError("backfill did not finish within 120 s")

    try:
        row = {"family": "fluxon", "cache": task["cache"]}
        if task["workload"] == "metadata":
            out.append(_fluxon_metadata_pass(task, patcher, counters, row))
        else:
            out.append(_fluxon_clips_pass(task, pool, counters, row))
        settle()
        if task.get("warm_reader"):
            out.append(_fluxon_clips_pass(task, pool, counters,
                                          {"family": "fluxon", "cache": "warm-reader"}))
            settle()
        if task.get("local_pass"):
            out.append(_fluxon_local_pass(task))
    finally:
        pool.close()
        patcher.close()
    return out


def fluxon_child(conn: Any, task: dict) -> None:
    try:
        conn.send({"passes": fluxon_pass(task), "versions": _fluxon_versions()})
    except Exception as exc:  # noqa: BLE001
        conn.send({"fatal": _error(exc), "traceback": traceback.format_exc()[-2000:]})


def _fluxon_versions() -> dict[str, str]:
    import fluxon_video
    from fluxon_video.native import require_native

    return {"fluxon_video": fluxon_video.__version__,
            **{f"fluxon's {k}": v for k, v in require_native()[1].library_versions().items()}}
