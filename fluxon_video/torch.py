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
  With ``num_replicas``/``rank`` (or an initialised ``torch.distributed``)
  it shards the videos across ranks like ``DistributedSampler``.
- ``on_error`` (:mod:`fluxon_video.bad_items`): ``"raise"`` (default),
  ``"skip"`` (a bad item is replaced by a deterministic other one, the bad
  file is logged once and never read again in that process) or a callable
  ``(index, exception) -> item``.
- :class:`StatsCollate` and :class:`LoaderStats`: each batch carries its
  worker's cumulative :class:`~fluxon_video.FluxonFsProcessStats` and bad-item
  counts, and the training loop adds them up per epoch, so nobody threads
  per-read stats through batches by hand.
- Batches made by :func:`collate_clips` (and :class:`StatsCollate`) keep their
  non-tensor fields (``relpath``, ``fluxon_stats``) in a list and a dict
  whose ``.to(device)`` returns them unchanged, so ``{k: v.to(device) for k,
  v in batch.items()}`` works; :func:`move_to` moves the tensors of any
  nested batch.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
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
from fluxon_video.bad_items import (
    MAX_REPLACEMENT_TRIES,
    BadItems,
    FluxonFsNoReadableItemError,
    OnError,
    bad_kind,
    check_on_error,
    log_clip,
    replacement_videos,
    unwrapped,
)
from fluxon_video.batch_plan import (BatchPlan, PlannedSampler, SeededBatchSampler, replicas, shard,
                                     shard_length)
from fluxon_video.defaults import TIME_TOLERANCE_S
from fluxon_video.errors import FluxonFsConfigError
from fluxon_video.metadata import FluxonFsVideoMetadata, indices_at_times
from fluxon_video.options import ReadOptions, options_from
from fluxon_video.patcher import FluxonFsPatcher
from fluxon_video.pool import (Ahead, FluxonFsVideoReaderPool, FluxonFsVideoReadRequest,
                               FluxonFsVideoReadResult)
from fluxon_video.stats import FluxonFsProcessStats
from fluxon_video.validation import Threads, output_fits, positive_int, time_tolerance

