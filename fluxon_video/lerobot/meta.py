"""A LeRobot v3 dataset's metadata: ``meta/info.json``, the episodes and the tasks.

The layout (LeRobot's "v3.0" codebase version): episodes are concatenated
into shard files; ``meta/episodes/chunk-*/file-*.parquet`` holds a row per
episode with its rows in the dataset (``dataset_from_index``,
``dataset_to_index``), its data file (``data/chunk_index``,
``data/file_index``) and, per camera, its video file
(``videos/<camera>/chunk_index``, ``.../file_index``) and where it starts
in it (``videos/<camera>/from_timestamp``). File names come from
``info.json``'s ``data_path`` and ``video_path`` templates.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fluxon_video.errors import FluxonFsDecodeError
from fluxon_video.lerobot.files import DatasetFiles
from fluxon_video.lerobot.tables import concat, read_parquet

if TYPE_CHECKING:
    from fluxon_video.patcher import FluxonFsPatcher

INFO_PATH = "meta/info.json"
EPISODES_DIR = "meta/episodes"
TASKS_PATH = "meta/tasks.parquet"
STATS_PATH = "meta/stats.json"


@dataclass(frozen=True)
class Episode:
    """One episode: its rows ``[from_row, to_row)`` (the ``index`` column), its
    data file, and per camera its video file and start time in it."""

    index: int
    from_row: int
    to_row: int
    data_file: str
    videos: dict[str, tuple[str, float]]

    @property
    def length(self) -> int:
        return self.to_row - self.from_row


class EpisodeTable(list):  # type: ignore[type-arg]
    """The episodes, by episode index: a list of ``Episode`` records that also
    answers LeRobot's column reads, ``meta.episodes["dataset_from_index"]``
    (a column of ``meta/episodes/*.parquet`` as a list), as LeRobot's table does
    for its training script's sampler."""

    def __init__(self, episodes: list[Episode], columns: dict[str, Any]) -> None:
        super().__init__(episodes)
        self.columns = columns

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            if key not in self.columns:
                raise KeyError(f"the episodes table has no column {key!r}")
            column = self.columns[key]
            return column.tolist() if isinstance(column, np.ndarray) else list(column)
        return super().__getitem__(key)


def default_root(repo_id: str) -> Path:
    """LeRobot's cache folder of a dataset: $HF_LEROBOT_HOME/<repo_id>."""
    home = os.environ.get("HF_LEROBOT_HOME")
    hf_home = Path(os.environ.get("HF_HOME", "~/.cache/huggingface"))
    base = Path(home) if home else hf_home / "lerobot"
    return base.expanduser() / repo_id


class LeRobotDatasetMetadata:
    """The metadata of one dataset (LeRobot's class of the same name, reading
    side): ``info``, ``fps``, ``features``, ``video_keys``, ``image_keys``,
    ``depth_keys``, ``camera_keys``, ``episodes``, ``tasks``, ``stats``,
    ``total_episodes``, ``total_frames`` and info.json's other fields by
    LeRobot's names (``robot_type``, ``total_tasks``, ``names``, ``shapes``,
    ``data_path``, ...), ``get_task_index``, ``get_data_file_path``,
    ``get_video_file_path``.
    Constructed as LeRobot's, ``root`` and ``patcher`` as for
    ``LeRobotDataset``; the hub arguments are accepted and ignored."""

    def __init__(self, repo_id: str, root: str | os.PathLike[str] | None = None,
                 revision: str | None = None, force_cache_sync: bool = False,
                 metadata_buffer_size: int = 10, *, repo_type: str = "dataset",
                 token: str | bool | None = None,
                 patcher: FluxonFsPatcher | None = None) -> None:
        del revision, force_cache_sync, metadata_buffer_size, repo_type, token  # the hub's
        self.repo_id = repo_id
        self.root = root if root is not None else default_root(repo_id)
        self.files = DatasetFiles(self.root, patcher)
        self.info: dict[str, Any] = self._info()
        self.fps: int = int(self.info["fps"])
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self.episodes: EpisodeTable = self._episodes()
        self.tasks: list[str] = self._tasks()
        self.stats: dict[str, dict[str, np.ndarray]] = self._stats()

    def _info(self) -> dict[str, Any]:
        name = self.files.name(INFO_PATH)
        try:
            info = json.loads(self.files.read_bytes(INFO_PATH))
        except ValueError as exc:
            raise FluxonFsDecodeError(f"{name}: not JSON ({exc})") from exc
        version = str(info.get("codebase_version", ""))
        if not version.startswith("v3"):
            raise FluxonFsDecodeError(
                f"{name}: codebase_version {version or '(none)'}; fluxon_video.lerobot reads "
                "LeRobot's v3 layout (LeRobot converts older datasets: "
                "lerobot.datasets.v30.convert_dataset_v21_to_v30)")
        missing = [k for k in ("fps", "features", "data_path") if k not in info]
        if missing:
            raise FluxonFsDecodeError(f"{name}: no {', '.join(missing)}")
        return info

    def _episodes(self) -> EpisodeTable:
        paths = self.files.list(EPISODES_DIR, ".parquet")
        if not paths:
            raise FluxonFsDecodeError(f"{self.files.name(EPISODES_DIR)}: no episode tables")
        table = concat([read_parquet(self.files.read_bytes(p), self.files.name(p), "stats/")
                        for p in paths])
        episodes = []
        for row in range(len(table["episode_index"])):
            def cell(column: str) -> Any:
                try:
                    return table[column][row]
                except KeyError:
                    raise FluxonFsDecodeError(
                        f"{self.files.name(EPISODES_DIR)}: no column {column!r}") from None
            data_file = self.info["data_path"].format(
                chunk_index=int(cell("data/chunk_index")), file_index=int(cell("data/file_index")))
            videos = {key: (self.info["video_path"].format(
                video_key=key, chunk_index=int(cell(f"videos/{key}/chunk_index")),
                file_index=int(cell(f"videos/{key}/file_index"))),
                float(cell(f"videos/{key}/from_timestamp"))) for key in self.video_keys}
            episodes.append(Episode(int(cell("episode_index")), int(cell("dataset_from_index")),
                                    int(cell("dataset_to_index")), data_file, videos))
        order = sorted(range(len(episodes)), key=lambda row: episodes[row].index)
        if [episodes[row].index for row in order] != list(range(len(episodes))):
            raise FluxonFsDecodeError(
                f"{self.files.name(EPISODES_DIR)}: episode indices are not 0..{len(episodes) - 1}")
        return EpisodeTable([episodes[row] for row in order],
                            {k: v[order] if isinstance(v, np.ndarray) else [v[i] for i in order]
                             for k, v in table.items()})

    def _tasks(self) -> list[str]:
        """Task strings by task_index (pandas writes the ``task`` index as a column)."""
        try:
            data = self.files.read_bytes(TASKS_PATH)
        except FileNotFoundError:  # FluxonFsNotFoundError: a dataset without tasks
            return []
        table = read_parquet(data, self.files.name(TASKS_PATH))
        names = table.get("task", table.get("__index_level_0__"))
        if names is None or "task_index" not in table:
            raise FluxonFsDecodeError(
                f"{self.files.name(TASKS_PATH)}: no task and task_index columns")
        tasks = [""] * (int(np.max(table["task_index"])) + 1 if len(names) else 0)
        for name, index in zip(names, table["task_index"]):
            tasks[int(index)] = str(name)
        return tasks

    def _stats(self) -> dict[str, dict[str, np.ndarray]]:
        """``meta/stats.json`` as numpy arrays (what policies normalise with);
        empty when the dataset has none."""
        try:
            raw = json.loads(self.files.read_bytes(STATS_PATH))
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise FluxonFsDecodeError(f"{self.files.name(STATS_PATH)}: not JSON ({exc})") from exc
        return {key: {name: np.asarray(value) for name, value in values.items()}
                for key, values in raw.items() if isinstance(values, dict)}

    # ---- LeRobot's names ----

    @property
    def depth_keys(self) -> list[str]:
        """Cameras that are depth maps (LeRobot's rule: ``is_depth_map`` in the
        feature's ``info``, or the older ``video.is_depth_map`` there or in
        ``video_info``)."""
        return [k for k, f in self.features.items()
                if (f.get("info") or {}).get("is_depth_map")
                or (f.get("info") or {}).get("video.is_depth_map")
                or (f.get("video_info") or {}).get("video.is_depth_map")]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") == "image"]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") == "video"]

    @property
    def camera_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]

    @property
    def has_language_columns(self) -> bool:
        """Whether rows carry LeRobot's language annotations (which LeRobot's
        training script collates with its own function)."""
        return any(k in self.features for k in ("language_persistent", "language_events"))

    @property
    def total_episodes(self) -> int:
        return len(self.episodes)

    @property
    def total_frames(self) -> int:
        return sum(e.length for e in self.episodes)

    # info.json's other fields, as LeRobot's metadata names them

    @property
    def robot_type(self) -> str | None:
        return self.info.get("robot_type")

    @property
    def total_tasks(self) -> int:
        return int(self.info.get("total_tasks", len(self.tasks)))

    @property
    def chunks_size(self) -> int | None:
        return self.info.get("chunks_size")

    @property
    def data_files_size_in_mb(self) -> int | None:
        return self.info.get("data_files_size_in_mb")

    @property
    def video_files_size_in_mb(self) -> int | None:
        return self.info.get("video_files_size_in_mb")

    @property
    def data_path(self) -> str:
        return str(self.info["data_path"])

    @property
    def video_path(self) -> str | None:
        return self.info.get("video_path")

    @property
    def names(self) -> dict[str, Any]:
        """Each feature's ``names`` (the dimensions of vector features)."""
        return {key: f.get("names") for key, f in self.features.items()}

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {key: tuple(f["shape"]) for key, f in self.features.items()}

    def get_task_index(self, task: str) -> int | None:
        """The ``task_index`` of a task string; None for a task not in the dataset."""
        return self.tasks.index(task) if task in self.tasks else None

    def get_data_file_path(self, ep_index: int) -> Path:
        """The episode's data file, relative to the dataset's root."""
        return Path(self._episode(ep_index).data_file)

    def get_video_file_path(self, ep_index: int, vid_key: str) -> Path:
        """The episode's video file of camera ``vid_key``, relative to the root."""
        episode = self._episode(ep_index)
        if vid_key not in episode.videos:
            raise KeyError(f"{vid_key!r} is not a video camera of the dataset "
                           f"({', '.join(self.video_keys)})")
        return Path(episode.videos[vid_key][0])

    def _episode(self, ep_index: int) -> Episode:
        if not 0 <= ep_index < len(self.episodes):
            raise IndexError(f"Episode index {ep_index} out of range. Episodes: "
                             f"{len(self.episodes)}")
        return self.episodes[ep_index]

    def __repr__(self) -> str:
        return (f"LeRobotDatasetMetadata({self.repo_id or self.files!r}: {self.total_episodes} "
                f"episodes, {self.total_frames} frames at {self.fps} fps, cameras "
                f"{self.camera_keys})")
