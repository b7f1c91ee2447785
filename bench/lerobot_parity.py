"""Items of a dataset with image and depth cameras and language annotations: LeRobot's
against fluxon_video.lerobot's, value for value.

LeRobot 0.6.1 (its own virtualenv, Python 3.12) writes a small dataset with
``LeRobotDataset.create``: two image cameras (dtype "image": each row's PNG in the data
table), an RGB video camera, a depth camera (uint16 millimetres, which LeRobot quantizes
to 12-bit codes in a lossless gray12le HEVC video), two depth maps stored as images
(TIFFs in the table: uint16 millimetres, float32 metres), state and action; its language columns
(``language_persistent``, ``language_events``, with JSON ``tool_calls``) are then added in
LeRobot's own Arrow types. LeRobot's ``LeRobotDataset`` reads every row, without and with
``delta_timestamps``, with depth in millimetres and in metres; this project's reads the
same rows (``return_uint8`` off and on). Every key must be there on both sides with the
same dtype, shape and bytes (uint8 video frames compared as LeRobot's ``/ 255``), and so
must the depth cameras' statistics and what ``dataset.meta`` says besides (``metadata``).

    python bench/lerobot_parity.py            # ~1 min once LeRobot is installed
    python bench/lerobot_parity.py --out /tmp/x

Prints and writes ``<out>/lerobot-parity.json`` (default bench/results).
"""

from __future__ import annotations

import argparse
import json
import pickle
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
FPS = 30
IMAGES = {"observation.images.top": (48, 64), "observation.images.side": (36, 52)}
VIDEO = ("observation.images.front", (48, 64))
DEPTH = ("observation.images.depth", (40, 56))
# depth maps stored as images (LeRobot writes TIFFs): uint16 millimetres, float32 metres
DEPTH_IMAGES = {"observation.depth_mm": np.uint16, "observation.depth_m": np.float32}
EPISODES = (7, 5, 9)
WINDOWS: dict[str, dict[str, list[float]] | None] = {
    "plain": None,
    "windows": {"observation.images.top": [-2 / FPS, 0.0, 1 / FPS],
                "observation.images.side": [0.0], "observation.images.front": [-1 / FPS, 0.0],
                DEPTH[0]: [-1 / FPS, 0.0, 2 / FPS], "observation.depth_m": [0.0, 1 / FPS],
                "action": [0.0, 1 / FPS]}}
UNITS = ("mm", "m")


