"""Memory and speed on an image-camera dataset: LeRobot's LeRobotDataset against
fluxon_video.lerobot's, both reading a dataset LeRobot wrote.

LeRobot 0.6.1 (its own virtualenv, Python 3.12) writes a dataset whose camera is of
``dtype`` ``"image"`` (each row's PNG inside the data parquet, one row group per
episode): ``--episodes`` x ``--rows`` rows of 480x640 frames that do not compress (a
shifted noise picture, ~0.9 MB of PNG each). Each client then reads the same seeded
batches of ``--batch`` random rows through a DataLoader with 0 and 2 workers, every run a
process of its own, and reports its build time, items/s and the peak RSS of its main
process and of its largest worker (bench/lerobot_client.py's sampler, psutil every 20 ms). Both keep the images on
local disk, memory-mapped: LeRobot in Hugging Face's datasets cache, fluxon in its
image cache (docs/lerobot.md); the first round starts with both caches empty, so its
build writes them. Every batch's images are hashed and must be equal, bit for bit, on
both sides; the clock stops while a batch is hashed, and with workers the timed pass
hashes nothing and a second, untimed one does.

    python bench/lerobot_images.py                 # ~6 min the first time, ~1 min after
    python bench/lerobot_images.py --episodes 2 --rows 60 --batches 5 --out /tmp/x

Prints and writes ``<out>/lerobot-images.json`` (default bench/results).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
CAMERA = "observation.images.top"
SHAPE = (480, 640, 3)


def write_with_lerobot(root: Path, episodes: int, rows: int) -> None:
    """Run in LeRobot's virtualenv: the dataset, written by LeRobotDataset.create."""
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    features = {CAMERA: {"dtype": "image", "shape": SHAPE,
                         "names": ["height", "width", "channels"]},
                "observation.state": {"dtype": "float32", "shape": (6,), "names": None},
                "action": {"dtype": "float32", "shape": (6,), "names": None}}
    ds = LeRobotDataset.create("fluxon/images", fps=30, root=root, features=features,
                               use_videos=False)
    noise = np.random.default_rng(0).integers(0, 256, SHAPE, dtype=np.uint8)
    for episode in range(episodes):
        for t in range(rows):
            frame = np.roll(noise, t * 7 + episode * 13, axis=1)
            frame[:8, :8] = t  # no two rows alike
            ds.add_frame({CAMERA: frame, "observation.state": np.full(6, t, np.float32),
                          "action": np.full(6, episode, np.float32), "task": "pick"})
        ds.save_episode()
    ds.finalize()


