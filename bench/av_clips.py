"""A-V clips: a 2 s clip's frames and its audio on one clock, as audio-visual training reads them.

Each item is a random span [t, t + 2 s) of a video: the 16 frames on screen at t + k/8
(224x224) and the span's audio at 16 kHz mono. Contenders: fluxon_video
(``get_clip_played_in_range``, one reader per video, exact and seek-with-pre-roll
audio), torchcodec (``VideoDecoder`` + ``AudioDecoder``), PyAV (one container, a seek
and forward decode per stream, ``AudioResampler``) and decord's ``AVReader``.
Frames are checked against the ffmpeg CLI's (fluxon bit for bit); audio against the
CLI's whole-stream ``-af aresample=16000 -ac 1``, each peer at the start time it
reports: "exact", the sample shift that best lines it up, and the largest difference
there. Local files; one process, one thread per decoder.
"""

from __future__ import annotations

import io
import json
import math
import random
import subprocess
import sys
import time
import urllib.request
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from contenders import TorchcodecHandle, pyav_frames_at, pyav_open
from dataset import ffmpeg_make
from frames import CheckResult, cli_reference, frame_times, needed
from harness import (add_options, finish, header, machine, machine_line, median, num,
                     publish, scenario_parser, say, table, versions)

H = W = 224
RATE, FPS, FRAMES = 16000, 8, 16
SPAN_S = FRAMES / FPS
MATCH = 0.05  # audio "matches" at a shift when its mean difference is under 5% of its level
VIDEOS = {  # name: ffmpeg arguments after the inputs (seconds are set by --seconds)
    "h264_aac_720p.mp4": ("testsrc2=size=1280x720:rate=30", "aevalsrc=0.4*sin(2*PI*330*t)"
                          "+0.05*(random(0)-0.5)|0.4*sin(2*PI*440*t):s=48000",
                          ["-c:v", "libx264", "-preset", "veryfast", "-bf", "2", "-g", "60",
                           "-c:a", "aac", "-movflags", "+faststart"]),
    "vp9_opus_360p.webm": ("testsrc2=size=640x360:rate=25", "sine=f=330:r=48000",
                           ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8",
                            "-g", "50", "-c:a", "libopus"]),
}
EDIT_LIST = "h264_aac_editlist.mp4"  # the first, cut at a non-keyframe: an edit list


def make_videos(data: Path, seconds: float) -> list[Path]:
    out = []
    for name, (video, audio, args) in VIDEOS.items():
        path = data / f"{Path(name).stem}-{seconds:g}s{Path(name).suffix}"
        if not path.exists():
            say(f"making {path.name}")
        out.append(ffmpeg_make(path, "-f", "lavfi", "-i", video, "-f", "lavfi", "-i", audio,
                               "-t", str(seconds), *args))
    return [*out, ffmpeg_make(data / f"{Path(EDIT_LIST).stem}-{seconds:g}s.mp4", "-ss", "1.3",
                              "-i", str(out[0]), "-c", "copy")]


def probe(path: Path, stream: str, entries: str) -> dict:
    return json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", stream, "-show_entries", entries,
         "-of", "json", str(path)], capture_output=True, check=True).stdout)


class Truth:
    """What the CLI says of a file: frame times (ffprobe), the 16 kHz mono audio of the
    whole stream and its first sample's time, and the reference frames of the items."""

    def __init__(self, path: Path, items: list[float]) -> None:
        self.times = frame_times(path)
        info = probe(path, "a:0", "stream=time_base")["streams"][0]
        first = next(f for f in probe(path, "a:0", "frame=pts")["frames"] if "pts" in f)
        self.first = Fraction(first["pts"]) * Fraction(info["time_base"])
        raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-map", "0:a:0", "-af",
                              f"aresample={RATE}", "-ac", "1", "-f", "f32le", "-"],
                             capture_output=True, check=True).stdout
        self.audio = np.frombuffer(raw, np.float32)
        self.clips = [self.indices(t) for t in items]
        self.ref = cli_reference(path, H, W, needed(self.clips))

    def indices(self, start_s: float) -> list[int]:
        """The frame on screen at each sample time (the last whose pts <= t)."""
        when = start_s + np.arange(FRAMES) / FPS
        return (np.searchsorted(self.times, when + 1e-9, "right") - 1).tolist()

    def samples(self, start_s: float, count: int, shift: int = 0) -> np.ndarray:
        j = math.ceil((Fraction(start_s) - self.first) * RATE - Fraction(1, 10**6)) + shift
        out = np.zeros(count, np.float32)
        lo, hi = max(j, 0), min(j + count, self.audio.size)
        if hi > lo:
            out[lo - j:hi - j] = self.audio[lo:hi]
        return out


