"""LeRobot v3 batches: 16 consecutive dataset rows from episodes packed into one MP4 per camera.

LeRobot v3 concatenates many episodes into one shard per camera
(videos/<camera>/chunk-000/file-000.mp4) and keeps each episode's from_timestamp in
its episodes metadata; row (episode, frame k) is the frame on screen at
from_timestamp + k / fps in each camera's shard. Generated here (once, cached under
<data>/lerobot) with the ffmpeg CLI: two cameras (640x480 and 320x240), N episodes of
10-30 s (seeded, whole GOPs: a keyframe starts every episode, as in a concatenated
shard), 30 fps, H.264 (-g 60 -bf 2) and AV1 (libsvtav1 preset 12, -g 60).

A batch is 16 consecutive rows from a seeded-random start (it may cross into the next
episode); per camera its 16 frames at 224x224 RGB. Contenders, one thread each:
- per-row opens (PyAV): per row and camera open the shard, seek, decode forward to
  the frame, close (a naive dataset's __getitem__);
- Daft-style batched PyAV: per shard, the batch's times sorted and clustered (targets
  under 10 s apart), one open per shard, one seek and one forward decode per cluster;
- fluxon: a reader kept open per shard, ``read_frames_numpy(indices_at_times(times))``;
- fluxon pool: ``read_many_numpy_with_stats`` with one request per shard (max_workers=1);
- SPDL: each shard's packets demuxed once, ``sample_decode_video`` per batch at round(t * fps);
- torchcodec: a ``VideoDecoder`` kept open per shard, ``get_frames_played_at(times)``,
  and LeRobot's own call ``get_frames_at([round(t * fps) ...])``.
Then, unless --latency-ms -1, through the remote model (bench/remote.py's store: L ms
per request, 50 MB/s per connection): fluxon cold (Redis flushed, a new patcher) and warm
(a new patcher, Redis warm) through the agent, the Daft-style and per-row PyAV readers on
fsspec HTTP file objects (4 MiB blocks) from the HTTP Range server.
Frames are checked against the ffmpeg CLI (scale=224:224:flags=bilinear,format=rgb24;
fluxon bit for bit, peers for identity); the targets come from ffprobe's frame times.
Batches/s is the median over passes (a pass: opening what it keeps open, then every batch).
Targets: fluxon >= 2x the Daft-style reader and >= 10x per-row opens, locally and
remote, cold and warm.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from contenders import SpdlHandle, TorchcodecHandle, open_handle, pyav_frames_at, pyav_open
from dataset import ffmpeg_make
from frames import CheckResult, cli_reference, frame_times, needed
from harness import (add_options, error_text, finish, header, machine, median, num,
                     publish, report_head, say, scenario_parser, table, times, versions)

H = W = 224
FPS, ROWS, CLUSTER_S, TOL = 30, 16, 10.0, 1e-6
CAMERAS = {"observation.images.front": (480, 640), "observation.images.wrist": (240, 320)}
CODECS = {"h264": ["-c:v", "libx264", "-preset", "veryfast", "-g", "60", "-bf", "2"],
          "av1": ["-c:v", "libsvtav1", "-preset", "12", "-g", "60"]}
GOALS = {"Daft-style batched PyAV": 2.0, "per-row opens (PyAV)": 10.0}
REMOTE_BLOCK = 4 << 20  # fsspec's block for the remote PyAV rows (its default is 5 MiB)


# ---- the dataset and the workload (pure) ----

def episode_lengths(episodes: int, seed: int) -> list[int]:
    """Frames per episode: 10-30 s in whole 2 s GOPs, seeded."""
    rng = random.Random(seed)
    return [rng.randrange(5, 16) * 2 * FPS for _ in range(episodes)]


def from_timestamps(lengths: list[int]) -> list[float]:
    """Each episode's start in the shard, as LeRobot's episodes metadata keeps it."""
    return [float(sum(lengths[:e])) / FPS for e in range(len(lengths))]


def make_batches(lengths: list[int], count: int, seed: int) -> list[list[tuple[int, int]]]:
    """``count`` batches of ROWS consecutive rows (episode, frame in episode)."""
    rows = [(e, k) for e, n in enumerate(lengths) for k in range(n)]
    rng = random.Random(seed + 1)
    return [rows[s:s + ROWS] for s in (rng.randrange(len(rows) - ROWS + 1) for _ in range(count))]


def row_times(batch: list[tuple[int, int]], starts: list[float]) -> list[float]:
    return [starts[e] + k / FPS for e, k in batch]


def clusters(seconds: list[float], gap_s: float = CLUSTER_S) -> list[list[int]]:
    """Positions of ``seconds`` sorted by time, split where two targets are >= gap_s apart."""
    out: list[list[int]] = []
    for pos in sorted(range(len(seconds)), key=lambda p: seconds[p]):
        if out and seconds[pos] - seconds[out[-1][-1]] < gap_s:
            out[-1].append(pos)
        else:
            out.append([pos])
    return out


def make_shards(data: Path, codec: str, lengths: list[int]) -> dict[str, Path]:
    """One shard per camera (and meta/episodes.json), generated once."""
    root = data / f"{codec}-{len(lengths)}ep-{sum(lengths)}f"
    shards = {cam: root / "videos" / cam / "chunk-000" / "file-000.mp4" for cam in CAMERAS}
    for cam, path in shards.items():
        if not path.exists():
            h, w = CAMERAS[cam]
            say(f"encoding {codec} {w}x{h}, {len(lengths)} episodes, {sum(lengths) / FPS:g} s")
            ffmpeg_make(path, "-f", "lavfi", "-i", f"testsrc2=size={w}x{h}:rate={FPS}",
                        "-frames:v", str(sum(lengths)), *CODECS[codec], "-pix_fmt", "yuv420p")
    starts = from_timestamps(lengths)
    meta = [{"episode_index": e, "length": n, **{f"videos/{cam}/{k}": v for cam in CAMERAS for
             k, v in (("chunk_index", 0), ("file_index", 0), ("from_timestamp", starts[e]),
                      ("to_timestamp", starts[e] + n / FPS))}} for e, n in enumerate(lengths)]
    (root / "meta").mkdir(exist_ok=True)
    (root / "meta" / "episodes.json").write_text(json.dumps(meta, indent=1))
    return shards


def shard_root(shards: dict[str, Path]) -> Path:
    """The dataset's root (videos/<camera>/chunk-000/file-000.mp4 lie under it)."""
    return next(iter(shards.values())).parents[3]


