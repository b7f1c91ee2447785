"""fluxon_video.lerobot against LeRobot's v3 layout (tests/lerobot_data.py writes
it as LeRobot does: episodes joined per shard, float32 row times, AV1 with a
keyframe every 2 frames, and H.264 with B-frames; an image camera's PNGs in
the data tables).

Oracles: every frame by the ffmpeg CLI and its time by ffprobe; a row's frame
is the one whose time is nearest ``from_timestamp + timestamp`` (LeRobot's
rule); an image camera's frames are its PNGs decoded by the ffmpeg CLI; the
tables are read back by pyarrow.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow")
torch = pytest.importorskip("torch")
import pyarrow.parquet as pq  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import fluxon_video as fv  # noqa: E402
from fluxon_video.lerobot import LeRobotDataset, LeRobotDatasetMetadata  # noqa: E402
from fluxon_video.testing import AgentProcess  # noqa: E402
from fluxon_video.fs.config import FluxonFsExport  # noqa: E402
from tests.helpers import IDENTITIES, agent_config_text, check_rank_shards  # noqa: E402
from tests.lerobot_data import (  # noqa: E402
    CAMERAS, DEPTH_CAMERAS, DEPTH_QUANTIZER, FPS, IMAGE_CAMERAS, TASKS, Layout, language_of,
    write_dataset)  # noqa: E402
from tests.media import (  # noqa: E402
    ffprobe_frame_times, reference_frames, reference_gray_samples)


@pytest.fixture(scope="module", params=["av1", "h264"])
def dataset_root(request, tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp(f"lerobot_{request.param}") / "ds",
                         request.param)


@lru_cache(maxsize=None)
def cli_frames(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(every frame by the ffmpeg CLI at native size, each frame's time by ffprobe)."""
    size = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                           "stream=width,height", "-of", "csv=p=0", str(path)],
                          check=True, capture_output=True, text=True).stdout.split(",")
    width, height = int(size[0]), int(size[1])
    return reference_frames(path, height, width), ffprobe_frame_times(path)


def table(path: Path) -> dict:
    return pq.read_table(path).to_pydict()


@lru_cache(maxsize=None)
def tables_of(root: Path) -> tuple[dict, dict]:
    """(the data rows, the episodes table) of a dataset, read by pyarrow once."""
    rows: dict[str, list] = {}
    for f in sorted((root / "data").rglob("*.parquet")):
        for k, v in table(f).items():
            rows.setdefault(k, []).extend(v)
    return rows, table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")


@lru_cache(maxsize=None)
def cli_images(root: Path, cam: str) -> np.ndarray:
    """An image camera's frame of every row (rows in table order), its PNGs
    decoded by the ffmpeg CLI."""
    rows, _ = tables_of(root)
    h, w = IMAGE_CAMERAS[cam]
    raw = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "png_pipe", "-i", "-",
                          "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         input=b"".join(cell["bytes"] for cell in rows[cam]),
                         check=True, capture_output=True).stdout
    frames = np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)
    assert len(frames) == len(rows[cam])
    return frames


def expected_item(root: Path, idx: int, delta: dict | None = None) -> dict:
    """Row ``idx`` of the dataset as LeRobot defines it, from the files alone."""
    rows, eps = tables_of(root)
    e = rows["episode_index"][idx]
    start, stop = eps["dataset_from_index"][e], eps["dataset_to_index"][e]
    want = {"index": idx, "episode_index": e, "task": TASKS[rows["task_index"][idx]]}
    for cam in CAMERAS:
        offsets = [round(d * FPS) for d in (delta or {}).get(cam, [0])]
        at = [min(max(idx + o, start), stop - 1) for o in offsets]
        video = root / "videos" / cam / "chunk-000" / f"file-{eps[f'videos/{cam}/file_index'][e]:03d}.mp4"
        frames, pts = cli_frames(video)
        times = [eps[f"videos/{cam}/from_timestamp"][e] + float(np.float32(rows["timestamp"][q]))
                 for q in at]
        nearest = [int(np.argmin(np.abs(pts - t))) for t in times]
        want[cam] = frames[nearest]
        if cam in (delta or {}):
            want[f"{cam}_is_pad"] = [not start <= idx + o < stop for o in offsets]
    for cam in IMAGE_CAMERAS:  # LeRobot keeps a window's T even for one frame
        offsets = [round(d * FPS) for d in (delta or {}).get(cam, [0])]
        frames = cli_images(root, cam)[[min(max(idx + o, start), stop - 1) for o in offsets]]
        want[cam] = frames if cam in (delta or {}) else frames[0]
        if cam in (delta or {}):
            want[f"{cam}_is_pad"] = [not start <= idx + o < stop for o in offsets]
    for key in ("observation.state", "action"):
        if key in (delta or {}):
            offsets = [round(d * FPS) for d in delta[key]]
            want[key] = np.array([rows[key][min(max(idx + o, start), stop - 1)] for o in offsets],
                                 np.float32)
            want[f"{key}_is_pad"] = [not start <= idx + o < stop for o in offsets]
        else:
            want[key] = np.array(rows[key][idx], np.float32)
    return want


def as_uint8_hwc(frames: torch.Tensor) -> np.ndarray:
    """LeRobot's float CHW in [0, 1] back to uint8 HWC (exact: k / 255 in float32)."""
    array = frames.numpy()
    assert array.dtype == np.float32 and 0 <= array.min() and array.max() <= 1
    out = np.rint(array * 255).astype(np.uint8)
    assert np.array_equal(out.astype(np.float32) / np.float32(255), array)  # what LeRobot gives
    return np.moveaxis(out, -3, -1)


