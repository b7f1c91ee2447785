"""Small LeRobot v3 datasets written as LeRobot writes them, for the tests.

Each episode of each camera is encoded on its own by the ffmpeg CLI (a lavfi
source, a different stretch per episode) and the episodes of a shard are
joined with the concat demuxer and ``-c copy``, as LeRobot concatenates its
episode videos; ``from_timestamp`` is the duration of the episodes before in
the shard. Row timestamps are float32 (``frame_index / fps`` rounded to
float32), as LeRobot's parquet holds them. Tables are written with pyarrow
in LeRobot's columns: data rows, per-episode metadata (with a stats column
the reader must skip), tasks. An image camera keeps each row's PNG (by the
ffmpeg CLI) in the data table, as Hugging Face's ``struct<bytes, path>``.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FPS = 30
# camera -> (height, width); LeRobot's keys
CAMERAS = {"observation.images.front": (96, 128), "observation.images.wrist": (64, 64)}
# image cameras: each row's frame a PNG in the data table (LeRobot's dtype "image")
IMAGE_CAMERAS = {"observation.images.top": (40, 56)}
# depth cameras (Layout.depth): 12-bit codes, a lossless gray12le HEVC as LeRobot encodes
# them, with LeRobot's default quantizer but linear (written into the feature's info)
DEPTH_CAMERAS = {"observation.images.depth": (24, 40)}
DEPTH_QUANTIZER = {"video.depth_min": 0.2, "video.depth_max": 6.0, "video.shift": 3.5,
                   "video.use_log": False}
DEPTH_CODEC = ["-c:v", "libx265", "-x265-params", "lossless=1:keyint=2:log-level=error",
               "-pix_fmt", "gray12le"]
CODECS = {
    # LeRobot's default: AV1 (libsvtav1), a keyframe every 2 frames
    "av1": ["-c:v", "libsvtav1", "-preset", "12", "-g", "2", "-pix_fmt", "yuv420p"],
    "h264": ["-c:v", "libx264", "-preset", "veryfast", "-g", "12", "-bf", "2",
             "-pix_fmt", "yuv420p"],
}
TASKS = ["push the block", "stack the cups"]


@dataclass(frozen=True)
class Layout:
    """Episode lengths and which shard file each episode goes to, per table."""

    lengths: tuple[int, ...] = (14, 9, 11, 8, 12)
    data_files: tuple[int, ...] = (0, 0, 0, 1, 1)
    # per camera: the video file of each episode (cameras need not agree)
    video_files: tuple[tuple[int, ...], ...] = ((0, 0, 0, 1, 1), (0, 0, 0, 0, 0))
    # LeRobot's language annotation columns (language_of gives each row's)
    language: bool = False
    # depth cameras, their episodes in the first camera's video files
    depth: bool = False


def language_of(index: int) -> dict[str, list]:
    """Row ``index``'s language annotations (LeRobot's two columns), as LeRobot
    hands them out: lists of records, ``tool_calls`` JSON parsed."""
    persistent = [{"role": "assistant", "content": f"subtask {index // 4}", "style": "subtask",
                   "timestamp": float(np.float32(index // 4 * 4 / FPS)), "camera": None,
                   "tool_calls": None}] if index % 3 else []
    events = [{"role": "user", "content": f"stop {index}", "style": "interjection",
               "camera": None, "tool_calls": [{"name": "halt", "args": {"row": index}}]}
              ] if index % 5 == 0 else []
    return {"language_persistent": persistent, "language_events": events}


def language_columns(indices: np.ndarray) -> dict:
    """The two language columns of these rows, typed as LeRobot writes them (JSON
    ``tool_calls``: Arrow's json type, built from text, which pyarrow cannot
    convert from Python values directly)."""
    import pyarrow as pa

    json_type = pa.json_()

    def record(fields: list[tuple[str, object]]) -> tuple[object, object]:
        stored = pa.list_(pa.struct([pa.field(n, pa.list_(pa.string()) if n == "tool_calls"
                                              else t) for n, t in fields]))
        final = pa.list_(pa.struct([pa.field(n, pa.list_(json_type) if n == "tool_calls"
                                             else t) for n, t in fields]))
        return stored, final

    common = [("role", pa.string()), ("content", pa.string()), ("style", pa.string())]
    tail = [("camera", pa.string()), ("tool_calls", None)]
    types = {"language_persistent": record([*common, ("timestamp", pa.float32()), *tail]),
             "language_events": record([*common, *tail])}
    out = {}
    for column, (stored, final) in types.items():
        values = [[{**r, "tool_calls": None if r["tool_calls"] is None
                    else [json.dumps(c) for c in r["tool_calls"]]}
                   for r in language_of(int(i))[column]] for i in indices]
        out[column] = pa.array(values, stored).cast(final)
    return out


def stream_duration_s(path: Path) -> float:
    """The video stream's duration by ffprobe (LeRobot's get_video_duration_in_s)."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=duration", "-of", "csv=p=0", str(path)],
                         check=True, capture_output=True, text=True).stdout
    return float(out.strip())