# ---- contenders: batch(times per camera) -> frames per camera, in row order ----

def pyav_pick(container: Any, stream: Any, seconds: list[float]) -> list[np.ndarray]:
    """For each (sorted) time the frame on screen then, from one seek and forward decode."""
    return pyav_frames_at(container, stream, seconds, H, W, TOL)


@contextmanager
def pyav_opened(shard: Path | str) -> Iterator[tuple[Any, Any]]:
    """(container, stream) of a shard: a local path, or a URL read through an fsspec
    HTTP file object (ranged GETs of REMOTE_BLOCK bytes, as Daft-style readers do)."""
    import fsspec

    f = fsspec.open(shard, "rb", block_size=REMOTE_BLOCK).open() if isinstance(shard, str) \
        else None
    container = pyav_open(f if f is not None else shard)
    try:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        stream.codec_context.thread_count = 1
        yield container, stream
    finally:
        container.close()
        if f is not None:
            f.close()


class PyAVRows:
    """PyAV on the shards, nothing kept between batches: per camera one open per batch, one
    seek and forward decode per cluster of its times (Daft-style); ``per_row``: an open,
    seek and decode per row (a naive dataset's __getitem__)."""

    def __init__(self, shards: dict[str, Any], per_row: bool = False) -> None:
        self.shards, self.per_row = shards, per_row

    def batch(self, by_cam: dict[str, list[float]]) -> dict[str, np.ndarray]:
        out = {}
        for cam, seconds in by_cam.items():
            frames: list[Any] = [None] * len(seconds)
            opens = ([[[p]] for p in range(len(seconds))] if self.per_row
                     else [clusters(seconds)])  # the clusters each open reads
            for groups in opens:
                with pyav_opened(self.shards[cam]) as (container, stream):
                    for group in groups:
                        for pos, frame in zip(group, pyav_pick(container, stream,
                                                               [seconds[p] for p in group])):
                            frames[pos] = frame
            out[cam] = np.stack(frames)
        return out


