#!/usr/bin/env python3
"""The benchmark's one runner: a suite's cases (bench/suites.py), filtered, run group by
group (bench/codecs_group.py, bench/rounds_group.py), one results file of records and its
report (bench/render.py). Its --help is bench/README.md's section."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from cases import Case, Filters, select, unknown  # noqa: E402
from harness import grouped, say, tool_parser  # noqa: E402
from suites import SUITES, Suite  # noqa: E402

# Settings a suite may take from the command line: (flag, type, help). Their defaults are
# the suite's (bench/suites.py SUITES: full and --quick); an option a suite does not use is
# ignored by it.
SETTINGS = [
    ("--repeat", int, "local, threads: timed runs of every measurement; loader: timed "
                     "epochs per case; lerobot, av: passes per case; figures are medians"),
    ("--clips", int, "local, threads: random clips per video (and workload; threads: per "
                     "pass)"),
    ("--batch-clips", int, "local: clips of the 60 s video in the batched workload"),
    ("--seed", int, "clip sampling seed"),
    ("--threads", int, "decoder threads for every contender"),
    ("--piece-size", int, "FluxonFS piece size, bytes (default: the export's)"),
    ("--sweep-piece-sizes", str, "local: piece sizes of the sweep, comma separated, K/M "
                                 "suffixes; empty: none"),
    ("--sweep-latency-ms", float, "local: agent latency during the piece-size sweep"),
    ("--bandwidth-mbps", float, "remote: per-connection cap in MB/s (10^6 bytes/s), server "
                                "-> client, for every contender (the relay); 0: none"),
    ("--rounds", str, "remote: interleaved rounds per workload: one number for every "
                      "latency, or one per latency, comma separated; figures are medians"),
    ("--videos", int, "remote: videos in the clips and metadata workloads, one item each "
                      "per round"),
    ("--batched-items", int, "remote: videos per round in the batched workload"),
    ("--batched-clips", int, "remote: K, clips per batched item"),
    ("--block-sizes", str, "remote: fsspec block sizes of the PyAV and torchcodec rows; "
                           "'default' is fsspec's (5 MiB); s3: the s3fs block and obstore "
                           "buffer sizes"),
    ("--long-videos", int, "remote: 2-minute videos of the 'long' workload"),
    ("--long-items", int, "remote: items (random clips, a new open each) per long video per "
                          "round"),
    ("--thread-videos", str, "threads: the 1080p videos, comma separated (h264, hevc)"),
    ("--items", int, "loader: clips per epoch; av: random 2 s spans per video"),
    ("--workers", int, "loader: DataLoader worker processes"),
    ("--batch-size", int, "loader: clips per batch"),
    ("--per-video", int, "loader: clips per video in the loader-batched workload"),
    ("--context", str, "loader: worker start method, fork, spawn or forkserver (default: the "
                       "platform's)"),
    ("--max-other-cpu", float, "loader: redo a timed epoch during which other work on the "
                               "machine used more than this many cores"),
    ("--retries", int, "loader: at most this many redos per timed epoch"),
    ("--episodes", int, "lerobot: episodes LeRobot writes"),
    ("--clip-batches", int, "lerobot: clip batches of 8 rows"),
    ("--row-batches", int, "lerobot: batches of 16 consecutive rows"),
    ("--plain-items", int, "lerobot: ds[i] items"),
    ("--warmup", int, "lerobot: untimed passes of a local case right before each timed one"),
    ("--seconds", float, "av: length of the videos made, s (at least 4)"),
]
AT_LEAST_ONE = ("repeat", "clips", "batch_clips", "threads", "videos", "batched_items",
                "batched_clips", "items", "batch_size", "per_video", "episodes", "clip_batches",
                "row_batches", "plain_items")


def parser() -> argparse.ArgumentParser:
    ap = tool_parser("matrix.py")
    ap.add_argument("--suite", choices=sorted(SUITES), default="local",
                    help="the cases and settings to start from (default: local)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run of the suite (its quick settings: shorter or fewer "
                         "videos, one round); results to <data>/quick-results unless --out")
    ap.add_argument("--data", type=Path, default=BENCH / ".data",
                    help="generated videos and scratch files (default: bench/.data)")
    ap.add_argument("--out", type=Path, help="where the results JSON, its report and charts "
                                              "go (default: bench/results)")
    ap.add_argument("--render", type=Path, metavar="JSON",
                    help="only redraw the report of a results file (this runner's, or a "
                         "retired script's JSON, converted) into --out, under the file's "
                         "own name")
    ap.add_argument("--list", action="store_true", help="print the selected cases and stop")
    for name, what in (("workloads", "clips, clips-native, sequential, batched, metadata, "
                                     "long, loader-clips, loader-batched, lerobot-clip-w0, "
                                     "lerobot-clip-w2, lerobot-rows16-w0, lerobot-rows16-w2, "
                                     "lerobot-plain, av-clips, av-clips-open"),
                       ("stores", "local, agent, s3"),
                       ("contenders", "fluxon, decord, pyav, torchcodec, spdl, "
                                      "lerobot-torchcodec, lerobot-pyav, daft"),
                       ("caches", "cold, cold+lookahead, warm-kv, warm-kv+shared, "
                                  "warm-reader, none")):
        ap.add_argument(f"--{name}", metavar="A,B", help=f"only these {name} ({what})")
    settings = ap.add_argument_group(
        "settings", "default: the suite's (full, or its --quick ones: bench/suites.py); a "
                    "setting the suite does not use is ignored")
    settings.add_argument("--latencies", metavar="MS,MS",
                          help="per-request latencies of the store, ms, comma separated (the "
                               "suite's cases are made for each; local: the agent's)")
    for flag, kind, text in SETTINGS:
        settings.add_argument(flag, type=kind, help=text)
    return ap


def settings_of(suite: Suite, args: argparse.Namespace, ap: argparse.ArgumentParser
                ) -> dict[str, Any]:
    """The suite's defaults (quick ones with --quick), overridden by the options given."""
    from fluxon_video.fs.config import FluxonFsExport

    given = {k: v for k, v in vars(args).items() if v is not None and k in
             {flag[2:].replace("-", "_") for flag, _, _ in SETTINGS} | {"latencies"}}
    settings = {**suite.defaults, **(suite.quick if args.quick else {}), **given}
    settings["piece_size"] = (settings.get("piece_size")
                              or FluxonFsExport.__dataclass_fields__["piece_size"].default)
    for name in AT_LEAST_ONE:
        if name in settings and int(settings[name]) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    try:
        lats = [float(x) for x in str(settings["latencies"]).split(",") if x.strip()]
    except ValueError as exc:
        ap.error(f"--latencies: {exc}")
    if not lats or min(lats) < 0:
        ap.error("--latencies: one or more values >= 0")
    if "rounds" in settings:
        rounds = [int(x) for x in str(settings["rounds"]).split(",") if x.strip().isdigit()]
        if not rounds or min(rounds) < 1 or len(rounds) not in (1, len(lats)):
            ap.error("--rounds: one number >= 1, or one per latency")
    if float(settings.get("bandwidth_mbps") or 0) < 0:
        ap.error("--bandwidth-mbps must be >= 0")
    if settings.get("context") not in (None, "fork", "spawn", "forkserver"):
        ap.error("--context: fork, spawn or forkserver")
    if int(settings.get("workers") or 0) < 0 or int(settings.get("retries") or 0) < 0:
        ap.error("--workers and --retries must be at least 0")
    if "per_video" in settings and (settings["batch_size"] % settings["per_video"]
                                    or settings["items"] % settings["batch_size"]):
        ap.error("--batch-size must be a multiple of --per-video, --items of --batch-size")
    # av: spans start in [0, seconds - 3.9 s] (the edit-list copy lacks the first 1.3 s)
    if float(settings.get("seconds") or 4) < 4:
        ap.error("--seconds must be at least 4")
    if settings.get("store") == "s3" and "default" in str(settings.get("block_sizes", "")):
        ap.error("--suite remote-s3: name every block size (s3fs's default is 50 MiB; obstore "
                 "needs one)")
    return settings