def write_pngs(work: Path, cam_no: int, episode: int, h: int, w: int, n: int) -> list[bytes]:
    """An episode's frames of an image camera, each a PNG by the ffmpeg CLI."""
    pattern = work / f"image{cam_no}_{episode}_%03d.png"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
                    f"testsrc=size={w}x{h}:rate={FPS},trim=start_frame={5 * episode}:"
                    f"end_frame={5 * episode + n}", "-start_number", "0", str(pattern)],
                   check=True, capture_output=True)
    return [(work / f"image{cam_no}_{episode}_{k:03d}.png").read_bytes() for k in range(n)]


def write_dataset(root: Path, codec: str, layout: Layout = Layout()) -> Path:
    """A v3 dataset at ``root`` (returned); cached: an existing info.json is kept."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if (root / "meta" / "info.json").exists():
        return root
    work = root / "_episodes"
    work.mkdir(parents=True)
    n_eps = len(layout.lengths)
    starts = np.concatenate([[0], np.cumsum(layout.lengths)]).astype(int)
    episodes: dict[str, list] = {
        "episode_index": list(range(n_eps)), "tasks": [], "length": list(layout.lengths),
        "data/chunk_index": [0] * n_eps, "data/file_index": list(layout.data_files),
        "dataset_from_index": starts[:-1].tolist(), "dataset_to_index": starts[1:].tolist(),
        "stats/action/mean": [[0.5, 0.5]] * n_eps,
    }
    cameras = [*CAMERAS.items(), *(DEPTH_CAMERAS.items() if layout.depth else ())]
    for cam_no, (camera, (h, w)) in enumerate(cameras):
        depth = camera in DEPTH_CAMERAS
        files = layout.video_files[0 if depth else cam_no]
        from_ts, to_ts = [], []
        for shard in sorted(set(files)):
            members = [e for e in range(n_eps) if files[e] == shard]
            parts, elapsed = [], 0.0
            for e in members:
                part = work / f"{cam_no}_{e}.mp4"
                source = (f"testsrc2=size={w}x{h}:rate={FPS},trim=start_frame={7 * e + cam_no}:"
                          f"end_frame={7 * e + cam_no + layout.lengths[e]},setpts=PTS-STARTPTS")
                if depth:  # every code different per pixel and per frame
                    source = (f"nullsrc=s={w}x{h}:r={FPS},trim=end_frame={layout.lengths[e]},"
                              f"format=gray12le,geq=lum='mod(X*37+Y*101+(N+{9 * e})*53\\,4096)'")
                # a movie timescale of the track's: the concat demuxer places the next
                # episode at this file's duration, which the default (ms) would round
                subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
                                source, *(DEPTH_CODEC if depth else CODECS[codec]), "-r", str(FPS),
                                "-video_track_timescale",
                                "15360", "-movie_timescale", "15360", str(part)],
                               check=True, capture_output=True)
                parts.append((e, part))
            listing = work / f"{cam_no}_{shard}.txt"
            listing.write_text("".join(f"file '{p}'\n" for _, p in parts))
            out = root / "videos" / camera / "chunk-000" / f"file-{shard:03d}.mp4"
            out.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "concat", "-safe", "0",
                            "-i", str(listing), "-c", "copy", str(out)], check=True)
            for e, part in parts:  # LeRobot's rule: the episodes' stream durations summed
                from_ts.append((e, elapsed))
                elapsed += stream_duration_s(part)
                to_ts.append((e, elapsed))
        episodes[f"videos/{camera}/chunk_index"] = [0] * n_eps
        episodes[f"videos/{camera}/file_index"] = list(files)
        episodes[f"videos/{camera}/from_timestamp"] = [t for _, t in sorted(from_ts)]
        episodes[f"videos/{camera}/to_timestamp"] = [t for _, t in sorted(to_ts)]
    task_of = [e % len(TASKS) for e in range(n_eps)]
    episodes["tasks"] = [[TASKS[t]] for t in task_of]

    images = {cam: [write_pngs(work, cam_no, e, h, w, layout.lengths[e]) for e in range(n_eps)]
              for cam_no, (cam, (h, w)) in enumerate(IMAGE_CAMERAS.items())}
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rng = np.random.default_rng(0)
    for shard in sorted(set(layout.data_files)):
        members = [e for e in range(n_eps) if layout.data_files[e] == shard]
        frame_index = np.concatenate([np.arange(layout.lengths[e]) for e in members])
        ep_index = np.concatenate([np.full(layout.lengths[e], e) for e in members])
        index = np.concatenate([np.arange(starts[e], starts[e + 1]) for e in members])
        n = len(index)
        state = rng.standard_normal((n, 2)).astype(np.float32)
        table = pa.table({
            "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(state.ravel()), 2),
            "action": pa.FixedSizeListArray.from_arrays(pa.array(state.ravel() * 2), 2),
            "timestamp": pa.array((frame_index / FPS).astype(np.float32)),
            "frame_index": pa.array(frame_index.astype(np.int64)),
            "episode_index": pa.array(ep_index.astype(np.int64)),
            "index": pa.array(index.astype(np.int64)),
            "task_index": pa.array(np.array([task_of[e] for e in ep_index], np.int64)),
            **{cam: pa.array([{"bytes": png, "path": f"frame-{k:06d}.png"}
                              for e in members for k, png in enumerate(pngs[e])], image_type)
               for cam, pngs in images.items()},
            **(language_columns(index) if layout.language else {}),
        })
        out = root / "data" / "chunk-000" / f"file-{shard:03d}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out)
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.table(episodes), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    pq.write_table(pa.table({"task_index": pa.array(range(len(TASKS)), pa.int64()),
                             "task": TASKS}), root / "meta" / "tasks.parquet")
    features = {
        "observation.state": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
        "action": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
        **{cam: {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"],
                 "info": {"video.codec": codec, "video.fps": FPS}}
           for cam, (h, w) in CAMERAS.items()},
        **{cam: {"dtype": "image", "shape": [h, w, 3], "names": ["height", "width", "channels"]}
           for cam, (h, w) in IMAGE_CAMERAS.items()},
        **{cam: {"dtype": "video", "shape": [h, w, 1], "names": ["height", "width", "channels"],
                 "info": {"is_depth_map": True, "depth_unit": "mm", "video.codec": "hevc",
                          "video.pix_fmt": "gray12le", **DEPTH_QUANTIZER}}
           for cam, (h, w) in (DEPTH_CAMERAS.items() if layout.depth else ())},
        **{k: {"dtype": "int64", "shape": [1], "names": None}
           for k in ("frame_index", "episode_index", "index", "task_index")},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        **({k: {"dtype": "language", "shape": [1], "names": None}
            for k in ("language_persistent", "language_events")} if layout.language else {}),
    }
    info = {"codebase_version": "v3.0", "robot_type": "test", "total_episodes": n_eps,
            "total_frames": int(starts[-1]), "total_tasks": len(TASKS), "chunks_size": 1000,
            "fps": FPS, "splits": {"train": f"0:{n_eps}"},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            "features": features}
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    for part in work.iterdir():
        part.unlink()
    work.rmdir()
    return root
