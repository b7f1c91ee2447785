"""The `fluxon-video` command line (also `python -m fluxon_video`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fluxon-video",
        description="Decode video frames from FluxonFS exports into NHWC uint8 arrays.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo", help="generate a few clips and read them, cold then warm",
        description="Generate test clips with the ffmpeg CLI into --data-dir and read "
                    "random 16-frame clips from them, printing per-read stats.")
    demo.add_argument("--data-dir", default=".demo-data",
                      help="where the generated clips go (default: %(default)s)")
    demo.add_argument("--clips", type=int, default=4,
                      help="clips read per video and pass (default: %(default)s)")
    demo.set_defaults(run=_run_demo)

    info = sub.add_parser("versions", help="print the FFmpeg library versions in use")
    info.set_defaults(run=_run_versions)
    return parser


def _run_demo(args: argparse.Namespace) -> int:
    from fluxon_video.demo import run_demo

    return run_demo(args.data_dir, clips=args.clips)


def _run_versions(args: argparse.Namespace) -> int:
    from fluxon_video.native import require_native

    _, decode = require_native("reporting library versions")
    for lib, version in decode.library_versions().items():
        print(f"{lib} {version}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one clear line instead of a traceback
        from fluxon_video.errors import FluxonFsError

        if not isinstance(exc, FluxonFsError):
            raise
        print(f"fluxon-video: error: {exc}", file=sys.stderr)
        return 1