# Each dataset's group (its module and class) and the tally of its results; the other
# datasets' cases run as round groups. A module loads when its cases run (the loader's
# imports torch, the lerobot's installs LeRobot).
GROUPS = {"codecs": ("codecs_group", "CodecsGroup", "codecs_records"),
          "threads": ("threads_group", "ThreadsGroup", "threads_records"),
          "loader": ("loader_group", "LoaderGroup", "loader_records"),
          "lerobot": ("lerobot_group", "LerobotGroup", "lerobot_records"),
          "av": ("av_group", "AvGroup", "av_records")}
ROUNDS_GROUP = ("rounds_group", "RoundsGroup", "rounds_records")


def run_groups(cases: list[Case], settings: dict[str, Any], data: Path, quick: bool,
               argv: list[str]) -> tuple[dict[str, Any], list]:
    """Each group of cases that share a setup, run in turn; their records and meta."""
    import importlib

    import tally

    records: list = []
    meta: dict[str, Any] = {}
    for dataset, group in grouped(cases, lambda c: c.setup).items():
        module, runner, tally_of = GROUPS.get(dataset, ROUNDS_GROUP)
        group_class = getattr(importlib.import_module(module), runner)
        results = group_class(group, settings, data, *((quick,) if dataset == "codecs" else ())
                              ).run(argv)
        records += getattr(tally, tally_of)(results)
        meta = merge_meta(meta, tally.meta_of(results, "", argv))
    return meta, records


