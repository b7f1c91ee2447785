"""Reference frames from the ffmpeg CLI (``-fps_mode passthrough``,
``scale=W:H:flags=bilinear,format=rgb24``: fluxon_video's libswscale call, so fluxon must
match bit for bit) and the frame check. Peers scale with other code, so theirs are checked
for *identity*: frame ``i`` closer to reference ``i`` than to ``i ± 1``, and at most
``MAX_MEAN_ABS_DIFF`` from it in mean absolute difference."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

K = TypeVar("K")

MAX_MEAN_ABS_DIFF = 3.0
# Identity is decided on a subsampled frame of about this many pixels (a small reference).
CHECK_PIXELS = 16 * 1024


def digest(frame: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(frame).data, digest_size=16).digest()


def subsample(frame: np.ndarray) -> np.ndarray:
    """Every s-th pixel in both directions, so identity checks stay cheap at 720p."""
    h, w = frame.shape[:2]
    step = max(1, int((h * w / CHECK_PIXELS) ** 0.5))
    return np.ascontiguousarray(frame[::step, ::step])


@dataclass
class Reference:
    """Digests and subsampled pixels of the reference frames a workload needs."""

    indices: np.ndarray    # sorted frame indices held
    digests: list[bytes]
    small: np.ndarray      # (len(indices), h', w', 3) subsampled frames
    frames_decoded: int    # frames the CLI produced from the whole file

    def position(self, index: int) -> int | None:
        pos = int(np.searchsorted(self.indices, index))
        return pos if pos < len(self.indices) and self.indices[pos] == index else None

    def save(self, path: Path) -> None:
        np.savez(path, indices=self.indices, small=self.small,
                 digests=np.frombuffer(b"".join(self.digests), np.uint8).reshape(-1, 16),
                 frames_decoded=self.frames_decoded)

    @classmethod
    def load(cls, path: Path) -> Reference:
        with np.load(path) as data:
            return cls(data["indices"], [bytes(d) for d in data["digests"]], data["small"],
                       int(data["frames_decoded"]))


def needed(clips: Iterable[Sequence[int]]) -> list[int]:
    """The frames the checks compare against: each target and its two neighbours."""
    out: set[int] = set()
    for clip in clips:
        for i in clip:
            out.update((i - 1, i, i + 1))
    return sorted(i for i in out if i >= 0)


def frame_times(path: Path) -> np.ndarray:
    """Every frame's pts in seconds, sorted (ffprobe: the oracle of frame-at-time targets)."""
    out = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
         "stream=time_base:frame=pts,best_effort_timestamp", "-of", "json", str(path)],
        capture_output=True, check=True).stdout)
    base = Fraction(out["streams"][0]["time_base"])
    return np.array(sorted(float(int(f.get("pts", f.get("best_effort_timestamp"))) * base)
                           for f in out["frames"]))


def cli_reference(path: Path, height: int, width: int, indices: Sequence[int]) -> Reference:
    """Decode the whole file with the ffmpeg CLI, keeping digests of ``indices`` only."""
    wanted = np.asarray(sorted(set(indices)), dtype=np.int64)
    frame_bytes = height * width * 3
    proc = subprocess.Popen(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path), "-map", "0:v:0",
         "-vf", f"scale={width}:{height}:flags=bilinear,format=rgb24",
         "-fps_mode", "passthrough", "-f", "rawvideo", "-"],
        stdout=subprocess.PIPE)
    assert proc.stdout is not None
    digests, small, kept, n = [], [], [], 0
    want = set(wanted.tolist())
    while True:
        raw = proc.stdout.read(frame_bytes)
        if len(raw) < frame_bytes:
            break
        if n in want:
            frame = np.frombuffer(raw, np.uint8).reshape(height, width, 3)
            kept.append(n)
            digests.append(digest(frame))
            small.append(subsample(frame))
        n += 1
    if proc.wait() != 0:
        raise RuntimeError(f"ffmpeg failed to decode {path}")
    return Reference(np.asarray(kept, dtype=np.int64), digests, np.stack(small), n)


def references(jobs: dict[K, tuple[Path, int, int, Iterable[int]]],
               workers: int | None = None) -> dict[K, Reference]:
    """``cli_reference`` of every job (path, height, width, indices), decoded side by side."""
    def one(key: K) -> Reference:
        path, height, width, indices = jobs[key]
        return cli_reference(path, height, width, sorted(set(indices)))

    with ThreadPoolExecutor(workers or os.cpu_count() or 2) as pool:
        return dict(zip(jobs, pool.map(one, jobs)))


