"""Write a small LeRobot v3 dataset with LeRobot itself (run in the LeRobot virtualenv).

    <lerobot venv>/bin/python bench/lerobot_write.py ROOT [--episodes 12] [--seed 7]
        [--video-mb 2]

LeRobotDataset.create + add_frame + save_episode + finalize, LeRobot 0.6.1's defaults
for everything about the videos (its RGB encoder: AV1 with libsvtav1), two cameras
(observation.images.front 480x640, observation.images.wrist 240x320), 30 fps, episodes
of 6-12 s (seeded), a 6-float state and action. The pictures are synthetic but every
frame differs from its neighbours (moving bars and a gradient per episode), so a frame
off by one is caught. ``--video-mb``: LeRobot's video_files_size_in_mb, small so that
the episodes are spread over several shard files per camera as in a real dataset.
Prints one JSON line: the root, rows, episodes and shard files.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path

import sys

import numpy as np

# bench/lerobot.py would shadow the lerobot package: drop this script's folder from the path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

FPS = 30
CAMERAS = {"observation.images.front": (480, 640), "observation.images.wrist": (240, 320)}


def picture(h: int, w: int, episode: int, k: int) -> np.ndarray:
    """A frame: a per-episode gradient, a vertical bar moving 7 px a frame and a horizontal
    one moving 3 px a frame, a frame counter in binary blocks along the top."""
    y = np.arange(h, dtype=np.int32)[:, None]
    x = np.arange(w, dtype=np.int32)[None, :]
    img = np.empty((h, w, 3), np.uint8)
    img[..., 0] = (x * 255 // w + 40 * episode) % 256
    img[..., 1] = (y * 255 // h + 3 * k) % 256
    img[..., 2] = ((x + y) // 4 + 17 * episode) % 256
    bar = (7 * k) % w
    img[:, bar:bar + w // 16] = (255, 255, 255)
    row = (3 * k) % h
    img[row:row + h // 20, :] = (0, 0, 0)
    block = max(w // 32, 4)
    for bit in range(12):
        img[:block, bit * block:(bit + 1) * block] = 255 if (k >> bit) & 1 else 0
    return img


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path)
    ap.add_argument("--episodes", type=int, default=12)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--video-mb", type=int, default=2)
    args = ap.parse_args()
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if args.root.exists():
        shutil.rmtree(args.root)
    features = {cam: {"dtype": "video", "shape": (h, w, 3),
                      "names": ["height", "width", "channels"]}
                for cam, (h, w) in CAMERAS.items()}
    features["observation.state"] = {"dtype": "float32", "shape": (6,), "names": None}
    features["action"] = {"dtype": "float32", "shape": (6,), "names": None}
    t0 = time.perf_counter()
    ds = LeRobotDataset.create("fluxon/bench", FPS, features, root=args.root,
                               robot_type="bench", video_files_size_in_mb=args.video_mb)
    rng = random.Random(args.seed)
    lengths = [rng.randrange(6 * FPS, 12 * FPS) for _ in range(args.episodes)]
    for e, n in enumerate(lengths):
        for k in range(n):
            frame = {cam: picture(h, w, e, k) for cam, (h, w) in CAMERAS.items()}
            frame["observation.state"] = np.full(6, e + k / 1000, np.float32)
            frame["action"] = np.full(6, -(e + k / 1000), np.float32)
            frame["task"] = f"task {e % 3}"
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    shards = {cam: sorted(str(p.relative_to(args.root))
                          for p in (args.root / "videos" / cam).rglob("*.mp4"))
              for cam in CAMERAS}
    print(json.dumps({"root": str(args.root), "rows": sum(lengths), "episodes": len(lengths),
                      "lengths": lengths, "shards": shards,
                      "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