class Kept:
    """A reader kept open per shard for the pass (``open``, timed as the pass's open), and
    ``read(reader, times)`` per batch and camera."""

    def __init__(self, shards: dict[str, Any], open: Callable[[Any], Any],
                 read: Callable[[Any, list[float]], np.ndarray]) -> None:
        self.readers, self.read = {cam: open(p) for cam, p in shards.items()}, read

    def batch(self, by_cam: dict[str, list[float]]) -> dict[str, np.ndarray]:
        return {cam: self.read(self.readers[cam], t) for cam, t in by_cam.items()}

    def close(self) -> None:
        for reader in self.readers.values():
            reader.close()


def fluxon_read(reader: Any, seconds: list[float]) -> np.ndarray:
    return reader.read_frames_numpy(reader.indices_at_times(seconds))


def rounded(seconds: list[float]) -> list[int]:
    """LeRobot's own frame indices: round(t * fps)."""
    return [round(t * FPS) for t in seconds]


def torchcodec(path: Path) -> TorchcodecHandle:
    return TorchcodecHandle(path, H, W, 1)


class FluxonPool:
    def __init__(self, shards: dict[str, Path]) -> None:
        import fluxon_video as fv
        from stores import make_patcher, store

        root = shard_root(shards)
        self.fv, self.rel = fv, {cam: str(p.relative_to(root)) for cam, p in shards.items()}
        self.patcher = make_patcher(store("lerobot", root, None, None))
        self.pool = self.patcher.open_video_reader_pool()
        self.times = {}  # each shard's frame times: the index, read once per shard
        for cam, rel in self.rel.items():
            with self.patcher.open_video_reader("lerobot", rel, H, W) as reader:
                self.times[cam] = (reader.timestamps_s(), reader.metadata)

    def batch(self, by_cam: dict[str, list[float]]) -> dict[str, np.ndarray]:
        from fluxon_video.metadata import indices_at_times

        requests = [self.fv.FluxonFsVideoReadRequest(
            "lerobot", self.rel[cam], H, W, 1, tuple(indices_at_times(*self.times[cam], t)))
            for cam, t in by_cam.items()]
        results = self.pool.read_many_numpy_with_stats(requests, max_workers=1)
        return {cam: r.frames for cam, r in zip(by_cam, results)}

    def close(self) -> None:
        self.pool.close()
        self.patcher.close()


# Through the remote model (stores.PassModel): fluxon cold and warm through the agent and
# Redis, PyAV on fsspec HTTP file objects from the HTTP Range server.
REMOTE_ROWS = ("fluxon cold", "fluxon warm", "Daft-style batched PyAV", "per-row opens (PyAV)")


def remote_opener(model: Any, row: str, shards: dict[str, Path]) -> Callable[[], Any]:
    """A pass's contender on the remote model (its patcher made, untimed): fluxon reads
    the shards' relpaths (a reader per shard, opened by the pass's patcher), PyAV their
    URLs."""
    rel = {cam: str(p.resolve().relative_to(model.video_dir)) for cam, p in shards.items()}
    patcher = model.start_pass(row)
    if patcher is not None:
        return lambda: Kept(rel, lambda r: patcher.open_video_reader("lerobot", r, H, W),
                            fluxon_read)
    return lambda: CONTENDERS[row]({cam: model.url(r) for cam, r in rel.items()})


# name -> the pass's contender on the local shards: batch(times per camera) -> frames per
# camera, in row order. SPDL (contenders.SpdlHandle, the reference's own scale filter):
# each shard's packets demuxed once, then sample_decode_video per batch.
CONTENDERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "fluxon": lambda shards: Kept(shards, lambda p: open_handle("fluxon", p, H, W, 1).reader,
                                  fluxon_read),
    "fluxon pool.read_many": FluxonPool,
    "Daft-style batched PyAV": PyAVRows,
    "per-row opens (PyAV)": lambda shards: PyAVRows(shards, per_row=True),
    "SPDL sample_decode_video(round(t·fps))": lambda shards: Kept(
        shards, lambda p: SpdlHandle(p, H, W, 1), lambda h, t: h.read(rounded(t))),
    "torchcodec get_frames_played_at": lambda shards: Kept(
        shards, torchcodec, lambda h, t: h.decoder.get_frames_played_at(t).data.numpy()),
    "torchcodec get_frames_at(round(t·fps))": lambda shards: Kept(
        shards, torchcodec, lambda h, t: h.decoder.get_frames_at(rounded(t)).data.numpy())}
