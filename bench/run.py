#!/usr/bin/env python3
"""fluxon_video benchmark: peers on local files vs fluxon_video through FluxonFS.

Generates (once, cached under --data) a small dataset of testsrc2 videos
(H.264 GOP 250 and GOP 30, faststart and moov-at-end, HEVC, VP9, AV1,
MPEG-4 part 2 in AVI, one 60 s video), starts a private redis-server and the
real agent on loopback, and times, with the same seeded clips for every
contender:

  1. peers on local files: decord, PyAV (seek to keyframe + decode forward),
     torchcodec, SPDL (demux, then sample_decode_video with the reference's
     filter) (a peer is skipped, with a note, where it does not import);
  2. fluxon cold: the file not in Redis, new patcher, bytes flow agent -> client;
  3. fluxon warm KV: Redis warm, a new process, no agent bytes expected;
  4. fluxon warm reader: the same reader pool again;
  5. batched: N clips of the 60 s video in one read_many_numpy_with_stats
     call vs one by one;

on three workloads: random 16-frame clips with stride 4 at 224x224 and at
native size, and a full sequential decode at 224x224. Then a piece-size
sweep (remote bytes, cold and warm time). Every contender's frames are
checked against the ffmpeg CLI's sequential decode; a contender returning
wrong frames is flagged in the table. Figures are medians of --repeat runs.

Writes latest.json, latest.md and PNG charts to --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from scenario import finish, parse_size, scenario_parser  # noqa: E402
from fluxon_video.fs.config import FluxonFsExport  # noqa: E402

MiB = 1 << 20
DEFAULT_PIECE_SIZE = FluxonFsExport.__dataclass_fields__["piece_size"].default
DEFAULTS = {"repeat": 3, "clips": 6, "batch_clips": 8, "sweep_piece_sizes": "256K,1M,4M"}
QUICK = {"repeat": 1, "clips": 2, "batch_clips": 4, "sweep_piece_sizes": "256K,1M"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = scenario_parser("run.py", __doc__, "a ~1 minute smoke run: shorter videos, 2 clips, "
                         "1 repeat", "latest.json, latest.md and the charts")
    ap.add_argument("--repeat", type=int,
                    help="timed runs of every measurement; figures are medians "
                         "(default: 3, quick: 1)")
    ap.add_argument("--clips", type=int,
                    help="random clips per video and workload (default: 6, quick: 2)")
    ap.add_argument("--batch-clips", type=int,
                    help="clips of the 60 s video in the batched workload (default: 8, quick: 4)")
    ap.add_argument("--seed", type=int, default=5, help="clip sampling seed (default: 5)")
    ap.add_argument("--threads", type=int, default=1,
                    help="decoder threads for every contender (default: 1, as the targets "
                         "are stated)")
    ap.add_argument("--piece-size", type=int, default=DEFAULT_PIECE_SIZE,
                    help="FluxonFS piece size for the main runs, bytes "
                         f"(default: the export default, {DEFAULT_PIECE_SIZE >> 10} KiB)")
    ap.add_argument("--sweep-piece-sizes",
                    help="piece sizes of the sweep, comma separated, K/M suffixes "
                         "(default: 256K,1M,4M, quick: 256K,1M; empty to skip the sweep)")
    ap.add_argument("--agent-latency-ms", type=float, default=0.0,
                    help="latency the agent adds to every stat and read, to model a remote "
                         "store (default: 0, loopback as is)")
    ap.add_argument("--sweep-latency-ms", type=float, default=2.0,
                    help="agent latency during the piece-size sweep, where round trips are "
                         "what larger pieces save (default: 2)")
    ap.add_argument("--phase", help=argparse.SUPPRESS)  # internal: run one child task
    args = finish(ap, ap.parse_args(argv), DEFAULTS, QUICK,
                  ("repeat", "clips", "batch_clips", "threads"))
    try:
        args.sweep = [parse_size(s) for s in args.sweep_piece_sizes.split(",") if s.strip()]
    except ValueError as exc:
        ap.error(f"--sweep-piece-sizes: {exc}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.phase:
        import tasks

        tasks.main(args.phase)
        return 0
    if args.render:
        import json

        import report

        report.write(json.loads(args.render.read_text()), args.out)
        return 0
    from orchestrate import Bench

    return Bench(args, argv if argv is not None else sys.argv[1:]).run()


if __name__ == "__main__":
    sys.exit(main())