def read(spec: dict) -> dict[str, Any]:
    """Run in either virtualenv: one client's pass over the batches."""
    import torch
    from torch.utils.data import DataLoader

    from lerobot_client import Peaks

    torch.set_num_threads(1)
    if spec["impl"] == "lerobot":
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    else:
        from fluxon_video.lerobot import LeRobotDataset
    peaks = Peaks()
    peaks.start()
    t0 = time.perf_counter()
    ds = LeRobotDataset("fluxon/images", root=spec["root"])
    build_s = time.perf_counter() - t0

    def epoch(hashed: bool) -> tuple[float, int, list[str]]:
        """(seconds, items, digests) of a pass; the clock stops while a batch is hashed."""
        digests, items, seconds = [], 0, 0.0
        t0 = time.perf_counter()
        for batch in DataLoader(ds, batch_sampler=spec["batches"], num_workers=spec["workers"]):
            seconds += time.perf_counter() - t0
            images = batch[CAMERA]  # float32 (B, C, H, W), as LeRobot's ToTensor gives them
            items += len(images)
            if hashed:
                digests.append(hashlib.sha256(images.numpy().tobytes()).hexdigest())
            t0 = time.perf_counter()
        return seconds + time.perf_counter() - t0, items, digests

    # Hashing a batch (29 MB of floats) takes as long as a worker's batch: with
    # workers, they would run ahead while the clock stops, so their timed pass
    # hashes nothing and a second, untimed one does (bench/lerobot_client.py's way).
    seconds, items, digests = epoch(hashed=not spec["workers"])
    if spec["workers"]:
        digests = epoch(hashed=True)[2]
    peak = peaks.result()
    return {"build_s": build_s, "items_per_s": items / seconds, "main_rss_mib": peak["main_mib"],
            "worker_rss_mib": max(peak["workers_mib"], default=0.0), "digests": digests}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=BENCH / "results")
    ap.add_argument("--data", type=Path, default=BENCH / ".data")
    ap.add_argument("--episodes", type=int, default=8, help="episodes (default 8)")
    ap.add_argument("--rows", type=int, default=150, help="rows per episode (default 150)")
    ap.add_argument("--batches", type=int, default=30, help="batches per pass (default 30)")
    ap.add_argument("--batch", type=int, default=8, help="rows per batch (default 8)")
    ap.add_argument("--repeat", type=int, default=2, help="rounds (default 2)")
    ap.add_argument("--child", choices=("write", "read"), help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "write":
        write_with_lerobot(Path(args.spec), args.episodes, args.rows)
        return
    if args.child == "read":
        # the bench's modules must not shadow installed packages: this folder goes last
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH] + [str(BENCH)]
        print(json.dumps(read(json.loads(Path(args.spec).read_text()))))
        return
    sys.path.insert(0, str(BENCH))
    from install_peers import install_lerobot

    python = install_lerobot(args.data / "venv-lerobot")
    if python is None:
        sys.exit("bench: LeRobot did not install (see above)")
    work = args.data / "lerobot-images"
    root = work / f"ds-{args.episodes}x{args.rows}"
    if not (root / "meta" / "info.json").exists():
        shutil.rmtree(root, ignore_errors=True)
        print(f"bench: LeRobot writes {args.episodes} x {args.rows} rows", flush=True)
        child = subprocess.run([str(python), __file__, "--child", "write", "--spec", str(root),
                                "--episodes", str(args.episodes), "--rows", str(args.rows)],
                               cwd="/", capture_output=True, text=True)
        if child.returncode:
            sys.exit(f"bench: LeRobot's writer failed:\n{child.stderr[-4000:]}")
    rows = args.episodes * args.rows
    rng = random.Random(7)
    batches = [[rng.randrange(rows) for _ in range(args.batch)] for _ in range(args.batches)]
    caches = {"lerobot": work / "hf-datasets-cache", "fluxon": work / "fluxon-cache"}
    for folder in caches.values():  # the first round builds them
        shutil.rmtree(folder, ignore_errors=True)
    env = {"lerobot": {"HF_DATASETS_CACHE": str(caches["lerobot"])},
           "fluxon": {"FLUXON_VIDEO_CACHE": str(caches["fluxon"])}}
    runs: list[dict[str, Any]] = []
    for round_no in range(args.repeat):
        for workers in (0, 2):
            for impl in ("lerobot", "fluxon"):
                spec = work / "spec.json"
                spec.write_text(json.dumps({"impl": impl, "root": str(root), "workers": workers,
                                            "batches": batches}))
                exe = python if impl == "lerobot" else Path(sys.executable)
                child = subprocess.run([str(exe), __file__, "--child", "read", "--spec",
                                        str(spec)], cwd="/", capture_output=True, text=True,
                                       env={**os.environ, **env[impl]})
                if child.returncode:
                    sys.exit(f"bench: {impl}'s pass failed:\n{child.stderr[-4000:]}")
                run = {"impl": impl, "workers": workers, "round": round_no,
                       **json.loads(child.stdout.strip().splitlines()[-1])}
                print(f"bench: round {round_no} {impl} w{workers}: build {run['build_s']:.1f} s, "
                      f"{run['items_per_s']:.1f} items/s, main RSS {run['main_rss_mib']:.0f} "
                      f"MiB, worker RSS {run['worker_rss_mib']:.0f} MiB", flush=True)
                runs.append(run)
    want = runs[0]["digests"]
    differ = sum(d != w for run in runs for d, w in zip(run.pop("digests"), want))
    git = subprocess.run(["git", "-C", str(BENCH), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip()
    result = {"command": "python bench/lerobot_images.py " + " ".join(sys.argv[1:]),
              "machine": platform.platform(), "cores": os.cpu_count(), "git": git,
              "date": time.strftime("%Y-%m-%d"),
              "dataset": {"rows": rows, "episodes": args.episodes, "camera": list(SHAPE),
                          "data_mib": round(sum(f.stat().st_size for f in root.rglob(
                              "*.parquet")) / (1 << 20), 1)},
              "batches": args.batches, "batch": args.batch, "batches_differ": differ,
              "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lerobot-images.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    if differ:
        sys.exit(1)


if __name__ == "__main__":
    main()