def write_and_read_with_lerobot(root: Path, out: Path) -> None:
    """Run in LeRobot's virtualenv: write the dataset, then its items as LeRobot reads them."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
    import pyarrow as pa
    import pyarrow.parquet as pq
    from lerobot.datasets import language
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    shape = {"names": ["height", "width", "channels"]}
    features: dict[str, Any] = {
        **{cam: {"dtype": "image", "shape": (h, w, 3), **shape} for cam, (h, w) in IMAGES.items()},
        VIDEO[0]: {"dtype": "video", "shape": (*VIDEO[1], 3), **shape},
        DEPTH[0]: {"dtype": "video", "shape": (*DEPTH[1], 1), **shape,
                   "info": {"is_depth_map": True}},
        **{key: {"dtype": "image", "shape": (*DEPTH[1], 1), **shape,
                 "info": {"is_depth_map": True}} for key in DEPTH_IMAGES},
        "observation.state": {"dtype": "float32", "shape": (2,), "names": None},
        "action": {"dtype": "float32", "shape": (2,), "names": None}}
    ds = LeRobotDataset.create("fluxon/parity", FPS, features, root=root, robot_type="bench")
    rng = np.random.default_rng(0)
    for e, n in enumerate(EPISODES):
        for k in range(n):
            frame: dict[str, Any] = {cam: rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
                                     for cam, (h, w) in [*IMAGES.items(), VIDEO]}
            frame[DEPTH[0]] = rng.integers(20, 9500, (*DEPTH[1], 1), dtype=np.uint16)  # mm
            frame["observation.depth_mm"] = rng.integers(20, 9500, (*DEPTH[1], 1),
                                                         dtype=np.uint16)
            frame["observation.depth_m"] = rng.uniform(0.02, 9.5, (*DEPTH[1], 1)
                                                       ).astype(np.float32)
            frame.update({"observation.state": np.full(2, e + k / 100, np.float32),
                          "action": np.full(2, -e - k / 50, np.float32), "task": f"task {e}"})
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    # language annotations, in LeRobot's Arrow types (its annotation pipeline needs a VLM)
    data = root / "data" / "chunk-000" / "file-000.parquet"
    table = pq.read_table(data)
    for column, kind in ((language.LANGUAGE_PERSISTENT, language.language_persistent_arrow_type()),
                         (language.LANGUAGE_EVENTS, language.language_events_arrow_type())):
        values = [annotations(i, column) for i in range(table.num_rows)]
        text = pa.list_(pa.struct([pa.field(f.name, pa.list_(pa.string())
                                            if f.name == "tool_calls" else f.type, f.nullable)
                                   for f in kind.value_type]))
        table = table.append_column(column, pa.array(values, text).cast(kind))
    pq.write_table(table, data)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["features"].update(language.language_feature_info())
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    items: dict[str, Any] = {}
    for unit in UNITS:
        for name, delta in WINDOWS.items():
            read = LeRobotDataset("fluxon/parity", root=root, delta_timestamps=delta,
                                  depth_output_unit=unit)
            items[f"{name} {unit}"] = [{k: v.numpy() if hasattr(v, "numpy") else v
                                        for k, v in read[i].items()} for i in range(len(read))]
        items["meta"] = metadata(read.meta)
        items[f"stats {unit}"] = {f"{key} {stat}": value for key in (DEPTH[0], *DEPTH_IMAGES)
                                  for stat, value in read.meta.stats[key].items()}
    out.write_bytes(pickle.dumps(items))


def metadata(meta: Any) -> dict[str, Any]:
    """What a training script reads off ``dataset.meta`` besides items, comparable."""
    fields = ("fps", "robot_type", "total_episodes", "total_frames", "total_tasks",
              "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb", "data_path",
              "video_path", "names", "shapes", "camera_keys", "video_keys", "image_keys",
              "depth_keys")
    out: dict[str, Any] = {name: getattr(meta, name) for name in fields}
    out["get_task_index"] = [meta.get_task_index(t) for t in ("task 1", "task 2", "no task")]
    out["get_data_file_path"] = [str(meta.get_data_file_path(e)) for e in range(len(EPISODES))]
    out["get_video_file_path"] = [str(meta.get_video_file_path(e, key))
                                  for e in range(len(EPISODES)) for key in meta.video_keys]
    return out


def annotations(row: int, column: str) -> list[dict[str, Any]]:
    """Row ``row``'s records of a language column (JSON ``tool_calls`` as text)."""
    if column == "language_persistent":
        return [{"role": "assistant", "content": f"subtask {row // 4}", "style": "subtask",
                 "timestamp": row // 4 * 4 / FPS, "camera": None, "tool_calls": None}
                ] if row % 3 else []
    return [{"role": "user", "content": f"stop {row}", "style": "interjection", "camera": None,
             "tool_calls": [json.dumps({"name": "halt", "args": {"row": row}})]}
            ] if row % 5 == 0 else []


def compare(root: Path, lerobot_items: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """fluxon_video.lerobot's items against LeRobot's: values checked, values that differ."""
    from fluxon_video.lerobot import LeRobotDataset

    checked, differ = 0, []
    for unit in UNITS:
        for name, delta in WINDOWS.items():
            for uint8 in (False, True):
                with LeRobotDataset("fluxon/parity", root=root, delta_timestamps=delta,
                                    return_uint8=uint8, depth_output_unit=unit) as ds:
                    ours = ds.__getitems__(list(range(len(ds))))
                    stats = {f"{key} {stat}": value for key in (DEPTH[0], *DEPTH_IMAGES)
                             for stat, value in ds.meta.stats[key].items()}
                    ours_meta = metadata(ds.meta)
                for row, (got, want) in enumerate(zip(ours, lerobot_items[f"{name} {unit}"])):
                    if set(got) != set(want):
                        differ.append(f"{name} row {row}: keys {sorted(set(got) ^ set(want))}")
                    for key in set(got) & set(want):
                        checked += 1
                        if not same(got[key], want[key], uint8 and key == VIDEO[0]):
                            differ.append(f"{name} {unit} uint8={uint8} row {row}: {key}")
        for name, value in lerobot_items["meta"].items():
            checked += 1
            if ours_meta.get(name) != value:
                differ.append(f"meta.{name}: {ours_meta.get(name)!r} != LeRobot's {value!r}")
        want_stats = lerobot_items[f"stats {unit}"]
        for stat in set(stats) | set(want_stats):
            checked += 1
            if stat not in stats or stat not in want_stats \
                    or not np.array_equal(stats[stat], want_stats[stat]):
                differ.append(f"depth stats {unit}: {stat}")
    return {"values_checked": checked, "values_differ": len(differ), "differ": differ[:20],
            "rows": sum(EPISODES), "episodes": len(EPISODES)}


def same(got: Any, want: Any, uint8_video: bool) -> bool:
    if not hasattr(got, "numpy"):
        return bool(got == want)
    array = got.numpy()
    if uint8_video:  # LeRobot's float frames are these bytes / 255
        array = array.astype(np.float32) / np.float32(255)
    return array.dtype == want.dtype and array.shape == want.shape \
        and bool(np.array_equal(array, want))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=BENCH / "results")
    ap.add_argument("--data", type=Path, default=BENCH / ".data")
    ap.add_argument("--child", nargs=2, type=Path, metavar=("ROOT", "ITEMS"),
                    help=argparse.SUPPRESS)  # run in LeRobot's virtualenv
    args = ap.parse_args()
    if args.child:
        write_and_read_with_lerobot(*args.child)
        return
    sys.path.insert(0, str(BENCH))
    from install_peers import install_lerobot

    python = install_lerobot(args.data / "venv-lerobot")
    if python is None:
        sys.exit("bench: LeRobot did not install (see above)")
    with tempfile.TemporaryDirectory(prefix="fluxon-parity-") as work:
        root, items = Path(work) / "ds", Path(work) / "items.pkl"
        print("bench: LeRobot writes and reads the dataset", flush=True)
        child = subprocess.run([str(python), __file__, "--child", str(root), str(items)],
                               cwd="/", capture_output=True, text=True)
        if child.returncode:  # its encoder's and progress bars' chatter only when it failed
            sys.exit(f"bench: LeRobot's side failed:\n{child.stderr[-4000:]}")
        result = compare(root, pickle.loads(items.read_bytes()))
    git = subprocess.run(["git", "-C", str(BENCH), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    result.update(command="python bench/lerobot_parity.py", machine=platform.platform(),
                  git=git, date=time.strftime("%Y-%m-%d"),
                  lerobot=subprocess.run([str(python), "-c", "import lerobot; "
                                          "print(lerobot.__version__)"], cwd="/", text=True,
                                         capture_output=True).stdout.strip())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lerobot-parity.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if result["values_differ"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
