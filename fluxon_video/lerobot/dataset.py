"""LeRobotDataset: LeRobot v3 datasets served as LeRobot serves them, read
through fluxon_video (locally or through FluxonFS).

An item is what ``lerobot.datasets.lerobot_dataset.LeRobotDataset[i]`` returns:
the row's columns as tensors, each camera's frame (float32 CHW in [0, 1], or
uint8 with ``return_uint8=True`` for video cameras; image cameras, stored in
the tables, are always float as in LeRobot; depth cameras are float32
distances, depth.py), ``task``, and with ``delta_timestamps`` the windows of
frames and columns around the row, clamped to the episode, with
``<key>_is_pad`` masks. Frames are the ones nearest each row's time within
``tolerance_s`` (bit-exact with the ffmpeg CLI's decode).

``__getitems__`` (what a DataLoader calls for a batch) plans the batch: its
items' times grouped per shard file, one batched read per file, the files
decoded on parallel threads.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fluxon_video.defaults import TIME_TOLERANCE_S
from fluxon_video._layout import frames_to_planes
from fluxon_video.batch_plan import BatchPlan, PlannedSampler
from fluxon_video.errors import FluxonFsConfigError, FluxonFsFrameIndexError
from fluxon_video.lerobot.buffers import BufferPool
from fluxon_video.lerobot.depth import (
    DEFAULT_UNIT, MM_PER_METRE, DepthQuantizer, depth_unit, rescale_stats)
from fluxon_video.lerobot.frames import ShardReaders
from fluxon_video.lerobot.image_store import ImageStore, cell
from fluxon_video.lerobot.images import decode_depth_images, decode_images
from fluxon_video.lerobot.meta import Episode, LeRobotDatasetMetadata, default_root
from fluxon_video.lerobot.tables import concat, read_parquet
from fluxon_video.validation import positive_int, thread_count, time_tolerance

try:  # the dataset is a torch Dataset when torch is there; it works without
    from torch.utils.data import Dataset as _Base
except ImportError:  # pragma: no cover - torch is an extra
    _Base = object  # type: ignore[assignment,misc]

if TYPE_CHECKING:
    from fluxon_video.patcher import FluxonFsPatcher


def delta_indices(delta_timestamps: dict[str, Sequence[float]], fps: int,
                  tolerance_s: float, features: dict[str, Any]) -> dict[str, list[int]]:
    """Row offsets of each key's window: round(d * fps); every d must be a
    whole number of frames within ``tolerance_s`` (LeRobot's check)."""
    out = {}
    for key, deltas in delta_timestamps.items():
        if key not in features:
            raise FluxonFsConfigError(f"delta_timestamps: {key!r} is not a feature of the dataset "
                                      f"({', '.join(features)})")
        offsets = []
        for d in deltas:
            if not math.isfinite(d) or abs(d * fps - round(d * fps)) / fps > tolerance_s:
                raise FluxonFsConfigError(
                    f"delta_timestamps[{key!r}]: {d} s is not a multiple of 1/fps (fps {fps}) "
                    f"within tolerance_s={tolerance_s:g}")
            offsets.append(round(d * fps))
        out[key] = offsets
    return out


class LeRobotDataset(_Base):  # type: ignore[misc]
    """A LeRobot v3 dataset, read by fluxon_video. Constructed as LeRobot's:

        LeRobotDataset(repo_id, root=..., episodes=..., delta_timestamps=...,
                       tolerance_s=1e-4, image_transforms=..., return_uint8=False)

    ``root``: the dataset's folder (default LeRobot's cache,
    ``$HF_LEROBOT_HOME/<repo_id>``; nothing is downloaded). With ``patcher``
    it is a FluxonFS folder instead: ``EXPORT:PREFIX``, a URI
    (``s3://bucket/lerobot/pusht``) or an absolute path under an export's
    root, read through the agent and the shared cache.
    ``num_threads``: decoder threads per video file; ``max_readers``: video
    files a process keeps open. LeRobot's download and backend arguments
    (``revision``, ``force_cache_sync``, ``download_videos``, ``video_backend``)
    are accepted and ignored. Image cameras (frames stored in the tables) are
    decoded with Pillow and come as float, as LeRobot's do; depth cameras as
    float32 (1, H, W) distances in ``depth_output_unit`` ("mm", LeRobot's
    default, or "m"); depth maps stored as images too. Image cameras' files
    are copied once into memory-mapped files under ``image_cache_dir``
    (default ``~/.cache/fluxon_video/lerobot-images``, image_store.py), as
    Hugging Face's cache does for LeRobot."""

    def __init__(self, repo_id: str, root: str | os.PathLike[str] | None = None,
                 episodes: Sequence[int] | None = None,
                 image_transforms: Callable[[Any], Any] | None = None,
                 delta_timestamps: dict[str, Sequence[float]] | None = None,
                 tolerance_s: float = TIME_TOLERANCE_S, revision: str | None = None,
                 force_cache_sync: bool = False, download_videos: bool = True,
                 video_backend: str | None = None, return_uint8: bool = False,
                 depth_output_unit: str = DEFAULT_UNIT, *,
                 patcher: FluxonFsPatcher | None = None, num_threads: int = 1,
                 max_readers: int = 64,
                 image_cache_dir: str | os.PathLike[str] | None = None) -> None:
        del revision, force_cache_sync, download_videos, video_backend  # hub and backend options
        if image_transforms is not None and not callable(image_transforms):
            raise TypeError("image_transforms must be callable or None")
        self.repo_id = repo_id
        self.root = root if root is not None else default_root(repo_id)
        self.tolerance_s = time_tolerance(tolerance_s)
        self.image_transforms = image_transforms
        self.return_uint8 = bool(return_uint8)
        self.num_threads = thread_count(num_threads)
        self.max_readers = positive_int("max_readers", max_readers)
        self.depth_output_unit = depth_unit(depth_output_unit)
        self.meta = LeRobotDatasetMetadata(repo_id, self.root, patcher=patcher)
        # depth videos: their quantizers; depth images: the unit they were recorded in
        self._depth = {key: DepthQuantizer.of_feature(key, self.meta.features[key])
                       for key in self.meta.depth_keys if key in self.meta.video_keys}
        self._depth_images = {key: (self.meta.features[key].get("info") or {}).get("depth_unit")
                              for key in self.meta.depth_keys if key in self.meta.image_keys}
        rescale_stats(self.meta.stats, self.meta.features, self.meta.depth_keys,
                      self.depth_output_unit)
        self.episodes = self._selected(episodes)
        self.delta_timestamps = delta_timestamps
        self.delta_indices = None if delta_timestamps is None else delta_indices(
            delta_timestamps, self.meta.fps, self.tolerance_s, self.meta.features)
        files = self._data_files()
        self._rows = self._load_rows(files)
        images = self.meta.image_keys  # their files' bytes stay on disk, memory-mapped
        self._images = ImageStore(self.meta.files, files, images, image_cache_dir) \
            if images else None
        self._shards: ShardReaders | None = None
        self._buffers: BufferPool | None = None
        self._plan: BatchPlan | None = None

    def plan_batches(self, batch_sampler: PlannedSampler | None) -> None:
        """Read ahead in the order of ``batch_sampler``, one whose order follows
        from its seed and epoch (``fluxon_video.batch_plan.SeededBatchSampler``,
        given to the DataLoader as ``batch_sampler``): while a batch decodes,
        each process opens the shard files of the batch the DataLoader deals it
        next and fetches their frames' bytes. A batch the sampler did not make
        plans nothing. None: no lookahead."""
        self._plan = None if batch_sampler is None else BatchPlan(batch_sampler)

    # ---- loading ----

    def _selected(self, episodes: Sequence[int] | None) -> list[int] | None:
        if episodes is None:
            return None
        chosen = sorted({int(e) for e in episodes})
        bad = [e for e in chosen if not 0 <= e < self.meta.total_episodes]
        if bad:
            raise FluxonFsConfigError(f"episodes {bad} are not in the dataset "
                                      f"(0..{self.meta.total_episodes - 1})")
        return chosen

    def _selected_episodes(self) -> list[Episode]:
        return [self.meta.episodes[e] for e in self.episodes] if self.episodes is not None \
            else list(self.meta.episodes)

    def _data_files(self) -> list[str]:
        """The data files holding the selected episodes' rows."""
        return list(dict.fromkeys(e.data_file for e in self._selected_episodes()))

    def _load_rows(self, files: list[str]) -> dict[str, Any]:
        """The data rows of the selected episodes, ordered by ``index``; an image
        column's values are the rows' cells in the image store over ``files``."""
        m = self.meta.files
        images = self.meta.image_keys
        parts = []
        for file_no, relpath in enumerate(files):
            with m.open_binary(relpath) as source:
                part = read_parquet(source, m.name(relpath), image_rows=bool(images))
            for key in images:
                if key in part:
                    part[key] = cell(file_no, part[key])
            parts.append(part)
        rows = concat(parts)
        for column in ("index", "episode_index", "timestamp"):
            if column not in rows:
                raise FluxonFsConfigError(f"{m.name(files[0])}: no {column!r} column")
        keep = np.isin(rows["episode_index"], [e.index for e in self._selected_episodes()])
        order = np.argsort(np.asarray(rows["index"]), kind="stable")
        order = order[keep[order]]
        return {k: (v[order] if isinstance(v, np.ndarray) else [v[i] for i in order])
                for k, v in rows.items()}

    # ---- LeRobot's properties ----

    @property
    def fps(self) -> int:
        return self.meta.fps

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.meta.features

    @property
    def num_frames(self) -> int:
        return len(self)

    @property
    def num_episodes(self) -> int:
        return len(self.episodes) if self.episodes is not None else self.meta.total_episodes

    @property
    def absolute_to_relative_idx(self) -> dict[int, int] | None:
        """With an episode subset, each row's ``index`` to its position here (what
        LeRobot's ``EpisodeAwareSampler`` maps its indices through); None without."""
        if self.episodes is None:
            return None
        return {int(index): p for p, index in enumerate(self._rows["index"])}

    def __len__(self) -> int:
        return len(self._rows["index"])

    # ---- items ----

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return self.__getitems__([idx])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """A batch of items, its frames read as one planned read per video file."""
        positions = [self._position(i) for i in indices]
        items, windows, wanted = [], [], {}
        for p in positions:
            item, window = self._row_item(p)
            items.append(item)
            windows.append(window)
            for key, (relpath, when) in self._camera_times(p, window).items():
                wanted.setdefault(relpath, []).append((len(items) - 1, key, when))
        shards = self._readers()
        upcoming = None if self._plan is None else self._plan.after(
            list(indices), on_change=shards.cancel_prefetch)
        frames = shards.read({relpath: np.concatenate([w for _, _, w in asks])
                              for relpath, asks in wanted.items()},
                             ahead=self._times_of(upcoming) if upcoming else None,
                             gray={relpath for relpath, asks in wanted.items()
                                   if asks[0][1] in self._depth})
        if self._buffers is None:
            self._buffers = BufferPool()
        places: list[tuple[int, str]] = []
        tasks: list[tuple[Any, ...]] = []
        for relpath, asks in wanted.items():
            decoded, rows = frames[relpath]
            start = 0
            for item_no, key, when in asks:
                places.append((item_no, key))
                picked = rows[start:start + len(when)]
                tasks.append((self._depth_tensor, key, decoded, picked) if key in self._depth
                             else (self._video_tensor, decoded, picked, self._buffers))
                start += len(when)
        for item_no, (p, window) in enumerate(zip(positions, windows)):
            for key in self.meta.image_keys:
                places.append((item_no, key))
                tasks.append((self._image_tensor, key, p, window.get(key), self._buffers))
        # the conversions (and Pillow's decodes) release the GIL: the decode threads
        # share them out
        for (item_no, key), tensor in zip(places, shards.map(_call, tasks)):
            items[item_no][key] = tensor
        for item in items:
            self._finish(item)
        return items

    def _position(self, idx: int) -> int:
        n = len(self)
        i = int(idx)
        if not -n <= i < n:
            raise FluxonFsFrameIndexError(f"{self.repo_id or self.root}: index {idx} is out of "
                                          f"range for {n} rows")
        return i % n

    def _times_of(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Per video file, the times the items at ``indices`` read (the lookahead's plan)."""
        wanted: dict[str, list[np.ndarray]] = {}
        for i in indices:
            p = self._position(i)
            for relpath, when in self._camera_times(p, self._windows(p)).values():
                wanted.setdefault(relpath, []).append(when)
        return {relpath: np.concatenate(times) for relpath, times in wanted.items()}

    def _windows(self, p: int) -> dict[str, list[int]]:
        """Each ``delta_timestamps`` key's rows (``index`` values), clamped to the episode."""
        if self.delta_indices is None:
            return {}
        episode: Episode = self.meta.episodes[int(self._rows["episode_index"][p])]
        absolute = int(self._rows["index"][p])
        return {key: [min(max(absolute + d, episode.from_row), episode.to_row - 1)
                      for d in offsets] for key, offsets in self.delta_indices.items()}

    def _camera_times(self, p: int, windows: dict[str, list[int]]
                      ) -> dict[str, tuple[str, np.ndarray]]:
        """Per camera, the file and the times the item at position ``p`` reads."""
        rows = self._rows
        episode: Episode = self.meta.episodes[int(rows["episode_index"][p])]
        times = {}
        for key in self.meta.video_keys:
            relpath, start_s = episode.videos[key]
            at = self._positions_of(windows[key]) if key in windows else [p]
            # float32 row times, as LeRobot adds them: start (float64) + float(t)
            times[key] = (relpath, np.array([start_s + float(rows["timestamp"][q]) for q in at]))
        return times

    def _row_item(self, p: int) -> tuple[dict[str, Any], dict[str, list[int]]]:
        """The row's columns (and windows), and its windows' rows."""
        import torch

        rows = self._rows
        episode: Episode = self.meta.episodes[int(rows["episode_index"][p])]
        absolute = int(rows["index"][p])
        images = self.meta.image_keys  # decoded with the batch's frames
        item = {key: _tensor(torch, column[p]) for key, column in rows.items()
                if key not in images}
        windows = self._windows(p)
        for key, offsets in (self.delta_indices or {}).items():
            item[f"{key}_is_pad"] = torch.tensor(
                [not episode.from_row <= absolute + d < episode.to_row for d in offsets],
                dtype=torch.bool)
            if key not in self.meta.camera_keys:
                at = self._positions_of(windows[key])
                item[key] = torch.stack([_tensor(torch, rows[key][q]) for q in at])
        return item, windows

    def _positions_of(self, absolute: list[int]) -> np.ndarray:
        """Positions in the loaded rows of ``index`` values (all loaded: an
        episode's window never leaves the episode)."""
        return np.searchsorted(self._rows["index"], absolute)

    def _video_tensor(self, decoded: np.ndarray, rows: np.ndarray, buffers: BufferPool) -> Any:
        """A video camera's frames (``decoded[rows]``) as LeRobot gives them: (T, C, H,
        W), no T for one frame; uint8 with ``return_uint8``."""
        return self._planes(decoded, rows, buffers, self.return_uint8).squeeze(0)

    def _depth_tensor(self, key: str, codes: np.ndarray, rows: np.ndarray) -> Any:
        """A depth camera's frames (``codes[rows]``) as LeRobot gives them: distances,
        float32 (T, 1, H, W) in ``depth_output_unit``, no T for one frame."""
        return self._depth[key].distances(codes[rows], self.depth_output_unit).squeeze(0)

    def _image_tensor(self, key: str, p: int, window: list[int] | None,
                      buffers: BufferPool) -> Any:
        """An image camera's frames for the item at position ``p`` as LeRobot gives
        them (its ``ToTensor``: float whatever ``return_uint8`` says; a depth map's
        values in ``depth_output_unit``): (C, H, W), or (T, C, H, W) over the
        ``delta_timestamps`` window."""
        at = [p] if window is None else list(self._positions_of(window))
        rows = self._rows
        names = [f"{self.meta.files.name(self._data_file(q))}: index {int(rows['index'][q])}, "
                 f"{key}" for q in at]
        assert self._images is not None
        encoded = self._images.encoded(key, [rows[key][q] for q in at])
        if key in self._depth_images:
            frames = self._depth_image_tensor(key, decode_depth_images(encoded, names))
        else:
            pixels = decode_images(encoded, names)
            frames = self._planes(pixels, np.arange(len(at)), buffers, uint8=False)
        return frames if window is not None else frames[0]

    def _depth_image_tensor(self, key: str, values: np.ndarray) -> Any:
        """Depth images' values (N, H, W) as LeRobot gives them: float32 (N, 1, H, W),
        from the unit they were recorded in into ``depth_output_unit``."""
        import torch

        frames = torch.from_numpy(values[:, None])
        stored = self._depth_images[key]
        if stored is None or stored == self.depth_output_unit:
            return frames
        return frames * MM_PER_METRE if stored == "m" else frames / MM_PER_METRE

    def _data_file(self, p: int) -> str:
        return self.meta.episodes[int(self._rows["episode_index"][p])].data_file

    @staticmethod
    def _planes(decoded: np.ndarray, rows: np.ndarray, buffers: BufferPool, uint8: bool) -> Any:
        """``decoded[rows]`` (N, H, W, C uint8) as (T, C, H, W), uint8 or LeRobot's
        float ``frames / 255``, written into one of ``buffers``."""
        import torch

        _, h, w, c = decoded.shape
        if uint8:
            picked = buffers.empty((len(rows), c, h, w), np.uint8)
            np.copyto(picked, decoded[rows].transpose(0, 3, 1, 2))
        else:  # LeRobot's frames / 255 (float32), picked and transposed in the same pass
            picked = buffers.empty((len(rows), c, h, w), np.float32)
            frames_to_planes(decoded, _unit_table(), picked, np.ascontiguousarray(rows, np.int64))
        return torch.from_numpy(picked)

    def _finish(self, item: dict[str, Any]) -> None:
        if self.image_transforms is not None:  # not on distances, as in LeRobot
            for key in self.meta.camera_keys:
                if key in item and key not in self.meta.depth_keys:
                    item[key] = self.image_transforms(item[key])
        if "task_index" in item and self.meta.tasks:
            item["task"] = self.meta.tasks[int(item["task_index"])]

    # ---- per process ----

    def _readers(self) -> ShardReaders:
        if self._shards is None:
            self._shards = ShardReaders(self.meta.files, self.tolerance_s, self.num_threads,
                                        self.max_readers, max(1, len(self.meta.camera_keys)))
        return self._shards

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_shards"] = state["_buffers"] = None  # readers, threads, buffers: per process
        return state

    def close(self) -> None:
        """Close this process's video readers (idempotent; reads reopen them)."""
        if self._shards is not None:
            self._shards.close()
            self._shards = None
        if self._buffers is not None:
            self._buffers.clear()

    def __enter__(self) -> LeRobotDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"LeRobotDataset({self.repo_id!r}, {len(self)} rows of {self.num_episodes} "
                f"episodes, cameras {self.meta.camera_keys}, fps {self.fps})")


@functools.cache
def _unit_table() -> np.ndarray:
    """uint8 -> float32 as LeRobot converts its frames (``uint8 tensor / 255``),
    computed by torch itself so the table is that division, value for value."""
    import torch

    return (torch.arange(256, dtype=torch.uint8) / 255.0).numpy()


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _tensor(torch: Any, value: Any) -> Any:
    """A column value as LeRobot's transform gives it (torch.tensor of the
    Python value: floats float32, ints int64); strings and nested values as they are."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            return torch.from_numpy(value.astype(np.float32))
        return torch.from_numpy(value.copy())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float)):
        return torch.tensor(value)
    return value
