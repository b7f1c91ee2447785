"""One measured pass of the lerobot suite (bench/lerobot_group.py), in a process of its own
(either virtualenv).

    python bench/lerobot_client.py SPEC.json    # prints one JSON line: the run's figures

SPEC: ``impl`` ("lerobot": LeRobot's own LeRobotDataset with ``backend`` torchcodec or
pyav, run with the LeRobot virtualenv's python; "fluxon": fluxon_video.lerobot's, with
``fx`` to read through FluxonFS; "daft": Daft's LeRobot reader, ``daft.datasets.lerobot.read``
with its cameras decoded, queried per batch, in the LeRobot virtualenv), ``root``, ``delta`` (delta_timestamps or null),
``workload`` ("loader": a DataLoader over ``batches`` as its batch_sampler with
``workers`` workers; "plain": ``ds[i]`` for every index of ``batches``), ``refs`` and
``expect`` (the frame check's references, see bench/lerobot_group.py). The timed pass is one
epoch: from the DataLoader's iterator (its workers started) to its last batch, or the
loop of ``ds[i]``; the dataset is built before it, untimed. Frames are checked in the timed
pass with the clock stopped when nothing runs in the background (0 workers, plain), and
in a second, untimed pass over the same batches with the same workers otherwise. Peak
RSS: psutil every 20 ms in a thread, per process (the main one and each worker).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The bench's modules must not shadow installed packages: this folder goes last on the path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]

import numpy as np  # noqa: E402

from frames import MAX_MEAN_ABS_DIFF, Reference, digest, subsample  # noqa: E402


class Peaks(threading.Thread):
    """Peak RSS of this process and of each child (DataLoader workers), sampled."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        import psutil

        self.me, self.peak, self.stop_ = psutil.Process(), {}, threading.Event()

    def run(self) -> None:
        while not self.stop_.is_set():
            for p in [self.me, *self.me.children(recursive=True)]:
                try:
                    rss = p.memory_info().rss
                except Exception:  # noqa: BLE001 - a worker that just exited
                    continue
                self.peak[p.pid] = max(self.peak.get(p.pid, 0), rss)
            self.stop_.wait(0.02)

    def result(self) -> dict[str, Any]:
        self.stop_.set()
        self.join()
        main = self.peak.pop(self.me.pid, 0)
        return {"main_mib": main / 2**20,
                "workers_mib": sorted(v / 2**20 for v in self.peak.values())}


class Checker:
    """Every frame of an item against the ffmpeg CLI's frame at the expected index:
    exact (same digest), right (closest to it among its neighbours, mean abs diff <=
    MAX_MEAN_ABS_DIFF) or wrong."""

    def __init__(self, spec: dict) -> None:
        e = spec["expect"]
        self.files = e["files"]
        self.refs = {f: Reference.load(Path(spec["refs"]) / f"{i}.npz")
                     for i, f in enumerate(self.files)
                     if (Path(spec["refs"]) / f"{i}.npz").exists()}  # files no item reads: none
        self.file = {c: np.asarray(v) for c, v in e["file"].items()}
        self.frame = {c: np.asarray(v) for c, v in e["frame"].items()}
        self.ep_from, self.ep_to = np.asarray(e["ep_from"]), np.asarray(e["ep_to"])
        self.offsets = {c: [round(d * e["fps"]) for d in ds]
                        for c, ds in (spec["delta"] or {}).items()}
        self.counts = {"frames": 0, "exact": 0, "right": 0, "wrong": 0, "pad_flags_wrong": 0}
        self.examples: list[str] = []

    def item(self, index: int, cam: str, frames: Any, pad: Any = None) -> None:
        arr = frames.numpy() if hasattr(frames, "numpy") else np.asarray(frames)
        if arr.dtype != np.uint8:
            arr = np.clip(np.rint(arr * 255.0), 0, 255).astype(np.uint8)
        arr = arr.reshape(-1, *arr.shape[-3:]).transpose(0, 2, 3, 1)  # (T, H, W, C)
        offs = self.offsets.get(cam, [0])
        want = [index + d for d in offs]
        rows = [min(max(w, self.ep_from[index]), self.ep_to[index] - 1) for w in want]
        if pad is not None:
            flags = [not self.ep_from[index] <= w < self.ep_to[index] for w in want]
            if [bool(x) for x in np.asarray(pad).reshape(-1)] != flags:
                self.counts["pad_flags_wrong"] += 1
        for frame, row in zip(arr, rows):
            ref = self.refs[self.files[self.file[cam][row]]]
            self.one(frame, int(self.frame[cam][row]), ref, f"row {index} {cam} (row {row})")

    def one(self, frame: np.ndarray, i: int, ref: Reference, where: str) -> None:
        self.counts["frames"] += 1
        pos = ref.position(i)
        if pos is not None and digest(frame) == ref.digests[pos]:
            self.counts["exact"] += 1
            return
        small = subsample(frame).astype(np.int16)
        mad = {j: float(np.abs(small - ref.small[p]).mean()) for j in (i - 1, i, i + 1)
               if (p := ref.position(j)) is not None and ref.small[p].shape == small.shape}
        if i in mad and mad[i] <= MAX_MEAN_ABS_DIFF and mad[i] == min(mad.values()):
            self.counts["right"] += 1
            return
        self.counts["wrong"] += 1
        if len(self.examples) < 5:
            best = min(mad, key=mad.get) if mad else None
            self.examples.append(f"{where}: want frame {i}, closest {best} "
                                 f"(mad {mad.get(i, float('nan')):.2f})")

    def batch(self, items: Any, cams: list[str]) -> None:
        """A collated batch (dict of stacked tensors) or one item."""
        index = np.asarray(items["index"]).reshape(-1)
        for cam in cams:
            frames, pad = items[cam], items.get(f"{cam}_is_pad")
            for k, row in enumerate(index):
                self.item(int(row), cam, frames[k], None if pad is None else pad[k])


