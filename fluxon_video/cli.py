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

    agent = sub.add_parser(
        "agent", help="serve export roots to FluxonFS clients (stat, read_chunk)",
        description="Run the FluxonFS agent on the storage host: it answers stat and "
                    "read_chunk over HTTP/1.1 for the exports in --config, checking each "
                    "request's bearer token against the export's access list.")
    agent.add_argument("--config", required=True, help="TOML file with [identities] and [[exports]]")
    agent.add_argument("--listen", default="127.0.0.1:8765",
                       help="HOST:PORT to listen on (default: %(default)s)")
    agent.add_argument("--io-threads", type=int, default=32,
                       help="threads reading files (default: %(default)s)")
    agent.add_argument("--access-log", action="store_true", help="log every request")
    agent.add_argument("--inject-latency-ms", type=float, default=0.0, metavar="MS",
                       help="wait MS milliseconds before answering each stat and read, to "
                            "model a remote store in benchmarks (default: %(default)s)")
    agent.set_defaults(run=_run_agent)

    info = sub.add_parser("versions", help="print the FFmpeg library versions in use")
    info.set_defaults(run=_run_versions)
    return parser


def _run_demo(args: argparse.Namespace) -> int:
    from fluxon_video.demo import run_demo

    return run_demo(args.data_dir, clips=args.clips)


def _run_agent(args: argparse.Namespace) -> int:
    import logging

    from fluxon_video.fs.agent import run_agent
    from fluxon_video.fs.config import load_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run_agent(load_config(args.config), args.listen, args.io_threads, args.access_log,
              args.inject_latency_ms)
    return 0


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
