"""A PyTorch DataLoader over FluxonFS videos: 2 workers, 2 epochs, clips/s and cache figures.

    python examples/train_loader.py                      # the demo data (`make demo` makes it)
    python examples/train_loader.py --config fluxon.toml --identity trainer --export train-videos
    FLUXON_VIDEO_CONFIG=fluxon.toml FLUXON_VIDEO_IDENTITY=trainer python examples/train_loader.py --export train-videos
    python examples/train_loader.py --batched            # 4 clips of a video per native decode

Each worker process reads through its own reader pool (built on first use:
the dataset pickles as configuration, so spawn and forkserver work too). At
the end of each epoch it prints clips/s and what the workers' FluxonFS
clients did (KV hits and misses, bytes from the agent, index scans), added up
from the stats StatsCollate puts in every batch.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import secrets
import time
from pathlib import Path

from torch.utils.data import DataLoader

import fluxon_video as fv
from fluxon_video.torch import LoaderStats, SameVideoBatchSampler, StatsCollate, VideoClipDataset

DEMO_ROOT = Path(".demo-data")


def make_patcher(args: argparse.Namespace) -> fv.FluxonFsPatcher:
    if args.config:
        patcher = fv.FluxonFsPatcher.from_config_file(args.config, identity=args.identity)
        if patcher.identity is None and len(patcher.config.identities) == 1:
            patcher.identity = next(iter(patcher.config.identities))
        if patcher.identity is None:  # before the workers start, not inside one
            raise SystemExit("pass --identity (or set FLUXON_VIDEO_IDENTITY): the config "
                             f"defines {', '.join(patcher.config.identities) or 'none'}")
        return patcher
    if not (DEMO_ROOT / "videos").is_dir():
        raise SystemExit("no demo data: run `make demo` first, or pass --config")
    return fv.FluxonFsPatcher(exports=[fv.FluxonFsExport("demo", str(DEMO_ROOT), allow=["me"])],
                              # In-process: no agent checks it; any fresh token will do.
                              identities={"me": secrets.token_urlsafe(32)}, identity="me")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=os.environ.get("FLUXON_VIDEO_CONFIG"),
                        help="a fluxon TOML config (default: $FLUXON_VIDEO_CONFIG, else the "
                             "demo data in-process)")
    parser.add_argument("--identity", default=os.environ.get("FLUXON_VIDEO_IDENTITY"),
                        help="identity to read as (default: $FLUXON_VIDEO_IDENTITY, or the "
                             "config's only identity)")
    parser.add_argument("--export", default="demo", help="export name (default: %(default)s)")
    parser.add_argument("--glob", default="*.mp4,*.webm,*.mkv",
                        help="relpaths to use, comma-separated patterns as `fluxon-video ls "
                             "--glob` takes them (* crosses /; default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--clips-per-epoch", type=int, default=48,
                        help="items per epoch (videos are repeated to reach it)")
    parser.add_argument("--size", default="224x224",
                        help="WxH of the frames, as the CLI takes it (default: %(default)s)")
    parser.add_argument("--batched", action="store_true",
                        help="4 clips of the same video per native decode (SameVideoBatchSampler)")
    parser.add_argument("--context", default=None, choices=["fork", "spawn", "forkserver"],
                        help="multiprocessing start method of the workers")
    args = parser.parse_args()

    patcher = make_patcher(args)
    # Listed through the export (the agent, for a remote one), not the local disk.
    patterns = args.glob.split(",")
    relpaths = [e.relpath for e in patcher.list_files(args.export)
                if any(fnmatch.fnmatchcase(e.relpath, pattern) for pattern in patterns)]
    if not relpaths:
        raise SystemExit(f"no videos in {args.export} match {args.glob}")
    width, height = (int(v) for v in args.size.split("x"))
    per_video = 4 if args.batched else 1
    repeat = max(1, args.clips_per_epoch // (len(relpaths) * per_video))
    dataset = VideoClipDataset(patcher, args.export, relpaths * repeat, clip_len=16, stride=4,
                               clips_per_video=per_video, height=height, width=width)
    sampler = SameVideoBatchSampler(dataset, args.batch_size) if args.batched else None
    batching = ({"batch_sampler": sampler} if sampler is not None
                else {"batch_size": args.batch_size, "shuffle": True})
    loader = DataLoader(dataset, **batching, num_workers=args.workers,
                        collate_fn=StatsCollate(dataset),
                        multiprocessing_context=args.context if args.workers else None)
    stats = LoaderStats()
    print(f"{len(relpaths)} videos, {len(dataset)} clips per epoch, {args.workers} workers, "
          f"{'batched' if args.batched else 'per-clip'} sampling")
    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)
        if sampler is not None:
            sampler.set_epoch(epoch)
        stats.start_epoch()
        clips, t0 = 0, time.perf_counter()
        for batch in loader:
            clips += batch["frames"].shape[0]
            stats.update(batch)
        seconds = time.perf_counter() - t0
        s = stats.total()
        print(f"epoch {epoch}: {clips} clips in {seconds:.2f} s = {clips / seconds:.1f} clips/s | "
              f"reads {s.reads}, KV hits/misses {s.kv_hits}/{s.kv_misses}, "
              f"agent {s.remote_bytes / 2**20:.2f} MiB in {s.remote_reads} reads, "
              f"index scans/KV {s.index_scans}/{s.index_from_kv}, fallbacks {s.fallbacks}")
    patcher.close()


if __name__ == "__main__":
    main()
