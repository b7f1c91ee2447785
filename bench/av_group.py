"""The A-V group (the av suite; was bench/av_clips.py): a 2 s clip's frames and its audio on
one clock, as audio-visual training reads them.

Each item is a random span [t, t + 2 s) of a video: the 16 frames on screen at t + k/8
(224x224) and the span's audio at 16 kHz mono. Contenders: fluxon_video
(``get_clip_played_in_range``, one reader per video, exact and seek-with-pre-roll
audio), torchcodec (``VideoDecoder`` + ``AudioDecoder``), PyAV (one container, a seek
and forward decode per stream, ``AudioResampler``) and decord's ``AVReader``.
Frames are checked against the ffmpeg CLI's (fluxon bit for bit); audio against the
CLI's whole-stream ``-af aresample=16000 -ac 1``, each peer at the start time it
reports: "exact", the sample shift that best lines it up, and the largest difference
there. "av-clips": the local files, one handle per video for all its items;
"av-clips-open": each item opens its video through the remote-store model
(stores.PassModel). One process, one thread per decoder.
"""

from __future__ import annotations

import io
import json
import math
import random
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from cases import PREROLL_AUDIO, Case
from contenders import TorchcodecHandle, pyav_frames_at, pyav_open, unavailable
from dataset import ffmpeg_make
from frames import CheckResult, cli_reference, frame_times, needed
from harness import (Pass, error_text, grouped, header, machine, module_versions, say,
                     versions)
from tally import av_note

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


PEER_READERS = {"torchcodec": Torchcodec, "pyav": PyAV, "decord": Decord}


def reader_of(case: Case) -> Callable[[Any], Any]:
    """What opens a source for the case's items."""
    if case.fluxon:
        return lambda source: Fluxon(source, exact=case.access != PREROLL_AUDIO)
    return PEER_READERS[case.family]


def run_pass(case: Case, videos: list[Path], items: dict[Path, list[float]],
             truths: dict[Path, Truth], open_source: Any = None) -> dict[str, Any]:
    """Every item of every video. Locally one handle serves a video's items; with
    ``open_source`` (the remote model) each item opens its video anew, as a dataset's
    random clip per item does, and the open is timed with the clip."""
    make = reader_of(case)
    one = Pass({"contender": case.label()}, CheckResult(exact_required=case.fluxon))
    assert one.check is not None
    audio = []
    for path in videos:
        handle = None
        for t, clip in zip(items[path], truths[path].clips):
            started = one.clock()
            try:
                if handle is None:
                    handle = make(open_source(path) if open_source else path)
                frames, samples, start = handle.clip(t, clip)
            except Exception as exc:  # noqa: BLE001 - a failing read is a finding
                one.errors.append(f"{path.name} @ {t:.2f} s: {error_text(exc)}")
                continue
            finally:
                if open_source and handle is not None:
                    handle.close()
                    handle = None
            one.took(started)
            one.item_videos.append(path.name)
            one.check.add(frames, clip, truths[path].ref)
            audio.append({"video": path.name, "t": t, "start_s": start,
                          **audio_verdict(samples, start, truths[path])})
        if handle is not None:
            handle.close()
    return {**one.result({}), "audio": audio}


def remote_open(model: Any, path: Path) -> Any:
    """What a remote item opens: a reader of the pass's patcher, or the downloaded file
    (one GET: what their users do with a remote file; bytes, as torchcodec takes them)."""
    if model.patcher is not None:
        return model.patcher.open_video_reader("av", path.name, H, W)
    with urllib.request.urlopen(model.url(path.name), timeout=60) as r:
        return r.read()


class AvGroup:
    """The av suite's cases: the local ones on the files, then the remote ones through one
    stores.PassModel (restarted at each latency); each case's ``repeat`` passes one after
    another, a remote pass counted by the origin's servers."""

    def __init__(self, cases: list[Case], settings: dict[str, Any], data: Path) -> None:
        self.cases, self.s, self.data = cases, settings, data
        self.skipped: dict[str, str] = {}
        self.rows: list[dict[str, Any]] = []

    def working(self) -> list[Case]:
        """The cases whose contender imports here (the others skipped, with a note)."""
        for peer in dict.fromkeys(c.family for c in self.cases if not c.fluxon):
            why = unavailable(peer)
            if why:
                self.skipped[peer] = why
                say(f"note: {peer} skipped: {why}")
        return [c for c in self.cases if c.family not in self.skipped]

    def passes(self, case: Case, videos: list[Path], items: dict[Path, list[float]],
               truths: dict[Path, Truth], model: Any = None) -> None:
        from stores import Counters

        say(case.key())
        passes = []
        for _ in range(self.s["repeat"]):
            if model is None:
                passes.append(run_pass(case, videos, items, truths))
                continue
            model.start_pass(case.label())  # fluxon cold: Redis flushed; a new patcher
            counters = Counters(model.urls(), "fluxon" if case.fluxon else "peer")
            before = counters.start()
            result = run_pass(case, videos, items, truths, lambda p: remote_open(model, p))
            passes.append({**result, "server": counters.since(before)})
        self.rows.append({"case": asdict(case), "row": case.label(), "passes": passes})

    def run(self, argv: list[str]) -> dict[str, Any]:
        from stores import PassModel

        started, s = time.perf_counter(), self.s
        cases = self.working()
        seconds = float(s["seconds"])
        videos = make_videos(self.data / "av", seconds)
        rng = random.Random(s["seed"])
        items = {p: [round(rng.uniform(0.0, seconds - 1.4 - SPAN_S - 0.5), 3)
                     for _ in range(s["items"])] for p in videos}
        say("reference frames and audio from the ffmpeg CLI")
        truths = {p: Truth(p, items[p]) for p in videos}
        for case in (c for c in cases if c.store == "local"):
            self.passes(case, videos, items, truths)
        remote = grouped([c for c in cases if c.store != "local"], lambda c: c.latency_ms)
        if remote:
            work = self.data / "av-remote"
            work.mkdir(parents=True, exist_ok=True)
            model = PassModel(work, "av", self.data / "av", next(iter(remote)))
            try:
                for k, (latency, group) in enumerate(remote.items()):
                    if k:
                        model.set_latency(latency)
                    for case in group:
                        self.passes(case, videos, items, truths, model)
            finally:
                model.stop()
        found = {**versions(), **module_versions("torchcodec", "av", "decord",
                                                 missing="not installed")}
        return {
            **header("matrix.py", argv, time.perf_counter() - started, SimpleNamespace(**s)),
            "conditions": {"machine": machine(), "versions": found,
                           "store": {"latencies_ms": list(remote),
                                     "bandwidth_mbps_per_connection": 50.0} if remote else None},
            "items": sum(map(len, items.values())), "av_videos": [p.name for p in videos],
            "rows": self.rows, "skipped": self.skipped,
            "notes": [av_note([p.name for p in videos], s["items"])]}
