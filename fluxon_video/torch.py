"""PyTorch integration: a clip dataset, a same-video batch sampler, loader stats.

Optional: ``pip install 'fluxon-video[torch]'``. ``import fluxon_video`` never
imports torch; this module does.

- :class:`VideoClipDataset`, map-style: item ``i`` is a clip of video
  ``relpaths[i // clips_per_video]``, sampled by frame count (``clip_len``,
  ``stride``) or by time (``clip_duration_s`` at ``fps``, exact on variable
  frame rates), the same clip for the same ``(seed, epoch, i)``. Items are
  dicts: ``frames`` (uint8 tensor, ``(T, H, W, C)`` or ``(T, C, H, W)``,
  sharing memory with the decoded array), ``relpath``, ``indices``,
  ``timestamps_s``, and with ``audio`` (an :class:`~fluxon_video.AudioSpec`,
  time-based clips) ``audio`` (float32 ``(C, round(clip_duration_s * R))``),
  ``audio_start_s`` and ``sample_rate``: the samples of the clip's span on
  the frames' clock. Each process reads through its own reader pool, built on
  first use; the dataset pickles as configuration, so it works under fork,
  spawn and forkserver.
- When the DataLoader fetches a batch, the dataset reads it with one
  ``read_many_numpy_with_stats`` call (``__getitems__``): clips of one video
  are one native decode, distinct videos decode on parallel threads.
  :class:`SameVideoBatchSampler` makes batches of ``clips_per_video`` clips of
  the same video, which is where that pays most.
- :class:`StatsCollate` and :class:`LoaderStats`: each batch carries its
  worker's cumulative :class:`~fluxon_video.FluxonFsProcessStats`, and the
  training loop adds them up per epoch, so nobody threads per-read stats
  through batches by hand.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

try:
    import torch
    from torch.utils.data import Dataset, Sampler, default_collate, get_worker_info
except ImportError as exc:  # pragma: no cover - exercised in a process without torch
    raise ImportError(
        "fluxon_video.torch needs PyTorch, which is not installed: "
        "pip install 'fluxon-video[torch]' (for the CPU build, install torch first from "
        "the CPU wheel index)") from exc

from fluxon_video.audio import AudioSamples, AudioSpec
from fluxon_video.damage import check_policy
from fluxon_video.metadata import FluxonFsVideoMetadata, indices_at_times
from fluxon_video.patcher import FluxonFsPatcher
from fluxon_video.pool import FluxonFsVideoReaderPool, FluxonFsVideoReadRequest
from fluxon_video.resize import check_interpolation, check_resize
from fluxon_video.stats import FluxonFsProcessStats
from fluxon_video.validation import (Threads, output_fits, positive_int, stream_choice,
                                     thread_count)

__all__ = ["LoaderStats", "SameVideoBatchSampler", "StatsCollate", "VideoClipDataset"]

LAYOUTS = ("THWC", "TCHW")


class VideoClipDataset(Dataset):
    """Random clips of videos in one export, read through FluxonFS.

    ``source`` is a :class:`FluxonFsPatcher` (a pool of ``max_readers``
    readers is made in each process) or a :class:`FluxonFsVideoReaderPool`.
    Give either ``clip_len`` and ``stride`` (frames), or ``clip_duration_s``
    and ``fps`` (``round(clip_duration_s * fps)`` frames, the frame displayed
    at each sample time). A video shorter than a clip repeats its last frame.
    ``height``/``width`` None follow the reader's rules (native size, kept
    aspect); ``set_epoch`` changes the clips drawn. ``on_damage`` is the
    readers' damaged-stream policy (with a patcher as source; a given pool
    keeps its own). ``stream_index`` is the container stream read in every
    video (None: the default rule's, see ``open_video_reader``). ``resize``
    and ``interpolation`` as for ``open_video_reader``: ``"shorter_side_crop"``
    or ``"letterbox"`` give every clip ``height`` x ``width`` whatever its
    video's aspect ratio, so videos of mixed shapes batch together. ``audio``
    (time-based clips only) adds each clip's audio, ``round(clip_duration_s *
    rate)`` samples from the clip's start; give ``AudioSpec(sample_rate=...,
    channels=...)`` so clips of videos with different audio batch together.
    """

    def __init__(self, source: FluxonFsPatcher | FluxonFsVideoReaderPool, export_name: str,
                 relpaths: Sequence[str], *, clip_len: int = 16, stride: int = 1,
                 clip_duration_s: float | None = None, fps: float | None = None,
                 clips_per_video: int = 1, height: int | None = None, width: int | None = None,
                 num_threads: Threads = 1, layout: str = "THWC", seed: int = 0,
                 max_readers: int = 16, autorotate: bool = False,
                 on_damage: str = "error", stream_index: int | None = None,
                 resize: str = "stretch", interpolation: str = "bilinear",
                 audio: AudioSpec | None = None) -> None:
        if isinstance(source, FluxonFsVideoReaderPool):
            self._patcher, self._given_pool = None, source
        elif isinstance(source, FluxonFsPatcher):
            self._patcher, self._given_pool = source, None
        else:
            raise TypeError(f"source must be a FluxonFsPatcher or FluxonFsVideoReaderPool, "
                            f"got {type(source).__name__}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if (clip_duration_s is None) != (fps is None):
            raise ValueError("time-based clips need both clip_duration_s and fps")
        if clip_duration_s is not None and not (0 < clip_duration_s < math.inf
                                                and 0 < fps < math.inf):  # type: ignore[operator]
            raise ValueError(f"clip_duration_s and fps must be finite positive numbers, got "
                             f"{clip_duration_s!r} and {fps!r}")
        if isinstance(relpaths, (str, bytes)):
            raise TypeError(f"relpaths must be a list of relpaths, got the string {relpaths!r}: "
                            f"pass [{relpaths!r}] for one video")
        self.export_name = export_name
        self.relpaths = list(relpaths)
        if not self.relpaths:
            raise ValueError("relpaths is empty")
        self.clip_len = positive_int("clip_len", clip_len)
        self.stride = positive_int("stride", stride)
        self.clip_duration_s = clip_duration_s
        self.fps = fps
        self.clips_per_video = positive_int("clips_per_video", clips_per_video)
        self.height = None if height is None else positive_int("height", height)
        self.width = None if width is None else positive_int("width", width)
        frames = self.clip_len if clip_duration_s is None else max(1, round(clip_duration_s * fps))
        # Its frames at the output size (at least the index and time kept per frame).
        output_fits(export_name, f"a clip of {frames} frames",
                    frames * max(3 * (self.height or 1) * (self.width or 1), 48))
        self.num_threads = thread_count(num_threads)
        self.layout = layout
        self.seed = int(seed)
        self.epoch = 0
        self.max_readers = positive_int("max_readers", max_readers)
        self.autorotate = bool(autorotate)
        self.on_damage = check_policy(on_damage)
        self.stream_index = stream_choice(stream_index)
        self.resize = check_resize(resize)
        self.interpolation = check_interpolation(interpolation)
        if audio is not None and (not isinstance(audio, AudioSpec) or clip_duration_s is None):
            raise ValueError("audio needs an AudioSpec and time-based clips (clip_duration_s "
                             "and fps): a clip's audio is the span of its duration")
        self.audio = audio
        self._local: tuple[int, FluxonFsVideoReaderPool, dict[str, Any]] | None = None

    # ---- per process: the pool and what is known of each video ----

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_local"] = None  # readers and caches stay in the process that made them
        return state

    @property
    def pool(self) -> FluxonFsVideoReaderPool:
        """This process's reader pool."""
        return self._process()[1]

    def _process(self) -> tuple[int, FluxonFsVideoReaderPool, dict[str, Any]]:
        local = self._local
        if local is None or local[0] != os.getpid():
            pool = self._given_pool or self._patcher.open_video_reader_pool(
                self.max_readers, autorotate=self.autorotate, on_damage=self.on_damage)
            local = self._local = (os.getpid(), pool, {})
        return local

    def _video(self, relpath: str) -> tuple[FluxonFsVideoMetadata, np.ndarray]:
        _, pool, known = self._process()
        if relpath not in known:  # one index load per video and process
            known[relpath] = pool.video_metadata_and_timestamps_s(self.export_name, relpath,
                                                                  self.stream_index)
        return known[relpath]

    # ---- sampling ----

    def set_epoch(self, epoch: int) -> None:
        """Draw other clips (call before each epoch; workers get it with the dataset)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.relpaths) * self.clips_per_video

    def clip(self, i: int) -> tuple[str, list[int]]:
        """(relpath, frame indices) of item i for the current seed and epoch."""
        relpath, indices, _ = self.clip_with_times(i)
        return relpath, indices

    def clip_with_times(self, i: int) -> tuple[str, list[int], np.ndarray | None]:
        """(relpath, frame indices, sample times in seconds or None) of item i: with
        time-based clips, indices[k] is the frame displayed at times[k]."""
        if not 0 <= i < len(self):
            raise IndexError(f"item {i} is out of range for {len(self)} items")
        relpath = self.relpaths[i // self.clips_per_video]
        metadata, times = self._video(relpath)
        rng = np.random.default_rng([self.seed, self.epoch, i])
        n = metadata.num_frames
        if self.clip_duration_s is None:
            span = (self.clip_len - 1) * self.stride + 1
            start = int(rng.integers(0, n - span + 1)) if span <= n else 0
            return relpath, [min(start + k * self.stride, n - 1) for k in range(self.clip_len)], None
        count = max(1, round(self.clip_duration_s * self.fps))
        offsets = np.arange(count) / self.fps
        room = metadata.end_s - metadata.begin_s - offsets[-1]
        start = metadata.begin_s + (rng.uniform(0, room) if room > 0 else 0.0)
        when = np.minimum(start + offsets, times[-1])  # a short video repeats its last frame
        return relpath, indices_at_times(times, metadata, when, relpath), when

    # ---- reading ----

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]

    def __getitems__(self, items: Sequence[int]) -> list[dict[str, Any]]:
        """The items of one batch, read with one batched call (one decode per video)."""
        clips = [self.clip_with_times(int(i)) for i in items]
        requests = [FluxonFsVideoReadRequest(
            self.export_name, relpath, self.height, self.width, self.num_threads, tuple(indices),
            self.stream_index, self.resize, self.interpolation, self.audio,
            None if self.audio is None else (when[0], when[0] + self.clip_duration_s))
            for relpath, indices, when in clips]
        results = self.pool.read_many_numpy_with_stats(requests)
        out = []
        for (relpath, indices, _), result in zip(clips, results):
            frames = torch.from_numpy(result.frames)
            if self.layout == "TCHW":
                frames = frames.permute(0, 3, 1, 2)
            _, times = self._video(relpath)
            item = {"frames": frames, "relpath": relpath,
                    "indices": torch.as_tensor(indices, dtype=torch.int64),
                    "timestamps_s": torch.from_numpy(times[indices])}
            if result.audio is not None:
                item.update(self._audio_item(result.audio))
            out.append(item)
        return out

    def _audio_item(self, audio: AudioSamples) -> dict[str, Any]:
        """The clip's audio at a fixed length (a span's sample count varies by
        one with where it starts on the sample grid), padded with zeros."""
        assert self.clip_duration_s is not None
        count = round(self.clip_duration_s * audio.sample_rate)
        data = np.zeros((audio.channels, count), np.float32)
        data[:, :min(count, audio.num_samples)] = audio.data[:, :count]
        return {"audio": torch.from_numpy(data), "audio_start_s": audio.start_s,
                "sample_rate": audio.sample_rate}


class SameVideoBatchSampler(Sampler[list[int]]):
    """Batches of ``dataset.clips_per_video`` clips of the same video, videos in
    (seeded, per-epoch) random order; ``batch_size`` must be a multiple of it."""

    def __init__(self, dataset: VideoClipDataset, batch_size: int, *, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False) -> None:
        self.dataset = dataset
        self.batch_size = positive_int("batch_size", batch_size)
        per_video = dataset.clips_per_video
        if self.batch_size % per_video:
            raise ValueError(f"batch_size {batch_size} is not a multiple of clips_per_video "
                             f"{per_video}")
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        videos = len(self.dataset.relpaths)
        per_video = self.dataset.clips_per_video
        order = (np.random.default_rng([self.seed, self.epoch]).permutation(videos)
                 if self.shuffle else np.arange(videos))
        batch: list[int] = []
        for video in order:
            batch.extend(int(video) * per_video + k for k in range(per_video))
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        items = len(self.dataset.relpaths) * self.dataset.clips_per_video
        return items // self.batch_size if self.drop_last else -(-items // self.batch_size)


class StatsCollate:
    """``default_collate``, plus ``batch["fluxon_stats"]``: the producing process's
    cumulative FluxonFsProcessStats (as a dict) and its pid."""

    def __init__(self, dataset: VideoClipDataset) -> None:
        self.dataset = dataset

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        batch = default_collate(items)
        info = get_worker_info()
        dataset = info.dataset if info is not None else self.dataset
        batch["fluxon_stats"] = {"pid": os.getpid(),
                                 "stats": dataset.pool.stats().as_dict()}  # type: ignore[union-attr]
        return batch


class LoaderStats:
    """Adds up the workers' cumulative stats that StatsCollate puts in batches."""

    def __init__(self) -> None:
        self._latest: dict[int, FluxonFsProcessStats] = {}
        self._base: dict[int, FluxonFsProcessStats] = {}

    def update(self, batch: dict[str, Any]) -> None:
        info = batch.get("fluxon_stats")
        if info is not None:
            self._latest[info["pid"]] = FluxonFsProcessStats(**info["stats"])

    def start_epoch(self) -> None:
        """Count from here (persistent workers keep their totals across epochs)."""
        self._base = dict(self._latest)

    def total(self) -> FluxonFsProcessStats:
        """What every worker did since start_epoch()."""
        total = FluxonFsProcessStats()
        for pid, stats in self._latest.items():
            total = total + (stats - self._base[pid] if pid in self._base else stats)
        return total