def check_item(item: dict, want: dict, uint8: bool = False) -> None:
    assert int(item["index"]) == want["index"] and item["index"].dtype == torch.int64
    assert int(item["episode_index"]) == want["episode_index"]
    assert item["task"] == want["task"]
    assert item["timestamp"].dtype == torch.float32
    for key in ("observation.state", "action"):
        assert np.array_equal(item[key].numpy(), want[key]), key
        if f"{key}_is_pad" in want:
            assert item[f"{key}_is_pad"].tolist() == want[f"{key}_is_pad"]
    for cam in CAMERAS:
        got = item[cam]
        frames = np.moveaxis(got.numpy(), -3, -1) if uint8 else as_uint8_hwc(got)
        expected = want[cam] if frames.ndim == 4 else want[cam][0]
        assert np.array_equal(frames, expected), cam
        if f"{cam}_is_pad" in want:
            assert item[f"{cam}_is_pad"].tolist() == want[f"{cam}_is_pad"]
    for cam in IMAGE_CAMERAS:  # float (LeRobot's ToTensor) whatever return_uint8 says
        assert np.array_equal(as_uint8_hwc(item[cam]), want[cam]), cam
        if f"{cam}_is_pad" in want:
            assert item[f"{cam}_is_pad"].tolist() == want[f"{cam}_is_pad"]


def test_every_row_is_the_nearest_frame(dataset_root):
    """Every row of both cameras, the frame nearest its float32 time, as LeRobot
    gives it (float32 CHW in [0, 1]); its columns, its task."""
    with LeRobotDataset("test/pusht", root=dataset_root) as ds:
        assert len(ds) == ds.meta.total_frames == 54 and ds.num_episodes == 5 and ds.fps == FPS
        assert ds.meta.video_keys == list(CAMERAS)
        assert ds.meta.camera_keys == [*CAMERAS, *IMAGE_CAMERAS]
        items = ds.__getitems__(list(range(len(ds))))
        for idx, item in enumerate(items):
            check_item(item, expected_item(dataset_root, idx))
            h, w = CAMERAS["observation.images.front"]
            assert item["observation.images.front"].shape == (3, h, w)
        assert all(torch.equal(ds[i]["observation.images.wrist"], items[i]["observation.images.wrist"])
                   for i in (0, 13, 14, 53, -1))


def test_float32_row_times_fall_below_their_frames(dataset_root):
    """The trap the tolerance is for: some rows' float32 times lie below their
    frame's pts, so "the frame on screen at t" would be the one before; with
    the default tolerance every such row still gets its own frame."""
    ds = LeRobotDataset("test/pusht", root=dataset_root)
    eps = ds.meta.episodes
    below = 0
    for idx in range(len(ds)):
        e = eps[int(ds._rows["episode_index"][idx])]
        relpath, start = e.videos["observation.images.front"]
        _, pts = cli_frames(dataset_root / relpath)
        t = start + float(ds._rows["timestamp"][idx])
        own = int(np.argmin(np.abs(pts - t)))
        below += t < pts[own]
    assert below > 0
    strict = LeRobotDataset("test/pusht", root=dataset_root, tolerance_s=0)
    with pytest.raises(fv.FluxonFsFrameIndexError, match="tolerance_s=0"):
        strict.__getitems__(list(range(len(ds))))
    ds.close()
    strict.close()


DELTA = {"observation.images.front": [-0.1, -1 / 30, 0.0],
         "observation.images.wrist": [0.0, 0.2],
         "observation.images.top": [-2 / 30, 0.0],
         "observation.state": [-1 / 30, 0.0], "action": [0.0, 1 / 30, 2 / 30, 0.5]}


@pytest.mark.parametrize("uint8", [False, True])
def test_delta_timestamps_pad_at_episode_edges(dataset_root, uint8):
    """Windows clamp to the episode with *_is_pad masks (LeRobot's padding),
    every frame of every window the CLI's; return_uint8 gives uint8 CHW."""
    with LeRobotDataset("test/pusht", root=dataset_root, delta_timestamps=DELTA,
                        return_uint8=uint8) as ds:
        rows = [0, 1, 3, 13, 14, 22, 23, 42, 53]  # episode starts and ends
        for idx, item in zip(rows, ds.__getitems__(rows)):
            want = expected_item(dataset_root, idx, DELTA)
            check_item(item, want, uint8)
            assert item["observation.images.front"].shape[0] == 3  # (T, C, H, W)
            assert item["observation.images.front"].dtype == (torch.uint8 if uint8 else torch.float32)


def test_frame_buffers_are_reused_only_once_released(dataset_root):
    """A batch's frame buffers serve the next batch once the first batch's
    tensors are gone; a frame kept (a slice of an item's clip) keeps its
    buffer and its pixels while later batches are read."""
    with LeRobotDataset("test/pusht", root=dataset_root, delta_timestamps=DELTA) as ds:
        first = ds.__getitems__([13, 14])
        kept = first[1]["observation.images.front"][2]  # a view of the clip's last frame
        del first
        for _ in range(3):
            ds.__getitems__([40, 41])  # same shapes: the freed buffers
        assert ds._buffers is not None and ds._buffers.reused >= 4
        want = expected_item(dataset_root, 14, DELTA)["observation.images.front"][2]
        assert np.array_equal(as_uint8_hwc(kept), want)


def test_episodes_subset(dataset_root):
    with LeRobotDataset("test/pusht", root=dataset_root, episodes=[3, 1]) as ds:
        assert len(ds) == 9 + 8 and ds.num_episodes == 2
        assert [int(ds[i]["episode_index"]) for i in (0, 8, 9, 16)] == [1, 1, 3, 3]
        check_item(ds[9], expected_item(dataset_root, 34))