TIME_NOTE = ("A row's time from_timestamp + k / fps, summed in floats, can fall one ulp below "
             "the frame's pts (20.0 + 166 / 30 < 766 / 30): the PyAV rows allow 1 µs, fluxon's "
             "indices_at_times takes the nearest frame within 1e-4 s; torchcodec's get_frames_played_at allows none and returns "
             "the frame before. LeRobot itself calls torchcodec with round(t · fps) indices.")


def run_pass(name: str, opener: Callable[[], Any], work: list[dict[str, list[float]]],
             targets: list[dict[str, list[int]]], refs: dict) -> dict[str, Any]:
    """One pass: the contender opened (``opener``, timed), then every batch, checked."""
    check = CheckResult(exact_required=name.startswith("fluxon"))
    batch_ms, errors, handle = [], [], None
    t0 = time.perf_counter()
    try:
        handle = opener()
        open_ms = (time.perf_counter() - t0) * 1e3
        for by_cam, want in zip(work, targets):
            t0 = time.perf_counter()
            frames = handle.batch(by_cam)
            batch_ms.append((time.perf_counter() - t0) * 1e3)
            for cam, got in frames.items():
                check.add(np.asarray(got), want[cam], refs[cam])
    except Exception as exc:  # noqa: BLE001 - a failing contender is a finding
        errors.append(error_text(exc))
        open_ms = 0.0
    finally:
        if hasattr(handle, "close"):
            handle.close()
    total = sum(batch_ms) + open_ms
    return {"open_ms": open_ms, "batch_ms": batch_ms, "check": check.as_dict(), "errors": errors,
            "batches_per_s": len(batch_ms) / (total / 1e3) if batch_ms and not errors else None}


def summary(name: str, passes: list[dict]) -> dict[str, Any]:
    errors = [e for p in passes for e in p["errors"]]
    check = passes[-1]["check"]
    return {"contender": name, "passes": passes, "errors": errors,
            "batches_per_s": median(p["batches_per_s"] for p in passes if p["batches_per_s"]),
            "ms_per_batch": median(ms for p in passes for ms in p["batch_ms"]),
            "open_ms": median(p["open_ms"] for p in passes),
            "ok": not errors and all(p["check"]["ok"] for p in passes),
            "verdict": f"FAILED: {errors[0]}" if errors else next(
                (p["check"]["verdict"] for p in passes if not p["check"]["ok"]), check["verdict"])}


def ratios(rows: list[dict], fluxon: str = "fluxon") -> dict[str, float | None]:
    """The ``fluxon`` row's batches/s over each contender's."""
    fx = next((r["batches_per_s"] for r in rows if r["contender"] == fluxon and r["ok"]), None)
    return {r["contender"]: fx / r["batches_per_s"] if fx and r["batches_per_s"] else None
            for r in rows}


def goal_rows(codec: str, rows: list[dict], fluxon: str = "fluxon") -> list[list[str]]:
    r = ratios(rows, fluxon)
    return [[codec, f"{fluxon} ÷ {name} >= {goal:g}×", times(r.get(name)),
             "n/a" if r.get(name) is None else "met" if r[name] >= goal else "missed"]
            for name, goal in GOALS.items()]