class DaftRows:
    """Daft's LeRobot reader as a loader: a lazy DataFrame per camera (Daft decodes a
    camera's frames in a batch UDF, 16 rows at a time, each shard opened once per
    batch), queried for a batch's rows. Daft has no delta_timestamps: a clip's window
    is the rows ``row + d`` clamped to the row's episode (LeRobot's padding), its
    episode bounds taken from the bench's expectations (what a user computes from
    the episodes table). Daft gives HWC uint8 frames; they are compared as they are
    (no float conversion, no DataLoader: Daft runs its own threads)."""

    def __init__(self, spec: dict) -> None:
        from daft.datasets import lerobot

        self.cams = spec["cameras"]
        self.frames = {cam: lerobot.read(spec["root"], load_video_frames=cam)
                       for cam in self.cams}
        self.offsets = {c: [round(d * spec["expect"]["fps"]) for d in ds]
                        for c, ds in (spec["delta"] or {}).items()}
        self.ep_from = spec["expect"]["ep_from"]
        self.ep_to = spec["expect"]["ep_to"]

    def rows(self, cam: str, wanted: list[int]) -> dict[int, dict[str, Any]]:
        from daft import col

        df = self.frames[cam].where(col("index").is_in(sorted(set(wanted))))
        table = df.select("index", cam, "observation.state", "action").to_pydict()
        return {int(i): {"frame": f, "observation.state": st, "action": a}
                for i, f, st, a in zip(table["index"], table[cam], table["observation.state"],
                                       table["action"])}

    def batch(self, indices: list[int]) -> dict[str, Any]:
        out: dict[str, Any] = {"index": np.asarray(indices)}
        for cam in self.cams:
            windows = [[min(max(i + d, self.ep_from[i]), self.ep_to[i] - 1)
                        for d in self.offsets.get(cam, [0])] for i in indices]
            got = self.rows(cam, [r for w in windows for r in w])
            # (B, T, C, H, W) as the checker reads LeRobot's batches
            out[cam] = np.stack([np.stack([np.asarray(got[r]["frame"]) for r in w])
                                 for w in windows]).transpose(0, 1, 4, 2, 3)
        return out


class FixedBatches:
    """The bench's seeded batches as a planned sampler (dataset.plan_batches)."""

    def __init__(self, batches: list[list[int]]) -> None:
        self.batches = batches

    def planned_batches(self) -> list[list[int]]:
        return self.batches

    def plan_version(self) -> int:
        return 0


def dataset(spec: dict) -> Any:
    kw: dict[str, Any] = {"delta_timestamps": spec["delta"]}
    if spec["impl"] == "daft":
        return DaftRows(spec)
    if spec["impl"] == "lerobot":
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        kw["video_backend"] = spec["backend"]
        return LeRobotDataset(spec["repo_id"], root=spec["root"], **kw)
    from fluxon_video.lerobot import LeRobotDataset

    if spec.get("fx"):
        from stores import make_patcher

        kw["patcher"] = make_patcher(spec["fx"])
    if spec.get("uint8"):
        kw["return_uint8"] = True
    return LeRobotDataset(spec["repo_id"], root=spec["root"], **kw)


def epoch(ds: Any, spec: dict, checker: Checker | None) -> tuple[float, int]:
    """One pass over the workload: (seconds with the clock running, items)."""
    cams = spec["cameras"]
    batches = spec["batches"]
    elapsed, items = 0.0, 0
    if isinstance(ds, DaftRows):
        for batch in (batches if spec["workload"] != "plain" else [[i] for b in batches
                                                                    for i in b]):
            t0 = time.perf_counter()
            got = ds.batch(batch)
            elapsed += time.perf_counter() - t0
            items += len(batch)
            if checker is not None:
                checker.batch(got, cams)
        return elapsed, items
    if spec["workload"] == "plain":
        for batch in batches:
            for i in batch:
                t0 = time.perf_counter()
                item = ds[i]
                elapsed += time.perf_counter() - t0
                items += 1
                if checker is not None:
                    checker.batch({k: (v[None] if hasattr(v, "ndim") else v)
                                   for k, v in item.items()}, cams)
        return elapsed, items
    from torch.utils.data import DataLoader

    if spec.get("ahead"):  # the plan a SeededBatchSampler would give, as this fixed list
        ds.plan_batches(FixedBatches(batches))
    loader = DataLoader(ds, batch_sampler=batches, num_workers=spec["workers"])
    t0 = time.perf_counter()
    for batch in loader:
        items += len(batch["index"])
        if checker is not None:
            elapsed += time.perf_counter() - t0
            checker.batch(batch, cams)
            t0 = time.perf_counter()
    elapsed += time.perf_counter() - t0
    return elapsed, items


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    import torch

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    ds = dataset(spec)
    build_s = time.perf_counter() - t0
    checker = Checker(spec)
    inline = spec["workload"] == "plain" or spec["workers"] == 0
    peaks = Peaks()
    peaks.start()
    seconds, items = epoch(ds, spec, checker if inline else None)
    rss = peaks.result()
    if not inline:
        epoch(ds, spec, checker)
    if hasattr(ds, "close"):
        ds.close()
    print(json.dumps({"seconds": seconds, "items": items, "items_per_s": items / seconds,
                      "batches": len(spec["batches"]), "build_s": build_s, "rss": rss,
                      "check": checker.counts, "examples": checker.examples,
                      "pid": os.getpid()}))


if __name__ == "__main__":
    main()