def test_the_names_lerobots_training_script_reads(dataset_root):
    """What lerobot-train reads off the dataset it makes, as LeRobot's dataset
    has them: the episodes table by column (its sampler's episode bounds), the
    row positions of an episode subset, whether rows carry language; and the
    metadata's other names."""
    _, eps = tables_of(dataset_root)
    with LeRobotDataset("test/pusht", root=dataset_root, episodes=[3, 1]) as ds:
        for column in ("dataset_from_index", "dataset_to_index", "episode_index",
                       "videos/observation.images.front/from_timestamp"):
            assert ds.meta.episodes[column] == eps[column], column
        assert ds.meta.episodes[1].from_row == eps["dataset_from_index"][1]
        with pytest.raises(KeyError, match="no column 'surprise'"):
            ds.meta.episodes["surprise"]
        mapping = ds.absolute_to_relative_idx
        assert len(mapping) == len(ds)
        assert all(int(ds[p]["index"]) == index for index, p in mapping.items()
                   if p in (0, 8, 9, 16))
        assert sorted(mapping.values()) == list(range(len(ds)))
        assert ds.meta.has_language_columns is False
    with LeRobotDataset("test/pusht", root=dataset_root) as ds:
        assert ds.absolute_to_relative_idx is None
    # the script builds the metadata first, as LeRobot's class is built
    meta = LeRobotDatasetMetadata("test/pusht", dataset_root, "v3.0", repo_type="dataset")
    assert (meta.fps, meta.features) == (FPS, ds.meta.features) and meta.root == dataset_root
    # info.json's other fields and the path helpers, by LeRobot's names
    assert (meta.robot_type, meta.total_tasks, meta.chunks_size) == ("test", len(TASKS), 1000)
    assert meta.shapes["observation.images.front"] == (*CAMERAS["observation.images.front"], 3)
    assert meta.names["action"] == ["x", "y"]
    assert [meta.get_task_index(t) for t in (TASKS[1], "no such task")] == [1, None]
    assert meta.get_data_file_path(3) == Path("data/chunk-000/file-001.parquet")
    assert meta.get_video_file_path(3, "observation.images.front") == \
        Path("videos/observation.images.front/chunk-000/file-001.mp4")
    with pytest.raises(IndexError, match="Episode index 5 out of range"):
        meta.get_data_file_path(5)
    with pytest.raises(KeyError, match="not a video camera"):
        meta.get_video_file_path(0, "observation.images.top")


def test_language_columns_as_lerobot_gives_them(tmp_path_factory):
    """LeRobot's language annotations (lists of records, JSON ``tool_calls``) come
    as LeRobot's dataset hands them out: Python records, the JSON parsed, in
    every row; the metadata says the rows carry language."""
    pa = pytest.importorskip("pyarrow")
    if not hasattr(pa, "json_"):
        pytest.skip("pyarrow without Arrow's json type")
    layout = Layout(lengths=(6, 5), data_files=(0, 1), video_files=((0, 0), (0, 0)),
                    language=True)
    root = write_dataset(tmp_path_factory.mktemp("lerobot_language") / "ds", "h264", layout)
    with LeRobotDataset("test/language", root=root) as ds:
        assert ds.meta.has_language_columns is True
        items = ds.__getitems__(list(range(len(ds))))
        assert sum(bool(item["language_events"]) for item in items) == 3  # rows 0, 5, 10
        for item in items:
            want = language_of(int(item["index"]))
            assert {k: item[k] for k in want} == want


@pytest.fixture(scope="module")
def depth_root(tmp_path_factory) -> Path:
    """A dataset with a depth camera over two video files (tests/lerobot_data.py)."""
    layout = Layout(lengths=(6, 5, 7), data_files=(0, 0, 1),
                    video_files=((0, 1, 1), (0, 0, 0)), depth=True)
    return write_dataset(tmp_path_factory.mktemp("lerobot_depth") / "ds", "h264", layout)