def render(results: dict) -> str:
    s = results["settings"]
    out = [*report_head("LeRobot v3 batches (bench/lerobot.py)", results),
           f"{s['episodes']} episodes ({', '.join(f'{n // FPS}' for n in results['lengths'])} s) "
           f"packed into one shard per camera ({', '.join(f'{w}x{h}' for h, w in CAMERAS.values())})"
           f", {FPS} fps; {s['batches']} batches of {ROWS} consecutive rows, {len(CAMERAS)} "
           f"cameras ({ROWS * len(CAMERAS)} frames per batch, {H}x{W} RGB); median of "
           f"{s['repeat']} passes, a pass including its opens. Ratio: fluxon's batches/s over "
           "the row's.", ""]
    goals = []
    for codec, rows in results["codecs"].items():
        remote = results.get("remote", {}).get(codec, [])
        fluxons = ("fluxon",) if not remote else ("fluxon", "fluxon cold", "fluxon warm")
        for title, group, names in ((codec, rows, fluxons[:1]),
                                    (f"{codec}, remote model", remote, fluxons[1:])):
            if not group:
                continue
            r = {name: ratios(group, name) for name in names}
            out += [f"## {title}", "", table(
                ["contender", "batches/s", "ms/batch (median)", "open ms",
                 *(f"{name} ×" for name in names), "frames"],
                [[x["contender"], num(x["batches_per_s"]), num(x["ms_per_batch"], 1),
                  num(x["open_ms"], 1), *(times(r[name][x["contender"]]) for name in names),
                  x["verdict"][:70]] for x in group]), ""]
            goals += [g for name in names for g in goal_rows(codec, group, name)]
    if results.get("remote"):
        out += [f"Remote model: bench/remote.py's store, L = {s['latency_ms']:g} ms per request "
                f"and 50 MB/s per connection; PyAV reads fsspec HTTP file objects "
                f"({REMOTE_BLOCK >> 20} MiB blocks); fluxon cold: Redis flushed and a new "
                "patcher before the pass, warm: a new patcher, Redis warm.", ""]
    out += ["## Targets", "", table(["codec", "target", "measured", "status"], goals), ""]
    out += [f"- {n}" for n in results.get("notes", [])]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = scenario_parser("lerobot.py", __doc__, "3 episodes, 4 batches",
                         "lerobot.md and lerobot.json")
    full, quick = add_options(ap, [
        ("--episodes", int, 8, 3, "episodes per shard"),
        ("--batches", int, 12, 4, "batches of 16 rows"),
        ("--repeat", int, 2, "passes per contender"),
        ("--codecs", str, "h264,av1", "codecs, comma-separated (h264, av1)"),
        ("--seed", int, 7, "seed of the episode lengths and the batch starts"),
        ("--latency-ms", float, 10.0, -1.0, "the remote model's latency per request (-1: local "
                                             "only)")])
    args = finish(ap, ap.parse_args(argv), full, quick, ("episodes", "batches", "repeat"))
    if args.render:
        return publish(args, "lerobot", render)
    t_start = time.perf_counter()
    lengths = episode_lengths(args.episodes, args.seed)
    starts = from_timestamps(lengths)
    work = [{cam: row_times(b, starts) for cam in CAMERAS}
            for b in make_batches(lengths, args.batches, args.seed)]
    codecs, remote, notes = {}, {}, [TIME_NOTE]
    import av, fluxon_video, torchcodec.decoders  # noqa: E401, F401 - imports not timed
    for codec in args.codecs.split(","):
        shards = make_shards(args.data / "lerobot", codec, lengths)
        say(f"{codec}: the targets (ffprobe) and reference frames (the ffmpeg CLI)")
        ptimes = {cam: frame_times(p) for cam, p in shards.items()}
        targets = [{cam: (np.searchsorted(ptimes[cam], np.asarray(t) + TOL, "right") - 1).tolist()
                    for cam, t in by_cam.items()} for by_cam in work]
        refs = {cam: cli_reference(p, H, W, needed(t[cam] for t in targets))
                for cam, p in shards.items()}
        codecs[codec] = []
        for name in CONTENDERS:
            say(f"{codec}: {name}")
            passes = [run_pass(name, lambda: CONTENDERS[name](shards), work, targets, refs)
                      for _ in range(args.repeat)]
            codecs[codec].append(summary(name, passes))
        if args.latency_ms >= 0:
            from stores import PassModel

            model = PassModel(args.data / "lerobot-remote", "lerobot", shard_root(shards),
                              args.latency_ms)
            try:
                for name in REMOTE_ROWS:
                    say(f"{codec}, remote model: {name}")
                    passes = [run_pass(name, remote_opener(model, name, shards), work, targets,
                                       refs) for _ in range(args.repeat)]
                    remote.setdefault(codec, []).append(summary(name, passes))
            finally:
                model.stop()
        notes.append(f"{codec} shards: " + ", ".join(
            f"{p.stat().st_size / 2**20:.1f} MiB" for p in shards.values()))
    results = {**header("lerobot.py", argv, time.perf_counter() - t_start, args),
               "machine": machine(), "versions": versions(), "lengths": lengths,
               "batches": [[list(r) for r in b] for b in
                           make_batches(lengths, args.batches, args.seed)],
               "codecs": codecs, "remote": remote, "notes": notes}
    publish(args, "lerobot", render, results)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