def audio_verdict(got: np.ndarray, start_s: float, truth: Truth) -> dict[str, Any]:
    """Exact; or the shift (samples, within 1/8 s) at which the audio matches the CLI's
    to within MATCH of its level, and the largest difference there; or no shift (None)
    when it matches nowhere (other samples: NaNs, another resampler's ripple, noise
    decoded differently)."""
    got = np.asarray(got, np.float32).reshape(-1)
    if np.array_equal(got, truth.samples(start_s, got.size)):
        return {"exact": True, "shift": 0, "max_diff": 0.0}
    if not np.isfinite(got).all() or not got.size:
        return {"exact": False, "shift": None, "max_diff": float("nan")}

    def error(shift: int) -> float:
        return float(np.abs(got[:4000] - truth.samples(start_s, got.size, shift)[:4000]).mean())

    best = min(range(-RATE // 8, RATE // 8 + 1), key=error)
    level = float(np.abs(got[:4000]).mean()) or 1.0
    diff = float(np.abs(got - truth.samples(start_s, got.size, best)).max())
    return {"exact": False, "shift": best if error(best) <= MATCH * level else None,
            "max_diff": diff}


class Fluxon:
    def __init__(self, source: Any, exact: bool) -> None:
        import fluxon_video as fv

        # a local path, or (remote) a reader the patcher opened through the agent and Redis
        self.reader = fv.open_video(source, H, W) if isinstance(source, Path) else source
        self.exact = exact

    def clip(self, t: float, indices: list[int]) -> tuple[np.ndarray, np.ndarray, float]:
        clip = self.reader.get_clip_played_in_range(t, t + SPAN_S, fps=FPS, sample_rate=RATE,
                                                    num_channels=1, exact_audio=self.exact)
        return clip.frames.data, clip.audio.data[0], clip.audio_start_s

    def close(self) -> None:
        self.reader.close()


def readable(source: Any) -> Any:
    """What PyAV and decord open: a path as a string, a download (bytes) as a file object."""
    return io.BytesIO(source) if isinstance(source, bytes) else str(source)


class Torchcodec:
    def __init__(self, source: Any) -> None:
        from torchcodec.decoders import AudioDecoder

        self.video = TorchcodecHandle(source, H, W, 1).decoder
        self.audio = AudioDecoder(source if isinstance(source, bytes) else str(source),
                                  sample_rate=RATE, num_channels=1)

    def clip(self, t: float, indices: list[int]) -> tuple[np.ndarray, np.ndarray, float]:
        frames = self.video.get_frames_played_at((t + np.arange(FRAMES) / FPS).tolist())
        samples = self.audio.get_samples_played_in_range(t, t + SPAN_S)
        return frames.data.numpy(), samples.data.numpy()[0], samples.pts_seconds

    def close(self) -> None:
        del self.video, self.audio


class PyAV:
    """One container; per clip a seek and forward decode of the video (the frames at the
    indices, converted by its reformatter) and of the audio (resampled to 16 kHz mono)."""

    def __init__(self, source: Any) -> None:
        import av

        self.av = av
        self.container = pyav_open(readable(source))
        self.vs, self.aus = self.container.streams.video[0], self.container.streams.audio[0]

    def clip(self, t: float, indices: list[int]) -> tuple[np.ndarray, np.ndarray, float]:
        frames = np.stack(pyav_frames_at(self.container, self.vs,
                                         (t + np.arange(FRAMES) / FPS).tolist(), H, W, 1e-9))
        self.container.seek(int(t / self.aus.time_base), stream=self.aus, backward=True)
        resampler = self.av.AudioResampler(format="flt", layout="mono", rate=RATE)
        chunks, first = [], None
        for frame in self.container.decode(self.aus):
            for out in resampler.resample(frame):
                first = out.time if first is None else first
                chunks.append(out.to_ndarray().reshape(-1))
            if frame.time > t + SPAN_S:
                break
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        skip = max(math.ceil((t - (first or t)) * RATE - 1e-6), 0)
        return frames, audio[skip:skip + round(SPAN_S * RATE)], (first or t) + skip / RATE

    def close(self) -> None:
        self.container.close()


class Decord:
    """decord's AVReader: the frames of the span and their audio, one slice."""

    def __init__(self, source: Any) -> None:
        import decord

        self.reader = decord.AVReader(readable(source), ctx=decord.cpu(0), sample_rate=RATE,
                                      mono=True, width=W, height=H)

    def clip(self, t: float, indices: list[int]) -> tuple[np.ndarray, np.ndarray, float]:
        audio, video = self.reader[indices[0]:indices[-1] + 1]
        frames = video.asnumpy()[np.asarray(indices) - indices[0]]
        samples = np.concatenate([a.asnumpy().reshape(-1) for a in audio])
        return frames, samples, float(self.reader._AVReader__video_reader.get_frame_timestamp(
            indices[0])[0]) if hasattr(self.reader, "_AVReader__video_reader") else t

    def close(self) -> None:
        del self.reader


CONTENDERS = {"fluxon": lambda p: Fluxon(p, True), "fluxon (exact_audio=False)":
              lambda p: Fluxon(p, False), "torchcodec": Torchcodec, "pyav": PyAV,
              "decord AVReader": Decord}


def run_pass(name: str, videos: list[Path], items: dict[Path, list[float]],
             truths: dict[Path, Truth], open_source: Any = None) -> dict[str, Any]:
    """Every item of every video. Locally one handle serves a video's items; with
    ``open_source`` (the remote model) each item opens its video anew, as a dataset's
    random clip per item does, and the open is timed with the clip."""
    check = CheckResult(exact_required=name.startswith("fluxon"))
    item_ms, audio, errors = [], [], []
    make = CONTENDERS["fluxon" if name in ("fluxon cold", "fluxon warm") else name]
    for path in videos:
        handle = None
        for t, clip in zip(items[path], truths[path].clips):
            t0 = time.perf_counter()
            try:
                if handle is None:
                    handle = make(open_source(name, path) if open_source else path)
                frames, samples, start = handle.clip(t, clip)
            except Exception as exc:  # noqa: BLE001 - a failing read is a finding
                errors.append(f"{path.name} @ {t:.2f} s: {type(exc).__name__}: {exc}"[:200])
                continue
            finally:
                if open_source and handle is not None:
                    handle.close()
                    handle = None
            item_ms.append((time.perf_counter() - t0) * 1e3)
            check.add(frames, clip, truths[path].ref)
            audio.append({"video": path.name, "t": t, "start_s": start,
                          **audio_verdict(samples, start, truths[path])})
        if handle is not None:
            handle.close()
    return {"contender": name, "item_ms": item_ms, "frames": check.as_dict(), "audio": audio,
            "errors": errors}


# Through the remote model (stores.PassModel): fluxon cold and warm through the agent and
# Redis, the peers downloading each item's file from the HTTP Range server (one GET: what
# their users do with a remote file; bytes, as torchcodec takes them).
REMOTE_ROWS = ("fluxon cold", "fluxon warm", "torchcodec", "pyav", "decord AVReader")


def remote_open(model: Any, row: str, path: Path) -> Any:
    """What a remote item opens: a reader of the pass's patcher, or the downloaded file."""
    if model.patcher is not None:
        return model.patcher.open_video_reader("av", path.name, H, W)
    with urllib.request.urlopen(model.url(path.name), timeout=60) as r:
        return r.read()


def render(results: dict) -> str:
    rows, notes = table_rows(results["passes"])
    remote_rows, _ = table_rows(results.get("remote", []))
    head = ["contender", "A-V clips/s", "ms/clip (median)", "frames", "audio exact",
            "audio shift (samples)", "audio max diff", "errors"]
    remote = ["", f"Through the remote-store model (L = {results['settings']['latency_ms']:g} ms "
              "per request, 50 MB/s per connection; each item opens its video: fluxon through "
              "the agent and Redis, cold (Redis flushed) and warm (a new patcher, Redis warm); "
              "the peers download the file, one GET, and decode the bytes):", "",
              table(head, remote_rows)] if remote_rows else []
    return "\n".join([
        "# A-V clips (bench/av_clips.py)", "",
        f"- Generated {results['generated']} by `{results['command']}`.",
        f"- Machine: {machine_line(results['machine'])}.",
        f"- Items: {results['items']} random 2 s spans of {len(results['videos'])} videos "
        f"({', '.join(results['videos'])}): 16 frames at 8 fps, 224x224, and the span's audio "
        "at 16 kHz mono; one process, one decoder thread; best of "
        f"{results['settings']['repeat']} passes.",
        "- Audio is checked against `ffmpeg -i IN -map 0:a:0 -af aresample=16000 -ac 1 -f f32le -` "
        "at each contender's own start time: exact items; where not exact, the shift within "
        "1/8 s at which its samples match the CLI's (mean difference under 5% of their level; "
        "\"no match\": nowhere), and the largest difference there.", "",
        "Local files (one handle per video for all its items):", "",
        table(head, rows), *remote, "",
        "Alignment on the edit-list file (per item, local):", "", *notes, ""])


def table_rows(passes: list[dict]) -> tuple[list[list[str]], list[str]]:
    rows, notes = [], []
    for p in passes:
        ms = median(p["item_ms"])
        a = p["audio"]
        exact = sum(x["exact"] for x in a)
        shifts = sorted({x["shift"] for x in a if not x["exact"] and x["shift"] is not None})
        shifts = [*map(str, shifts), *(["no match"] if any(
            x["shift"] is None for x in a) else [])]
        diffs = [x["max_diff"] for x in a if not x["exact"]]
        rows.append([p["contender"], num(1e3 / ms if ms else None), num(ms, 1),
                     p["frames"]["verdict"][:60], f"{exact}/{len(a)}",
                     ", ".join(shifts) or "–", num(max(diffs), 4) if diffs else "–",
                     str(len(p["errors"]))])
        edit = [x for x in a if x["video"].startswith(Path(EDIT_LIST).stem)]
        if edit:
            notes.append(f"- {p['contender']} on the edit-list file: "
                         + "; ".join(f"{x['t']:.2f} s: " + ("exact" if x["exact"] else
                                     f"shift {x['shift'] if x['shift'] is not None else 'none'}"
                                     f", max diff {num(x['max_diff'], 4)}") for x in edit))
        notes += [f"- {p['contender']}: {e}" for e in p["errors"][:3]]
    return rows, notes


def main(argv: list[str] | None = None) -> None:
    ap = scenario_parser("av_clips.py", __doc__, "3 items per video, 12 s videos",
                         "av.md and av.json", render=False)
    full, quick = add_options(ap, [
        ("--items", int, 8, 3, "random spans per video"),
        ("--seconds", float, 30, 12, "video length"),
        ("--repeat", int, 2, "passes per contender"),
        ("--latency-ms", float, 10.0, "the remote model's latency per request (-1: local "
                                      "only)")])
    args = finish(ap, ap.parse_args(argv), full, quick, ("items", "repeat"))
    t0 = time.perf_counter()
    videos = make_videos(args.data / "av", args.seconds)
    rng = random.Random(7)
    items = {p: [round(rng.uniform(0.0, args.seconds - 1.4 - SPAN_S - 0.5), 3)
                 for _ in range(args.items)] for p in videos}
    say("reference frames and audio from the ffmpeg CLI")
    truths = {p: Truth(p, items[p]) for p in videos}
    def best_of(name: str, before: Any = None, open_source: Any = None) -> dict[str, Any]:
        say(name)
        runs = []
        for _ in range(args.repeat):
            if before is not None:
                before(name)
            runs.append(run_pass(name, videos, items, truths, open_source))
        return min(runs, key=lambda r: median(r["item_ms"]) or float("inf"))

    passes = [best_of(name) for name in CONTENDERS]
    remote = []
    if args.latency_ms >= 0:
        from stores import PassModel

        model = PassModel(args.data / "av-remote", "av", args.data / "av", args.latency_ms)
        try:
            remote = [best_of(row, model.start_pass, lambda row, path: remote_open(
                model, row, path)) for row in REMOTE_ROWS]
        finally:
            model.stop()
    results = {**header("av_clips.py", argv, time.perf_counter() - t0, args),
               "machine": machine(), "versions": versions(), "items": sum(map(len, items.values())),
               "videos": [p.name for p in videos], "passes": passes, "remote": remote}
    publish(args, "av", render, results)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