@lru_cache(maxsize=None)
def cli_depth_codes(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(every frame's 12-bit codes by the ffmpeg CLI, each frame's time by ffprobe)."""
    h, w = next(iter(DEPTH_CAMERAS.values()))
    return reference_gray_samples(path, "gray12le", h, w), ffprobe_frame_times(path)


def distances(codes: np.ndarray, unit: str, use_log: bool) -> np.ndarray:
    """LeRobot's dequantize_depth, written out in numpy float32 from its docs: the
    code scaled onto [depth_min, depth_max] (log: onto the logs of the distances
    plus shift), clamped, metres or whole millimetres."""
    lo, hi, shift = (DEPTH_QUANTIZER[f"video.{k}"] for k in ("depth_min", "depth_max", "shift"))
    if use_log:
        scale, offset = (np.log(hi + shift) - np.log(lo + shift)) / 4095, np.log(lo + shift)
    else:
        scale, offset = (hi - lo) / 4095, lo
    out = codes.astype(np.float32) * np.float32(scale) + np.float32(offset)
    if use_log:
        out = np.exp(out) - np.float32(shift)
    out = np.clip(out, np.float32(lo), np.float32(hi))[:, None]
    return np.clip(np.rint(out * np.float32(1000)), 0, 65535) if unit == "mm" else out


@pytest.mark.parametrize("unit", ["mm", "m"])
def test_depth_cameras_are_distances_as_lerobot_gives_them(depth_root, unit):
    """A depth camera's frames are its 12-bit codes (the CLI's decode, the frame
    nearest each row's time) turned into distances by LeRobot's quantizer:
    float32 (1, H, W), or (T, 1, H, W) over a window, in mm or m; its stats are
    rescaled into that unit; image transforms leave it alone; RGB cameras
    beside it are as before."""
    import shutil

    depth = next(iter(DEPTH_CAMERAS))
    stats = {depth: {"mean": [1500.0], "count": [30]}}
    (depth_root / "meta" / "stats.json").write_text(json.dumps(stats))
    rows, eps = tables_of(depth_root)
    delta = {depth: [-1 / 30, 0.0, 2 / 30]}
    with LeRobotDataset("test/depth", root=depth_root, delta_timestamps=delta,
                        depth_output_unit=unit, image_transforms=lambda t: t * 0) as ds:
        assert ds.meta.depth_keys == [depth]
        assert float(ds.meta.stats[depth]["mean"][0]) == (1500.0 if unit == "mm" else 1.5)
        assert int(ds.meta.stats[depth]["count"][0]) == 30
        items = ds.__getitems__(list(range(len(ds))))
    for idx, item in enumerate(items):
        e = rows["episode_index"][idx]
        start, stop = eps["dataset_from_index"][e], eps["dataset_to_index"][e]
        video = depth_root / "videos" / depth / "chunk-000" / \
            f"file-{eps[f'videos/{depth}/file_index'][e]:03d}.mp4"
        codes, pts = cli_depth_codes(video)
        at = [min(max(idx + round(d * FPS), start), stop - 1) for d in delta[depth]]
        times = [eps[f"videos/{depth}/from_timestamp"][e] + float(np.float32(rows["timestamp"][q]))
                 for q in at]
        want = distances(codes[[int(np.argmin(np.abs(pts - t))) for t in times]], unit, False)
        got = item[depth]
        assert got.dtype == torch.float32 and got.shape == (3, 1, *DEPTH_CAMERAS[depth])
        assert np.array_equal(got.numpy(), want), idx
        assert item[f"{depth}_is_pad"].tolist() == [not start <= idx + round(d * FPS) < stop
                                                     for d in delta[depth]]
        assert item["observation.images.front"].abs().sum() == 0  # transformed; depth not
    # LeRobot's default quantizer is logarithmic: the same codes, another curve
    copy = depth_root.parent / f"log-{unit}"
    shutil.copytree(depth_root, copy, dirs_exist_ok=True)
    info = json.loads((copy / "meta" / "info.json").read_text())
    info["features"][depth]["info"]["video.use_log"] = True
    (copy / "meta" / "info.json").write_text(json.dumps(info))
    with LeRobotDataset("test/depth", root=copy, depth_output_unit=unit) as ds:
        got = ds[4][depth]
    assert got.shape == (1, *DEPTH_CAMERAS[depth])
    codes, pts = cli_depth_codes(copy / "videos" / depth / "chunk-000" / "file-000.mp4")
    t = eps[f"videos/{depth}/from_timestamp"][0] + float(np.float32(rows["timestamp"][4]))
    want = distances(codes[[int(np.argmin(np.abs(pts - t)))]], unit, True)[0]
    assert np.allclose(got.numpy(), want, rtol=1e-6, atol=1.0 if unit == "mm" else 0)
    with pytest.raises(fv.FluxonFsConfigError, match="depth_output_unit"):
        LeRobotDataset("test/depth", root=depth_root, depth_output_unit="cm")


def depth_image(index: int, kind: str) -> np.ndarray:
    """Row ``index``'s depth map as recorded: uint16 mm or float32 m."""
    rng = np.random.default_rng(index)
    if kind == "u16":
        return rng.integers(100, 9000, (12, 20), dtype=np.uint16)
    return rng.uniform(0.1, 9.0, (12, 20)).astype(np.float32)


def test_depth_images_as_lerobot_gives_them(dataset_root, tmp_path):
    """Depth maps stored as images (LeRobot writes them as TIFF: uint16 millimetres,
    float32 metres) come as their values, float32 (1, H, W) or (T, 1, H, W), in
    depth_output_unit; the oracle is the arrays the TIFFs were made from."""
    import io
    import shutil

    import pyarrow as pa
    from PIL import Image

    copy = tmp_path / "ds"
    shutil.copytree(dataset_root, copy)
    for data in sorted((copy / "data").rglob("*.parquet")):
        table = pq.read_table(data)
        for kind in ("u16", "f32"):
            cells = []
            for index in table.column("index").to_pylist():
                out = io.BytesIO()
                Image.fromarray(depth_image(index, kind)).save(out, format="TIFF")
                cells.append({"bytes": out.getvalue(), "path": f"frame-{index:06d}.tiff"})
            table = table.append_column(f"observation.depth_{kind}", pa.array(
                cells, pa.struct([("bytes", pa.binary()), ("path", pa.string())])))
        pq.write_table(table, data)
    info = json.loads((copy / "meta" / "info.json").read_text())
    for kind, unit in (("u16", "mm"), ("f32", "m")):
        info["features"][f"observation.depth_{kind}"] = {
            "dtype": "image", "shape": [12, 20, 1], "names": ["height", "width", "channels"],
            "info": {"is_depth_map": True, "depth_unit": unit}}
    (copy / "meta" / "info.json").write_text(json.dumps(info))
    delta = {"observation.depth_f32": [-1 / 30, 0.0]}
    for unit in ("mm", "m"):
        with LeRobotDataset("x", root=copy, depth_output_unit=unit, delta_timestamps=delta,
                            image_transforms=lambda t: t * 0) as ds:
            assert set(ds.meta.depth_keys) == {"observation.depth_u16", "observation.depth_f32"}
            for idx, item in zip([0, 14, 30], ds.__getitems__([0, 14, 30])):
                u16 = depth_image(idx, "u16").astype(np.float32)[None]
                want = u16 if unit == "mm" else u16 / np.float32(1000)
                assert item["observation.depth_u16"].dtype == torch.float32
                assert np.array_equal(item["observation.depth_u16"].numpy(), want), idx
                e = int(item["episode_index"])
                first = tables_of(dataset_root)[1]["dataset_from_index"][e]
                f32 = np.stack([depth_image(max(idx - 1, first), "f32"), depth_image(idx, "f32")])
                want = f32[:, None] if unit == "m" else f32[:, None] * np.float32(1000)
                assert np.array_equal(item["observation.depth_f32"].numpy(), want), idx
                assert item["observation.depth_f32_is_pad"].tolist() == [idx == first, False]


def test_a_dataloader_batches_by_shard(dataset_root):
    """Spawned DataLoader workers (the dataset pickles without its readers):
    batches equal the items read one by one."""
    ds = LeRobotDataset("test/pusht", root=dataset_root, delta_timestamps=DELTA)
    assert pickle.loads(pickle.dumps(ds))._shards is None
    loader = DataLoader(ds, batch_size=6, num_workers=2, multiprocessing_context="spawn",
                        shuffle=False)
    seen = 0
    for batch in loader:
        for k in range(len(batch["index"])):
            idx = int(batch["index"][k])
            want = expected_item(dataset_root, idx, DELTA)
            check_item({key: (v[k] if not isinstance(v, list) else v[k]) for key, v in batch.items()},
                       want)
            seen += 1
    assert seen == len(ds)
    ds.close()


class _ThreadsProbe(torch.utils.data.Dataset):
    """What ShardReaders would size its threads to, in the process that reads."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int) -> list[int]:
        from fluxon_video.lerobot.frames import _parallel

        return [_parallel(1), _parallel(3)]


def test_the_main_process_decodes_on_every_core_and_a_worker_per_camera(dataset_root):
    """num_workers=0 (or ds[i]): a batch's files and images are shared out over a
    thread per core (nothing else decodes meanwhile); in a DataLoader worker,
    a thread per camera (the loader's processes share the cores out)."""
    from fluxon_video.lerobot.frames import MAIN_PROCESS_THREADS
    from fluxon_video.validation import thread_count

    cores = min(thread_count("auto"), MAIN_PROCESS_THREADS)
    ds = LeRobotDataset("test/pusht", root=dataset_root)
    ds[0]
    cameras = len(ds.meta.camera_keys)
    assert ds._shards.parallel == max(cameras, cores)
    assert _ThreadsProbe()[0] == [max(1, cores), max(3, cores)]
    worker = DataLoader(_ThreadsProbe(), batch_size=None, num_workers=1,
                        multiprocessing_context="fork")
    assert [list(v) for v in worker] == [[1, 3]]
    # a forked worker of a dataset the main process read: its own count
    loader = DataLoader(ds, batch_size=2, num_workers=1, multiprocessing_context="fork",
                        collate_fn=lambda items: ds._shards.parallel)
    assert next(iter(loader)) == cameras
    ds.close()


def test_through_an_agent(dataset_root, tmp_path):
    """The dataset in an export, read through a real agent: EXPORT:PREFIX and an
    absolute path under the export's root give the same items as the local folder."""
    config = tmp_path / "agent.toml"
    config.write_text(agent_config_text(dataset_root.parent))
    config.chmod(0o600)
    with AgentProcess(config) as agent:
        patcher = fv.FluxonFsPatcher(
            exports=[FluxonFsExport("train", str(dataset_root.parent), agent_url=agent.url,
                                    allow=["alice"])],
            identities=IDENTITIES, identity="alice")
        try:
            rows = [0, 13, 14, 40, 53]
            local = LeRobotDataset("t", root=dataset_root, delta_timestamps=DELTA)
            for root in ("train:ds", str(dataset_root)):
                meta = LeRobotDatasetMetadata("t", root=root, patcher=patcher)
                assert meta.total_frames == local.meta.total_frames
                assert meta.files.patcher is patcher
                with LeRobotDataset("t", root=root, patcher=patcher,
                                    delta_timestamps=DELTA) as remote:
                    assert len(remote) == len(local)
                    for a, b in zip(remote.__getitems__(rows), local.__getitems__(rows)):
                        assert a.keys() == b.keys()
                        for key in a:
                            same = torch.equal(a[key], b[key]) if torch.is_tensor(a[key]) \
                                else a[key] == b[key]
                            assert same, key
            local.close()
            assert patcher.stats().remote_bytes > 0
        finally:
            patcher.close()


def test_bad_datasets_and_arguments(dataset_root, tmp_path):
    with pytest.raises(fv.FluxonFsNotFoundError, match="no such dataset directory"):
        LeRobotDataset("x", root=tmp_path / "missing")
    old = tmp_path / "old"
    (old / "meta").mkdir(parents=True)
    (old / "meta" / "info.json").write_text('{"codebase_version": "v2.1", "fps": 30}')
    with pytest.raises(fv.FluxonFsDecodeError, match="v2.1"):
        LeRobotDataset("x", root=old)
    with pytest.raises(fv.FluxonFsConfigError, match="multiple of 1/fps"):
        LeRobotDataset("x", root=dataset_root, delta_timestamps={"action": [0.01]})
    with pytest.raises(fv.FluxonFsConfigError, match="not a feature"):
        LeRobotDataset("x", root=dataset_root, delta_timestamps={"nope": [0.0]})
    with pytest.raises(fv.FluxonFsConfigError, match="not in the dataset"):
        LeRobotDataset("x", root=dataset_root, episodes=[7])
    with pytest.raises(fv.FluxonFsConfigError):
        LeRobotDataset("x", root=dataset_root, tolerance_s=-1)
    with LeRobotDataset("x", root=dataset_root) as ds, pytest.raises(IndexError):
        ds[len(ds)]


def test_stats_and_unsupported_features(dataset_root, tmp_path):
    """meta/stats.json as numpy arrays; a camera said to be a depth map that is
    not one (an RGB image, an RGB video) fails its reads, saying so."""
    import json as _json
    import shutil

    copy = tmp_path / "ds"
    shutil.copytree(dataset_root, copy)
    (copy / "meta" / "stats.json").write_text(_json.dumps(
        {"action": {"mean": [0.5, 0.25], "std": [1.0, 2.0]}}))
    with LeRobotDataset("x", root=copy) as ds:
        assert np.array_equal(ds.meta.stats["action"]["std"], [1.0, 2.0])
    info = _json.loads((copy / "meta" / "info.json").read_text())
    features = _json.loads(_json.dumps(info))
    features["features"]["observation.images.top"]["info"] = {"is_depth_map": True}
    (copy / "meta" / "info.json").write_text(_json.dumps(features))
    with LeRobotDataset("x", root=copy) as ds, pytest.raises(
            fv.FluxonFsDecodeError, match="index 0, observation.images.top: a RGB image where "
                                          "a depth map"):
        ds[0]
    # a depth camera whose video is not gray (here an RGB one): its reads say so
    features = _json.loads(_json.dumps(info))
    features["features"]["observation.images.wrist"]["info"]["is_depth_map"] = True
    (copy / "meta" / "info.json").write_text(_json.dumps(features))
    with LeRobotDataset("x", root=copy) as ds, \
            pytest.raises(fv.FluxonFsDecodeError, match="file-000.mp4: a yuv420p video"):
        ds[0]


@pytest.mark.parametrize("env, kept", [({}, 8), ({"PILLOW_BLOCKS_MAX": "0"}, 0)])
def test_image_decodes_reuse_pillows_blocks_unless_the_user_says(dataset_root, env, kept):
    """Decoding an image camera keeps Pillow's freed image blocks for reuse (its
    default keeps none, and each image was then memory faulted in afresh), unless
    $PILLOW_BLOCKS_MAX is set: the user's setting stands."""
    import os
    import sys

    code = ("from PIL import Image\n"
            "from fluxon_video.lerobot import LeRobotDataset\n"
            "before = Image.core.get_blocks_max()\n"
            f"ds = LeRobotDataset('test/pusht', root={str(dataset_root)!r})\n"
            "ds[0]\n"
            "print(before, Image.core.get_blocks_max())\n")
    environ = {k: v for k, v in os.environ.items() if k != "PILLOW_BLOCKS_MAX"}
    out = subprocess.run([sys.executable, "-c", code], env={**environ, **env}, check=True,
                         capture_output=True, text=True).stdout.split()
    assert out == ["0", str(kept)]


def test_a_bad_image_names_its_file_row_and_camera(dataset_root, tmp_path):
    """An image cell that is not an image, is missing, or is 16-bit (a depth map
    stored as an image) fails the item that reads it, naming the data file, the
    row and the camera; the other rows still read."""
    import shutil

    import pyarrow as pa

    copy = tmp_path / "ds"
    shutil.copytree(dataset_root, copy)
    data = copy / "data" / "chunk-000" / "file-000.parquet"
    rows = pq.read_table(data)
    deep = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                           "testsrc=size=56x40", "-frames:v", "1", "-pix_fmt", "gray16be",
                           "-f", "image2pipe", "-c:v", "png", "-"],
                          check=True, capture_output=True).stdout
    cells = rows.column("observation.images.top").to_pylist()
    cells[2] = {"bytes": b"not a png", "path": "frame-000002.png"}
    cells[4] = None
    cells[6] = {"bytes": deep, "path": "frame-000006.png"}
    column = rows.schema.get_field_index("observation.images.top")
    pq.write_table(rows.set_column(column, "observation.images.top",
                                   pa.array(cells, rows.schema.field(column).type)), data)
    with LeRobotDataset("x", root=copy) as ds:
        for index, why in ((2, "not a readable image"), (4, "the row has no image"),
                           (6, "a I;16B? image .* a depth map")):
            with pytest.raises(fv.FluxonFsDecodeError,
                               match=f"file-000.parquet: index {index}, "
                                     f"observation.images.top: {why}"):
                ds[index]
        check_item(ds[3], expected_item(dataset_root, 3))


