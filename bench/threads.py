"""Decoder threads on 1080p: random 16-frame clips at 224x224 with 1, 2 and auto threads,
fluxon against PyAV, torchcodec, decord and SPDL at the same setting.

Videos (made once under <data>/threads by the ffmpeg CLI, testsrc2, 30 fps): 1080p H.264
(veryfast, 3 B-frames, GOP 60, 20 s) and 1080p HEVC (x265 ultrafast, GOP 60, 10 s). A
clip is 16 frames 2 apart from a seeded random start. Every contender keeps one reader per
video for a pass and reads the clips in turn: fluxon ``fv.open_video(path, 224, 224,
num_threads=t)`` (with t >= 2 a read whose frames start at different keyframes is split
over two decoders), the peers as in bench/run.py (bench/contenders.py). "auto" is each
library's own choice: FFmpeg's thread_count 0 for the peers, num_threads="auto" for
fluxon (a thread per core the process may run on). Frames are checked against the ffmpeg CLI (fluxon bit for bit).
Clips/s is the median over passes, a pass including its open; passes are interleaved.
Target: fluxon's clips/s at 2 threads >= 1.7x its clips/s at 1 thread.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fluxon_video.validation import thread_count

from contenders import PEERS, open_handle
from dataset import HEVC, X264, VideoSpec, prepare, sample_clips
from frames import CheckResult, cli_reference, needed
from harness import (add_options, error_text, finish, header, machine, median, num,
                     publish, report_head, say, scenario_parser, table, times, versions)

H = W = 224
CLIP, STRIDE, GOAL = 16, 2, 1.7
VIDEOS = [VideoSpec("h264_1080p_gop60.mp4", 1920, 1080, 20, 60, X264, faststart=True),
          VideoSpec("hevc_1080p_gop60.mp4", 1920, 1080, 10, 60, HEVC, faststart=True)]
SETTINGS = {"1": 1, "2": 2, "auto": 0}
CONTENDERS = ("fluxon", *PEERS)


def run_pass(name: str, path: Path, threads: int, clips: list[list[int]], ref: Any) -> dict:
    check = CheckResult(exact_required=name == "fluxon")
    handle, error, t0 = None, None, time.perf_counter()
    try:
        handle = open_handle(name, path, H, W, threads)
        for clip in clips:
            check.add(handle.read(clip), clip, ref)
    except Exception as exc:  # noqa: BLE001 - a failing contender is a finding
        error = error_text(exc)
    finally:
        if handle is not None:
            handle.close()
    seconds = time.perf_counter() - t0
    return {"clips_per_s": None if error else len(clips) / seconds, "error": error,
            "check": check.as_dict()}


def summary(passes: list[dict]) -> dict[str, Any]:
    error = next((p["error"] for p in passes if p["error"]), None)
    bad = next((p["check"]["verdict"] for p in passes if not p["check"]["ok"]), None)
    return {"clips_per_s": median(p["clips_per_s"] for p in passes if p["clips_per_s"]),
            "ok": not error and not bad, "verdict": f"FAILED: {error}" if error else
            bad or passes[-1]["check"]["verdict"]}


def render(results: dict) -> str:
    s = results["settings"]
    out = [*report_head("Decoder threads (bench/threads.py)", results),
           f"{s['clips']} clips of {CLIP} frames ({STRIDE} apart) at {H}x{W} per pass, median of "
           f"{s['repeat']} interleaved passes (a pass includes its open). auto: FFmpeg's "
           f"thread_count 0 for the peers, num_threads=\"auto\" ({results['cpus']} here) for fluxon. ⚠: "
           "the peer's frames did not pass the check (see frames).", ""]
    goals = []
    for video, rows in results["videos"].items():
        fx = rows["fluxon"]
        body = []
        for name, by in rows.items():
            rate = {k: by[k]["clips_per_s"] for k in SETTINGS}
            gain = {k: rate[k] / rate["1"] if rate[k] and rate["1"] else None for k in SETTINGS}
            body.append([name, *(num(rate[k]) for k in SETTINGS), times(gain["2"]),
                         times(gain["auto"]),
                         *(times(fx[k]["clips_per_s"] / rate[k]) if rate[k] and fx[k]["ok"]
                           and name != "fluxon" else "–" for k in SETTINGS),
                         ("" if all(by[k]["ok"] for k in SETTINGS) else "⚠ ")
                         + "; ".join(sorted({by[k]["verdict"][:60] for k in SETTINGS}))])
            if name == "fluxon":
                goals.append([video, f"fluxon 2 threads ÷ 1 thread >= {GOAL}×",
                              times(gain["2"]), "n/a" if gain["2"] is None
                              else "met" if gain["2"] >= GOAL else "missed"])
        out += [f"## {video}", "", table(
            ["contender", *(f"clips/s {k}" for k in SETTINGS), "2 ÷ 1", "auto ÷ 1",
             *(f"fluxon × ({k})" for k in SETTINGS), "frames"], body), ""]
    out += ["## Target", "", table(["video", "target", "measured", "status"], goals), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = scenario_parser("threads.py", __doc__, "4 clips, 1 pass, H.264 only",
                         "threads.md and threads.json")
    full, quick = add_options(ap, [
        ("--clips", int, 12, 4, "clips per pass"),
        ("--repeat", int, 3, 1, "passes per contender and setting"),
        ("--videos", str, "h264,hevc", "h264", "videos, comma-separated (h264, hevc)"),
        ("--seed", int, 5, "clip sampling seed")])
    args = finish(ap, ap.parse_args(argv), full, quick, ("clips", "repeat"))
    if args.render:
        return publish(args, "threads", render)
    t_start = time.perf_counter()
    specs = [v for v in VIDEOS if v.name.split("_")[0] in args.videos.split(",")]
    found = {}
    for video in prepare(specs, args.data / "threads"):
        rng = np.random.default_rng(args.seed)
        clips = sample_clips(video.frames, args.clips, CLIP, STRIDE, rng)
        say(f"{video.name}: reference frames (the ffmpeg CLI)")
        ref = cli_reference(video.path, H, W, needed(clips))
        passes: dict[str, dict[str, list]] = {c: {k: [] for k in SETTINGS} for c in CONTENDERS}
        for rep in range(args.repeat):
            for key, threads in SETTINGS.items():
                for name in CONTENDERS:
                    say(f"{video.name}: {name}, {key} threads (pass {rep + 1})")
                    passes[name][key].append(run_pass(name, video.path, threads, clips, ref))
        found[video.name] = {c: {k: summary(p) for k, p in by.items()} for c, by in passes.items()}
    results = {**header("threads.py", argv, time.perf_counter() - t_start, args),
               "machine": machine(), "versions": versions(), "cpus": thread_count("auto"),
               "videos": found}
    publish(args, "threads", render, results)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