__all__ = ["FluxonFsNoReadableItemError", "HostDict", "HostList", "LoaderStats",
           "SameVideoBatchSampler", "SeededBatchSampler", "StatsCollate", "VideoClipDataset",
           "collate_clips", "move_to"]

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
    num_channels=...)`` so clips of videos with different audio batch together.
    ``tolerance_s`` (time-based clips): a sample time within it of a frame's
    pts takes that frame (``reader.indices_at_times``; default 1e-4 s).
    ``options``: a ReadOptions instead of height, width, num_threads,
    autorotate, on_damage, stream_index, resize and interpolation; its
    ``layout`` (NHWC or NCHW: THWC or TCHW here) and ``audio`` then stand for
    ``layout`` and ``audio``.

    ``export_name`` must be one of the source's configured exports (checked
    here, not in a worker). ``on_error`` says what a bad item does (one whose
    file is missing, is not a video, is damaged or lacks the stream asked for;
    see :mod:`fluxon_video.bad_items` for the exact list, and what is always
    raised: argument and config errors, refused access, I/O that may recover):
    ``"raise"`` (default) raises it; ``"skip"`` replaces the item by another
    one chosen from ``(seed, epoch, index)`` alone, so every worker and rank
    makes the same replacement, logs one warning per bad file on the
    ``fluxon_video.torch`` logger and never reads that file again in the
    process (:attr:`bad_files`, :attr:`bad_items`, the batch stats of
    :class:`StatsCollate`); a callable ``on_error(index, exception)`` returns
    the item to use instead (a dict like the others, so they collate) or
    raises. A callable given to spawned workers must pickle (a module-level
    function, not a lambda).
    """

    def __init__(self, source: FluxonFsPatcher | FluxonFsVideoReaderPool, export_name: str,
                 relpaths: Sequence[str], *, clip_len: int = 16, stride: int = 1,
                 clip_duration_s: float | None = None, fps: float | None = None,
                 clips_per_video: int = 1, height: int | None = None, width: int | None = None,
                 num_threads: Threads = 1, layout: str = "THWC", seed: int = 0,
                 max_readers: int = 16, autorotate: bool = False,
                 on_damage: str = "error", stream_index: int | None = None,
                 resize: str = "stretch", interpolation: str = "bilinear",
                 audio: AudioSpec | None = None, on_error: OnError = "raise",
                 tolerance_s: float = TIME_TOLERANCE_S,
                 options: ReadOptions | None = None) -> None:
        if isinstance(source, FluxonFsVideoReaderPool):
            self._patcher, self._given_pool = None, source
        elif isinstance(source, FluxonFsPatcher):
            self._patcher, self._given_pool = source, None
        else:
            raise TypeError(f"source must be a FluxonFsPatcher or FluxonFsVideoReaderPool, "
                            f"got {type(source).__name__}")
        # An unknown export fails here, naming the configured ones, not in every worker.
        (source.config if self._patcher is not None else source.opener.config).export(export_name)
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
        # The readers' options, checked once; the attributes below mirror them.
        self.options = options_from(options, "VideoClipDataset", height=height, width=width,
                                    num_threads=num_threads, autorotate=autorotate,
                                    on_damage=on_damage, stream_index=stream_index,
                                    resize=resize, interpolation=interpolation)
        self.height, self.width = self.options.height, self.options.width
        frames = self.clip_len if clip_duration_s is None else max(1, round(clip_duration_s * fps))
        # Its frames at the output size (at least the index and time kept per frame).
        output_fits(export_name, f"a clip of {frames} frames",
                    frames * max(3 * (self.height or 1) * (self.width or 1), 48))
        self.num_threads = self.options.num_threads
        if options is not None and (layout != "THWC" or audio is not None):
            raise FluxonFsConfigError("VideoClipDataset: pass options= or layout=/audio=, not "
                                      "both (options.layout and options.audio stand for them)")
        if options is not None:
            layout = "T" + options.layout[1:]
            audio = options.audio
        self.layout = layout
        self.seed = int(seed)
        self.epoch = 0
        self.max_readers = positive_int("max_readers", max_readers)
        self.autorotate, self.on_damage = self.options.autorotate, self.options.on_damage
        self.stream_index = self.options.stream_index
        self.resize, self.interpolation = self.options.resize, self.options.interpolation
        if audio is not None and (not isinstance(audio, AudioSpec) or clip_duration_s is None):
            raise ValueError("audio needs an AudioSpec and time-based clips (clip_duration_s "
                             "and fps): a clip's audio is the span of its duration")
        self.audio = audio
        self.on_error = check_on_error(on_error)
        self.tolerance_s = time_tolerance(tolerance_s)
        self._local: _Local | None = None
        self._plan: BatchPlan | None = None

    def plan_batches(self, batch_sampler: PlannedSampler | None) -> None:
        """Read ahead in the order of ``batch_sampler`` (one whose order follows
        from its seed and epoch, as ``SameVideoBatchSampler``'s, which calls
        this itself): while a batch decodes, the process's next batch has its
        videos' indexes loaded, its readers opened and its bytes fetched
        (``read_many``'s ``ahead``), within the readers' page caches. A batch
        that is not the sampler's plans nothing. None: no lookahead."""
        self._plan = None if batch_sampler is None else BatchPlan(batch_sampler)

    # ---- per process: the pool and what is known of each video ----

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_local"] = None  # readers and caches stay in the process that made them
        return state

    @property
    def pool(self) -> FluxonFsVideoReaderPool:
        """This process's reader pool."""
        return self._process().pool

    @property
    def bad_files(self) -> dict[str, str]:
        """The files this process found bad (``on_error`` not ``"raise"``):
        relpath -> the error, as ``"Type: message"``."""
        return {relpath: f"{type(exc).__name__}: {exc}"
                for relpath, exc in self._process().bad.files.items()}

    @property
    def bad_items(self) -> int:
        """How many items this process replaced (or handed to an ``on_error`` callable)."""
        return self._process().bad.items

    def _process(self) -> _Local:
        local = self._local
        if local is None or local.pid != os.getpid():
            pool = self._given_pool or self._patcher.open_video_reader_pool(
                self.max_readers, autorotate=self.autorotate, on_damage=self.on_damage)
            local = self._local = _Local(pool, self.export_name)
        return local

    def _video(self, relpath: str) -> tuple[FluxonFsVideoMetadata, np.ndarray]:
        local = self._process()
        known = local.known
        if relpath not in known:  # one index load per video and process
            known[relpath] = local.pool.video_metadata_and_timestamps_s(
                self.export_name, relpath, self.stream_index)
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
        room = metadata.end_stream_seconds - metadata.begin_stream_seconds - offsets[-1]
        start = metadata.begin_stream_seconds + (rng.uniform(0, room) if room > 0 else 0.0)
        when = np.minimum(start + offsets, times[-1])  # a short video repeats its last frame
        return relpath, indices_at_times(times, metadata, when, relpath,
                                         tolerance_s=self.tolerance_s), when

    # ---- reading ----

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]

    def __getitems__(self, items: Sequence[int]) -> list[dict[str, Any]]:
        """The items of one batch, read with one batched call (one decode per
        video); a bad item as ``on_error`` says."""
        wanted = [int(i) for i in items]
        out: list[dict[str, Any] | None] = [None] * len(wanted)
        upcoming = None if self._plan is None else self._plan.after(
            wanted, on_change=self.pool.cancel_prefetch)
        ahead = () if not upcoming else functools.partial(self._requests_ahead, upcoming)
        if self.on_error == "raise":
            self._read({p: (i, self.clip_with_times(i)) for p, i in enumerate(wanted)}, out,
                       ahead)
            return out  # type: ignore[return-value]
        chains: dict[int, _Chain] = {}
        todo = dict(enumerate(wanted))  # position in the batch -> item to read there
        while todo:
            clips = {}
            for position, i in todo.items():
                found = self._readable_clip(position, i, wanted[position], chains, out)
                if found is not None:
                    clips[position] = found
            todo = {}
            for position, exc in self._read(clips, out, ahead).items():
                nxt = self._bad(position, clips[position][0], wanted[position], exc, chains, out)
                if nxt is not None:
                    todo[position] = nxt
            ahead = ()  # replacements: the next batch is queued already
        return out  # type: ignore[return-value]

    def _requests_ahead(self, items: list[int]) -> list[FluxonFsVideoReadRequest]:
        """The next batch's requests, made on the lookahead thread (so its
        videos' index loads are ahead too). An item of a known bad file, or
        whose clip cannot be made, is left to its own read, which says why."""
        bad = self._process().bad
        requests = []
        for i in items:
            if bad.file_error(self.relpaths[i // self.clips_per_video]) is not None:
                continue
            try:
                requests.append(self._request(self.clip_with_times(i)))
            except Exception:  # noqa: BLE001 - raised by the read of that item
                continue
        return requests

    # ---- bad items (on_error "skip" or a callable) ----

    def _readable_clip(self, position: int, i: int, original: int, chains: dict[int, _Chain],
                       out: list[dict[str, Any] | None]) -> tuple[int, Clip] | None:
        """(item, its clip) to read at position: i, or its replacement when i's
        file is known bad or its index does not load; None when out[position]
        was filled by the on_error callable."""
        while True:
            exc = self._process().bad.file_error(self.relpaths[i // self.clips_per_video])
            if exc is None:
                try:
                    return i, self.clip_with_times(i)
                except Exception as caught:
                    if bad_kind(caught) is None:
                        raise
                    exc = caught
            nxt = self._bad(position, i, original, exc, chains, out)
            if nxt is None:
                return None
            i = nxt

    def _bad(self, position: int, i: int, original: int, exc: BaseException,
             chains: dict[int, _Chain], out: list[dict[str, Any] | None]) -> int | None:
        """Record that item i (read at position for item ``original``) is bad;
        the next item to read there, or None when the callable gave the item."""
        exc = unwrapped(exc)
        per_video = self.clips_per_video
        relpath = self.relpaths[i // per_video]
        bad = self._process().bad
        if bad_kind(exc) == "file":
            bad.add_file(relpath, exc)
        else:
            log_clip(self.export_name, relpath, i, exc)
        chain = chains.get(position)
        if chain is None:  # the item asked for is bad
            bad.add_item()
            if callable(self.on_error):
                item = self.on_error(original, exc)
                if not isinstance(item, Mapping):
                    raise TypeError(f"on_error returned {type(item).__name__} for item "
                                    f"{original}: return the item to use (a dict) or raise")
                out[position] = dict(item)
                return None
            video = original // per_video
            chain = chains[position] = _Chain(
                replacement_videos(self.seed, self.epoch, video, len(self.relpaths)), {video})
        else:
            chain.tries += 1
            if chain.tries >= MAX_REPLACEMENT_TRIES:
                raise FluxonFsNoReadableItemError(
                    f"{self.export_name}: item {original} and {chain.tries} replacements in a "
                    f"row could not be read (the last, {relpath}: {exc}): this looks like the "
                    f"store or the dataset, not one bad file") from exc
        for video in chain.candidates:
            if video not in chain.tried and bad.file_error(self.relpaths[video]) is None:
                chain.tried.add(video)
                return video * per_video + original % per_video
        raise FluxonFsNoReadableItemError(
            f"{self.export_name}: no readable replacement for item {original}: every other "
            f"video is bad (the last, {relpath}: {exc})") from exc

    # ---- reading ----

    def _request(self, clip: Clip) -> FluxonFsVideoReadRequest:
        relpath, indices, when = clip
        return FluxonFsVideoReadRequest(
            self.export_name, relpath, indices=tuple(indices), audio=self.audio,
            audio_span_s=None if self.audio is None else (when[0],
                                                          when[0] + self.clip_duration_s),
            options=self.options)

    def _read(self, clips: dict[int, tuple[int, Clip]], out: list[dict[str, Any] | None],
              ahead: Ahead = ()) -> dict[int, BaseException]:
        """Read clips (position -> (item, clip)) into out with one batched call
        (``ahead``: the next batch, fetched meanwhile); the bad ones' errors by
        position (on_error "raise": raised)."""
        if not clips:
            return {}
        positions = list(clips)
        requests = [self._request(clips[p][1]) for p in positions]
        try:
            results = self.pool.read_many_numpy_with_stats(requests, ahead=ahead)
        except Exception as exc:
            if self.on_error == "raise" or bad_kind(unwrapped(exc)) is None:
                raise
            # Which of the batch's videos is bad: each is read alone (the
            # batched call raises the first failing group's error only).
            return self._read_apart(positions, requests, clips, out)
        for position, result in zip(positions, results):
            out[position] = self._item(clips[position][1], result)
        return {}

    def _read_apart(self, positions: list[int], requests: list[FluxonFsVideoReadRequest],
                    clips: dict[int, tuple[int, Clip]],
                    out: list[dict[str, Any] | None]) -> dict[int, BaseException]:
        groups: dict[str, list[tuple[int, FluxonFsVideoReadRequest]]] = {}
        for position, request in zip(positions, requests):
            groups.setdefault(request.relpath, []).append((position, request))
        failed: dict[int, BaseException] = {}
        parts = list(groups.values())
        while parts:
            part = parts.pop()
            try:
                results = self.pool.read_many_numpy_with_stats([r for _, r in part])
            except Exception as exc:
                exc = unwrapped(exc)
                kind = bad_kind(exc)
                if kind is None:
                    raise
                if kind == "clip" and len(part) > 1:  # about one clip: find which
                    parts.extend([member] for member in part)
                else:
                    failed.update((position, exc) for position, _ in part)
                continue
            for (position, _), result in zip(part, results):
                out[position] = self._item(clips[position][1], result)
        return failed

    def _item(self, clip: Clip, result: FluxonFsVideoReadResult) -> dict[str, Any]:
        relpath, indices, _ = clip
        frames = torch.from_numpy(result.frames)
        if self.layout == "TCHW":
            frames = frames.permute(0, 3, 1, 2)
        _, times = self._video(relpath)
        item = {"frames": frames, "relpath": relpath,
                "indices": torch.as_tensor(indices, dtype=torch.int64),
                "timestamps_s": torch.from_numpy(times[indices])}
        if result.audio is not None:
            item.update(self._audio_item(result.audio))
        return item

    def _audio_item(self, audio: AudioSamples) -> dict[str, Any]:
        """The clip's audio at a fixed length (a span's sample count varies by
        one with where it starts on the sample grid), padded with zeros."""
        assert self.clip_duration_s is not None
        count = round(self.clip_duration_s * audio.sample_rate)
        data = np.zeros((audio.num_channels, count), np.float32)
        data[:, :min(count, audio.num_samples)] = audio.data[:, :count]
        return {"audio": torch.from_numpy(data), "audio_start_s": audio.pts_seconds,
                "sample_rate": audio.sample_rate}


# (relpath, frame indices, sample times or None): what clip_with_times returns.
Clip = tuple[str, list[int], "np.ndarray | None"]


class _Local:
    """One process's share of a dataset: its pool, the videos it knows, its bad items."""

    def __init__(self, pool: FluxonFsVideoReaderPool, export_name: str) -> None:
        self.pid = os.getpid()
        self.pool = pool
        self.known: dict[str, tuple[FluxonFsVideoMetadata, np.ndarray]] = {}
        self.bad = BadItems(export_name)


class _Chain:
    """The replacements tried for one position of a batch."""

    def __init__(self, candidates: Iterator[int], tried: set[int]) -> None:
        self.candidates = candidates
        self.tried = tried  # videos
        self.tries = 0


class SameVideoBatchSampler(Sampler[list[int]]):
    """Batches of ``dataset.clips_per_video`` clips of the same video, videos in
    (seeded, per-epoch) random order; ``batch_size`` must be a multiple of it.

    Across ranks like ``DistributedSampler``: every rank draws the same order
    of videos (the same ``seed`` everywhere), and rank ``r`` of
    ``num_replicas`` takes videos ``r, r + num_replicas, ...`` of it, so the
    ranks' videos are disjoint and their batch counts equal. ``drop_last``
    False pads the order by repeating its first videos until it divides
    evenly, and yields a last batch shorter than ``batch_size``; True drops
    the last videos instead, and that short batch. ``num_replicas`` and
    ``rank`` default to torch.distributed's world size and rank when it is
    initialised, else to one replica. Call ``set_epoch(epoch)`` before each
    epoch (and ``dataset.set_epoch`` for other clips): a shuffling sampler
    iterated again without it repeats the order, and warns once.
    """

    def __init__(self, dataset: VideoClipDataset, batch_size: int, *, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False, num_replicas: int | None = None,
                 rank: int | None = None, lookahead: bool = True) -> None:
        self.dataset = dataset
        self.batch_size = positive_int("batch_size", batch_size)
        per_video = dataset.clips_per_video
        if self.batch_size % per_video:
            raise ValueError(f"batch_size {batch_size} is not a multiple of clips_per_video "
                             f"{per_video}")
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self.num_replicas, self.rank = replicas(num_replicas, rank)
        self.epoch = 0
        self._iterations = 0  # since the last set_epoch
        self._warned = False
        if lookahead:
            dataset.plan_batches(self)

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration draws (as DistributedSampler's)."""
        self.epoch = int(epoch)
        self._iterations = 0

    def videos(self) -> np.ndarray:
        """This rank's videos (positions in ``dataset.relpaths``) for the current epoch, in order."""
        videos = len(self.dataset.relpaths)
        order = (np.random.default_rng([self.seed, self.epoch]).permutation(videos)
                 if self.shuffle else np.arange(videos))
        return shard(order, self.num_replicas, self.rank, self.drop_last)

    def __iter__(self) -> Iterator[list[int]]:
        # Counted when the first batch is drawn: a multi-worker DataLoader
        # makes an iterator it never uses before the one it reads.
        self._iterations += 1
        if self.shuffle and self._iterations > 1 and not self._warned:
            self._warned = True
            warnings.warn("SameVideoBatchSampler iterated again without set_epoch(): this "
                          "epoch repeats the last one's order of videos; call "
                          "sampler.set_epoch(epoch) (and dataset.set_epoch(epoch) for other "
                          "clips) before each epoch", UserWarning, stacklevel=2)
        yield from self._batches()

    def _batches(self) -> Iterator[list[int]]:
        per_video = self.dataset.clips_per_video
        batch: list[int] = []
        for video in self.videos():
            batch.extend(int(video) * per_video + k for k in range(per_video))
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def planned_batches(self) -> list[list[int]]:
        """This epoch's batches, as iterating yields them (the dataset's lookahead
        draws them again in each worker)."""
        return list(self._batches())

    def plan_version(self) -> tuple[int, int, bool, int, int, int]:
        """What the order depends on: a change makes a worker draw it again."""
        return (self.seed, self.epoch, self.shuffle, self.num_replicas, self.rank,
                len(self.dataset.relpaths))

    def __len__(self) -> int:
        per_rank = shard_length(len(self.dataset.relpaths), self.num_replicas, self.drop_last)
        items = per_rank * self.dataset.clips_per_video
        return items // self.batch_size if self.drop_last else -(-items // self.batch_size)


class _StaysOnHost:
    def to(self, *args: Any, **kwargs: Any) -> Any:
        """Itself: what a batch carries besides tensors stays where it is."""
        return self


class HostList(_StaysOnHost, list):
    """A list (a batch's ``relpath``) whose ``.to(device)`` returns it unchanged."""


class HostDict(_StaysOnHost, dict):
    """A dict (a batch's ``fluxon_stats``) whose ``.to(device)`` returns it unchanged."""


def collate_clips(items: list[dict[str, Any]]) -> dict[str, Any]:
    """``default_collate``, with the batch's lists (``relpath``: strings) and
    dicts as :class:`HostList` / :class:`HostDict`, so a ``{k: v.to(device) for
    k, v in batch.items()}`` loop moves the tensors and keeps the rest."""
    batch = default_collate(items)
    for key, value in batch.items():
        if isinstance(value, list) and not isinstance(value, HostList):
            batch[key] = HostList(value)
        elif isinstance(value, dict) and not isinstance(value, HostDict):
            batch[key] = HostDict(value)
    return batch


def move_to(data: Any, device: Any, non_blocking: bool = False) -> Any:
    """``data`` with every tensor in it moved to ``device`` (``Tensor.to``):
    through dicts, lists, tuples and named tuples, everything else as it is."""
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, Mapping):
        moved = {k: move_to(v, device, non_blocking) for k, v in data.items()}
        try:
            return type(data)(moved)
        except TypeError:
            return moved
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple
        return type(data)(*(move_to(v, device, non_blocking) for v in data))
    if isinstance(data, (list, tuple)):
        moved = [move_to(v, device, non_blocking) for v in data]
        try:
            return type(data)(moved)
        except TypeError:
            return moved
    return data


class StatsCollate:
    """:func:`collate_clips`, plus ``batch["fluxon_stats"]`` (a :class:`HostDict`):
    the producing process's pid, its cumulative FluxonFsProcessStats (as a
    dict, ``stats``), the items it replaced so far (``bad_items``) and the
    files it found bad since its previous batch (``new_bad_files``)."""

    def __init__(self, dataset: VideoClipDataset) -> None:
        self.dataset = dataset

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        batch = collate_clips(items)
        info = get_worker_info()
        dataset = info.dataset if info is not None else self.dataset
        if not isinstance(dataset, VideoClipDataset):  # wrapped (a Subset): ours is the same copy
            dataset = self.dataset
        local = dataset._process()
        batch["fluxon_stats"] = HostDict(pid=os.getpid(), stats=local.pool.stats().as_dict(),
                                         bad_items=local.bad.items,
                                         new_bad_files=local.bad.take_new_files())
        return batch


class LoaderStats:
    """Adds up the workers' cumulative stats that StatsCollate puts in batches."""

    def __init__(self) -> None:
        self._latest: dict[int, FluxonFsProcessStats] = {}
        self._retired = FluxonFsProcessStats()  # workers whose pid a later worker took
        self._base: dict[int, FluxonFsProcessStats] = {}
        self._bad_latest: dict[int, int] = {}
        self._bad_base: dict[int, int] = {}
        self._bad_files: set[str] = set()

    def update(self, batch: dict[str, Any]) -> None:
        """Take a batch's stats (call it for every batch: bad files are reported once)."""
        info = batch.get("fluxon_stats")
        if info is not None:
            stats, pid = FluxonFsProcessStats(**info["stats"]), info["pid"]
            earlier = self._latest.get(pid)
            if earlier is not None and stats.reads + stats.metadata_calls < \
                    earlier.reads + earlier.metadata_calls:  # a new worker took an old one's pid
                self._retired = self._retired + earlier
                self._base.pop(pid, None)
                self._bad_base.pop(pid, None)  # its bad items count from zero too
            self._latest[pid] = stats
            self._bad_latest[pid] = info.get("bad_items", 0)
            self._bad_files.update(info.get("new_bad_files", ()))

    def start_epoch(self) -> None:
        """Count from here (persistent workers keep their totals across epochs)."""
        self._base = dict(self._latest)
        self._bad_base = dict(self._bad_latest)

    def bad_items(self) -> int:
        """Items the workers replaced (``on_error``) since start_epoch()."""
        return sum(n - self._bad_base.get(pid, 0) for pid, n in self._bad_latest.items())

    def bad_files(self) -> set[str]:
        """Relpaths any worker found bad so far (each worker finds a file once)."""
        return set(self._bad_files)

    def cumulative(self) -> FluxonFsProcessStats:
        """What every worker ever seen did, epochs before this one included: a
        counter that only grows, for ``fluxon_video.metrics`` (workers that exit
        at an epoch's end keep their last figures)."""
        return sum(self._latest.values(), self._retired)

    def total(self) -> FluxonFsProcessStats:
        """What every worker did since start_epoch()."""
        total = FluxonFsProcessStats()
        for pid, stats in self._latest.items():
            total = total + (stats - self._base[pid] if pid in self._base else stats)
        return total