class _PlannedBatches:
    """A batch sampler with a fixed plan (what SeededBatchSampler gives, chosen here
    so that the second batch reads a shard file the first one does not)."""

    def __init__(self, order: list[list[int]]) -> None:
        self.order = order

    def __iter__(self):
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)

    def planned_batches(self) -> list[list[int]]:
        return self.order

    def plan_version(self) -> int:
        return 0


def second_batch(dataset_root: Path, ahead: bool):
    """Read a plan's first batch (rows of the front camera's file 0), then its
    second (rows of file 1): file 1's bytes read before that read, and its items."""
    front1 = "videos/observation.images.front/chunk-000/file-001.mp4"
    order = [[0, 5], [40, 50], [10, 20]]
    with LeRobotDataset("t", root=dataset_root, delta_timestamps=DELTA) as ds:
        if ahead:
            ds.plan_batches(_PlannedBatches(order))
        ds.__getitems__(order[0])
        shards = ds._shards
        shards.wait_prefetch()
        before = 0
        if front1 in shards._readers:  # opened ahead; its pages arrive meanwhile
            source = shards._readers[front1][0]._byte_source
            deadline = time.monotonic() + 60
            while (before := source.stats()["bytes_fetched"]) == 0:
                assert time.monotonic() < deadline, "the pages fetched ahead never arrived"
                time.sleep(0.01)
        items = ds.__getitems__(order[1])
        total = shards._readers[front1][0]._byte_source.stats()["bytes_fetched"]
        return before, total, items