def reference_files(items: Iterable[tuple[K, Any, int, int, Iterable[Sequence[int]]]],
                    directory: Path, notes: list[str]) -> dict[K, Path]:
    """The references of a plan's items (key, a dataset.Video, height, width, clips), one
    per key, of the frames its items' checks need, saved under ``directory``: made once per
    file, size and set of frames (a note where ffprobe and the CLI count frames apart)."""
    jobs: dict[K, tuple[Any, int, int, set[int]]] = {}
    for key, video, height, width, clips in items:
        jobs.setdefault(key, (video, height, width, set()))[3].update(needed(clips))
    directory.mkdir(parents=True, exist_ok=True)
    paths, todo = {}, {}
    for key, (video, height, width, indices) in jobs.items():
        wanted = sorted(indices)
        tag = hashlib.sha1(f"{video.spec.spec_hash()}:{wanted}".encode()).hexdigest()[:12]
        paths[key] = directory / f"{video.name}-{height}x{width}-{tag}.npz"
        if not paths[key].exists():
            todo[key] = (video.path, height, width, wanted)
    for key, ref in references(todo).items():
        notes += filter(None, [count_note(jobs[key][0].name, jobs[key][0].frames, ref)])
        ref.save(paths[key].with_suffix(".part.npz"))
        os.replace(paths[key].with_suffix(".part.npz"), paths[key])
    return paths


def count_note(name: str, packets: int, ref: Reference) -> str | None:
    """A note when ffprobe's packet count and the frames the CLI decodes disagree."""
    if ref.frames_decoded == packets:
        return None
    return (f"{name}: ffprobe counts {packets} packets, the ffmpeg CLI decodes "
            f"{ref.frames_decoded} frames")


@dataclass
class CheckResult:
    """What the frame check found for one contender: ``wrong`` (not the frame asked for, or
    not bit-exact where required) and ``off`` (the right frame, too far off) flag it."""

    exact_required: bool
    frames: int = 0
    bit_exact: int = 0
    worst_mean_abs_diff: float = 0.0
    wrong: list[str] = field(default_factory=list)
    off: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.wrong and not self.off

    def verdict(self) -> str:
        if self.wrong:
            return "WRONG: " + self.wrong[0]
        if self.off:
            return "OFF: " + self.off[0]
        if self.exact_required or self.bit_exact == self.frames:
            return "bit-exact"
        return f"ok (mad<={self.worst_mean_abs_diff:.2f})"

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok, "verdict": self.verdict()}

    def absorb(self, other: CheckResult, prefix: str = "") -> None:
        """Add another check's counts and findings (named with ``prefix``) to this one."""
        self.frames += other.frames
        self.bit_exact += other.bit_exact
        self.worst_mean_abs_diff = max(self.worst_mean_abs_diff, other.worst_mean_abs_diff)
        self.wrong += [prefix + w for w in other.wrong]
        self.off += [prefix + o for o in other.off]
        del self.wrong[5:], self.off[5:]

    def add(self, frames: np.ndarray, indices: Sequence[int], ref: Reference) -> None:
        """Check ``frames[k]`` against reference frame ``indices[k]`` (and its neighbours)."""
        if len(frames) != len(indices):
            self.wrong.append(f"{len(frames)} frames returned for {len(indices)} indices")
            return
        for frame, index in zip(frames, indices):
            self.frames += 1
            pos = ref.position(index)
            if pos is None:
                raise KeyError(f"frame {index} is not in the reference")
            if ref.small.shape[1:] != subsample(frame).shape:
                self.wrong.append(f"frame {index} has shape {frame.shape}")
                return
            if digest(frame) == ref.digests[pos]:
                self.bit_exact += 1
            elif self.exact_required:
                self.wrong.append(f"frame {index} differs from the ffmpeg CLI")
            else:
                self._identity(subsample(frame), index, ref)
        del self.wrong[5:], self.off[5:]

    def _identity(self, small: np.ndarray, index: int, ref: Reference) -> None:
        own = _mad(small, ref.small[ref.position(index)])
        self.worst_mean_abs_diff = max(self.worst_mean_abs_diff, own)
        for neighbour in (index - 1, index + 1):
            pos = ref.position(neighbour)
            if pos is not None and _mad(small, ref.small[pos]) < own:
                self.wrong.append(f"frame {index} looks like frame {neighbour}")
                return
        if own > MAX_MEAN_ABS_DIFF:
            self.off.append(f"frame {index} is {own:.1f} off the reference in mean abs diff "
                            f"(> {MAX_MEAN_ABS_DIFF}; the right frame, another scaler?)")


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b).mean())