def merge_meta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two groups' meta as one: versions, videos, notes and skipped contenders joined."""
    if not a:
        return b
    return {**a, "duration_s": (a.get("duration_s") or 0) + (b.get("duration_s") or 0),
            "versions": {**a["versions"], **b["versions"]},
            "videos": a["videos"] + [v for v in b["videos"] if v not in a["videos"]],
            "notes": a["notes"] + b["notes"], "skipped": {**a["skipped"], **b["skipped"]}}


def main(argv: list[str] | None = None) -> int:
    from record import Results, load
    from render import write

    argv = sys.argv[1:] if argv is None else argv
    ap = parser()
    args = ap.parse_args(argv)
    out = args.out or (args.data / "quick-results" if args.quick else BENCH / "results")
    if args.render:
        results = load(args.render)
        stem = args.render.stem
        written = [results.write(out / f"{stem}.json"), *write(results, out, stem)]
        say("wrote " + ", ".join(str(p) for p in written))
        return 0
    suite = SUITES[args.suite]
    filters = Filters.parse(workloads=args.workloads, stores=args.stores,
                            contenders=args.contenders, caches=args.caches)
    wrong = unknown(filters)
    if wrong:
        ap.error("no case has " + ", ".join(wrong))
    settings = settings_of(suite, args, ap)
    cases = select(suite.cases(settings), filters)
    if not cases:
        ap.error("the filters leave no case of the suite")
    if args.list:
        print("\n".join(c.key() for c in cases))
        return 0
    meta, records = run_groups(cases, settings, args.data, args.quick, argv)
    results = Results({**meta, "suite": suite.name, "command": "python bench/matrix.py "
                       + " ".join(argv), "settings": settings,
                       "cases": [c.key() for c in cases]}, records)
    written = [results.write(out / f"{suite.stem}.json"), *write(results, out, suite.stem)]
    say("wrote " + ", ".join(str(p) for p in written))
    print(summary(results))
    return 0


def summary(results: Any) -> str:
    """The records in one line each, for the terminal."""
    lines = []
    for r in results.records:
        per = {"metadata": (1 / r.clips_per_item, "videos/s"),
               "sequential": ((r.frames_per_item or 0) / r.clips_per_item, "frames/s")}
        scale, unit = per.get(r.case.workload, (
            1.0, "items/s" if r.case.workload.startswith("lerobot-") else "clips/s"))
        rate = f"{r.clips_per_s * scale:.2f} {unit}" if r.clips_per_s else "–"
        lines.append(f"{r.case.key()}{' ' + r.video if r.video else ''}: {rate}, "
                     + (f"p50 {r.item_ms_p50:.0f} ms, " if r.item_ms_p50 else "")
                     + r.verdict[:60])
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