def test_a_planned_sampler_reads_the_next_batch_ahead(dataset_root):
    """plan_batches: while a batch decodes, the shard file of the next one is
    opened and its frames' bytes fetched; never a byte the read does not read."""
    before, total, items = second_batch(dataset_root, ahead=True)
    before_off, total_off, items_off = second_batch(dataset_root, ahead=False)
    assert before_off == 0 and 0 < before <= total
    assert total == total_off  # nothing fetched that the read would not have
    for idx, item, plain in zip([40, 50], items, items_off):
        check_item(item, expected_item(dataset_root, idx, DELTA))
        assert all(torch.equal(item[k], plain[k]) for k in item if torch.is_tensor(item[k]))


def test_the_seeded_batch_sampler_draws_its_order_from_seed_and_epoch():
    from fluxon_video.batch_plan import SeededBatchSampler

    sampler = SeededBatchSampler(10, 4, seed=3)
    first = list(sampler)
    assert sorted(i for b in first for i in b) == list(range(10)) and len(sampler) == 3
    assert [len(b) for b in first] == [4, 4, 2] and list(sampler) == first
    assert pickle.loads(pickle.dumps(sampler)).planned_batches() == first  # a worker's copy
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert list(SeededBatchSampler(10, 4, shuffle=False, drop_last=True)) == [
        [0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(fv.FluxonFsConfigError):
        SeededBatchSampler(10, 0)


@pytest.mark.parametrize("drop_last", [False, True])
def test_the_seeded_batch_sampler_shards_across_ranks_like_distributed_sampler(drop_last):
    """Rank r's rows are DistributedSampler's for rank r (unshuffled: the same
    indices; shuffled: disjoint or padded the same way, equal counts), batched."""
    from torch.utils.data import DistributedSampler

    from fluxon_video.batch_plan import SeededBatchSampler

    for shuffle in (False, True):
        shards = []
        for rank in range(3):
            sampler = SeededBatchSampler(11, 2, shuffle=shuffle, seed=5, drop_last=drop_last,
                                         num_replicas=3, rank=rank)
            sampler.set_epoch(2)
            batches = list(sampler)
            assert len(batches) == len(sampler) and all(len(b) <= 2 for b in batches)
            mine = sampler.indices().tolist()
            rows = [i for b in batches for i in b]
            assert rows == (mine[:len(mine) // 2 * 2] if drop_last else mine)
            if not shuffle:
                assert mine == list(DistributedSampler(range(11), num_replicas=3, rank=rank,
                                                       shuffle=False, drop_last=drop_last))
            shards.append(mine)
            assert pickle.loads(pickle.dumps(sampler)).planned_batches() == batches
        check_rank_shards(shards, drop_last, 9 if drop_last else 12, 11)
    with pytest.raises(fv.FluxonFsConfigError, match="rank must be"):
        SeededBatchSampler(10, 2, num_replicas=2, rank=2)
    with pytest.raises(fv.FluxonFsConfigError, match="both num_replicas and rank"):
        SeededBatchSampler(10, 2, rank=1)


def test_image_columns_are_cached_once_on_disk_and_mapped(dataset_root, tmp_path):
    """An image camera's PNGs stay out of the process: each data file's image
    column is copied once into image_cache_dir (the user's alone) and memory-mapped,
    so a pickled dataset (what a spawned worker gets) carries none of them; a second
    dataset reuses the copies, a rewritten data file gets a new one, a folder that
    cannot be made is a clear error, and a damaged copy fails the reads that need
    it, saying how to rebuild it."""
    import shutil

    import pyarrow as pa

    cam = next(iter(IMAGE_CAMERAS))
    copy, cache = tmp_path / "ds", tmp_path / "cache"
    shutil.copytree(dataset_root, copy)
    data_files = sorted((copy / "data").rglob("*.parquet"))
    png_bytes = sum(len(c["bytes"]) for f in data_files
                    for c in pq.read_table(f).column(cam).to_pylist())

    def copies() -> dict[str, int]:
        return {p.name: p.stat().st_mtime_ns for p in cache.glob("*.arrow")}

    with LeRobotDataset("x", root=copy, image_cache_dir=cache) as ds:
        written = copies()
        assert len(written) == len(data_files)
        assert cache.stat().st_mode & 0o777 == 0o700
        assert len(pickle.dumps(ds)) < png_bytes
        for idx in (0, 21, len(ds) - 1):
            check_item(ds[idx], expected_item(dataset_root, idx))
    with LeRobotDataset("x", root=copy, image_cache_dir=cache) as again:
        check_item(again[7], expected_item(dataset_root, 7))
    with pytest.MonkeyPatch.context() as patch:  # a relative folder: the one it meant
        patch.chdir(tmp_path)
        relative = LeRobotDataset("x", root=copy, image_cache_dir="cache")
        patch.chdir(copy)
        check_item(pickle.loads(pickle.dumps(relative))[8], expected_item(dataset_root, 8))
        relative.close()
    assert copies() == written  # nothing rewritten

    first = data_files[0]  # its rows come first in the dataset
    rows = pq.read_table(first)
    column = rows.schema.get_field_index(cam)
    cells = rows.column(cam).to_pylist()[::-1]
    time.sleep(0.01)  # a new mtime even on a coarse clock
    pq.write_table(rows.set_column(column, cam, pa.array(cells, rows.schema.field(column).type)),
                   first)
    with LeRobotDataset("x", root=copy, image_cache_dir=cache) as changed:
        assert len(copies()) == len(data_files) + 1
        want = cli_images(dataset_root, cam)
        assert np.array_equal(as_uint8_hwc(changed[0][cam]), want[len(cells) - 1])
        check_item(changed[len(cells)], expected_item(dataset_root, len(cells)))

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(fv.FluxonFsConfigError, match="a-file/cache: the image cache folder "
                                                     "cannot be made .*image_cache_dir="):
        LeRobotDataset("x", root=copy, image_cache_dir=blocked / "cache")

    for path in cache.glob("*.arrow"):
        path.write_bytes(path.read_bytes()[:100])
    with LeRobotDataset("x", root=copy, image_cache_dir=cache) as damaged, pytest.raises(
            fv.FluxonFsDecodeError, match=r"\.arrow: a cache of .*file-00.\.parquet's images "
                                          r"that cannot be read .*delete it to rebuild it"):
        damaged[0]


def test_processes_building_one_image_cache_take_turns(dataset_root, tmp_path):
    """The ranks of a job on one node build the same image cache at once: each
    copy is written by the first to take its lock, and one that waited finds it
    written and reads it as it is."""
    import fcntl
    import shutil
    import threading

    cache, saved = tmp_path / "cache", tmp_path / "saved"
    LeRobotDataset("x", root=dataset_root, image_cache_dir=cache).close()
    shutil.copytree(cache, saved)
    for path in cache.glob("*.arrow"):
        path.unlink()
    locks = [open(path, "a") for path in sorted(cache.glob("*.lock"))]
    for lock in locks:  # another builder at work on every copy
        fcntl.flock(lock, fcntl.LOCK_EX)
    built: list[LeRobotDataset] = []
    waiter = threading.Thread(target=lambda: built.append(
        LeRobotDataset("x", root=dataset_root, image_cache_dir=cache)))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and not list(cache.glob("*.arrow"))  # it waits its turn
    for path in saved.glob("*.arrow"):  # the other builder's copies land
        shutil.copy2(path, cache / path.name)
    for lock in locks:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    waiter.join(60)
    assert built, "the waiting construction failed"
    for path in saved.glob("*.arrow"):  # taken as they were, not written again
        assert (cache / path.name).stat().st_mtime_ns == path.stat().st_mtime_ns
    with built[0] as ds:
        check_item(ds[9], expected_item(dataset_root, 9))


@pytest.mark.parametrize("dataset_root", ["h264"], indirect=True)
def test_image_copies_no_job_used_for_a_while_are_pruned(dataset_root, tmp_path, capsys):
    """`fluxon-video image-cache prune` removes the copies no dataset has used for
    --unused-days (building a dataset on a copy marks it used) and what killed
    writers left, leaves a copy being written, and removes nothing on a dry run.
    A job whose copies went reads on: where a copy is mapped it stays readable,
    and a process that maps one afterwards (a spawned worker) writes it again."""
    import fcntl
    import os

    from fluxon_video.cli import main

    cache = tmp_path / "cache"
    ds = LeRobotDataset("x", root=dataset_root, image_cache_dir=cache)
    last = len(ds) - 1
    check_item(ds[0], expected_item(dataset_root, 0))  # this process maps row 0's copy
    copies = sorted(cache.glob("*.arrow"))
    assert len(copies) >= 2
    left_over = [cache / ".gone.0123.tmp", cache / "gone.lock"]  # a write killed midway

    def unused_for(days: float) -> None:
        then = time.time() - days * 86400
        for path in [*copies, *(p.with_suffix(".lock") for p in copies), *left_over]:
            path.touch()
            os.utime(path, (then, then))

    def prune(*options: str) -> dict:
        assert main(["image-cache", "prune", "--dir", str(cache), "--json", *options]) == 0
        return json.loads(capsys.readouterr().out)

    unused_for(40)
    report = prune("--dry-run")
    assert len(report["removed"]) == len(copies) and not report["kept"]
    assert sorted(cache.glob("*.arrow")) == copies and all(p.exists() for p in left_over)

    LeRobotDataset("x", root=dataset_root, image_cache_dir=cache).close()  # used today
    report = prune("--unused-days", "30")
    assert not report["removed"] and len(report["kept"]) == len(copies)

    unused_for(40)
    report = prune("--unused-days", "41")
    assert not report["removed"] and len(report["kept"]) == len(copies)
    with open(copies[0].with_suffix(".lock"), "a") as writer:
        fcntl.flock(writer, fcntl.LOCK_EX)  # another process writing this copy
        report = prune()
    assert [r["path"] for r in report["busy"]] == [str(copies[0])]
    assert sorted(r["path"] for r in report["removed"]) == [str(p) for p in copies[1:]]
    assert sorted(cache.glob("*.arrow")) == copies[:1]
    assert not any(p.exists() for p in left_over)

    assert main(["image-cache", "prune", "--dir", str(cache), "--unused-days", "0"]) == 0
    out = capsys.readouterr()
    assert f"removed {copies[0]}" in out.out and "removed 1 copy" in out.err
    assert not list(cache.glob("*.arrow"))
    check_item(ds[0], expected_item(dataset_root, 0))  # still mapped here
    worker = pickle.loads(pickle.dumps(ds))  # a spawned worker maps them anew
    check_item(worker[last], expected_item(dataset_root, last))
    assert len(list(cache.glob("*.arrow"))) == 1  # the one it read, written again
    assert main(["image-cache", "list", "--dir", str(cache), "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [Path(row["path"]) for row in listed] == list(cache.glob("*.arrow"))
    worker.close()
    ds.close()

    assert main(["image-cache", "prune", "--dir", str(cache), "--unused-days", "-1"]) == 1
    assert "--unused-days must be 0 or more" in capsys.readouterr().err
