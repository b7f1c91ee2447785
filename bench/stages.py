"""Where a clip's time goes, per stage: the profile behind each missed speed target.

Each case is one missed target's condition on a local file (the store is out of the
picture: bench/matrix.py's remote suite shows warm reads cost what local reads cost). Every contender
reads the same seeded random clips in its own child process under `perf record`, which
samples only while the clips are read (the open and the index scan are done first, outside
the window). The samples are grouped by the library they ran in: decode (libavcodec and the
codec libraries it calls), convert (libswscale), demux (libavformat), libavutil, libc
(copies, allocation), Python with numpy and the bindings, the kernel. CPU ms per clip come
from the process's own user + system time in the window (every thread), split by those
shares; wall ms per clip is the window's length. "floor" is libavcodec alone from the
keyframe before each clip to its last frame, nothing converted (as in bench/matrix.py's
local suite). Frames are not checked here: bench/matrix.py's suites check the same
contenders' frames on the same kinds of video.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dataset import DATASET, long_specs, prepare, sample_clips, small_specs
from harness import (BENCH, add_options, finish, header, machine, num, publish, report_head,
                     say, scenario_parser, table, versions)
from threads_group import VIDEOS as THREAD_VIDEOS

CLIP, STRIDE, SIZE = 16, 2, 224
# (case, the target it explains, video spec, folder under --data, [(contender, threads)])
CASES = [
    ("local, H.264 GOP 30", "local decode per core >= 1.5x the best exact peer",
     DATASET[1], "videos", [("fluxon", 1), ("pyav", 1), ("decord", 1), ("floor", 1)]),
    ("local, VP9", "local decode per core >= 1.5x the best exact peer; <= the floor",
     DATASET[3], "videos", [("fluxon", 1), ("decord", 1), ("pyav", 1), ("floor", 1)]),
    ("1080p H.264, threads", "num_threads=2 >= 1.7x one thread",
     THREAD_VIDEOS[0], "threads", [("fluxon", 1), ("fluxon", 2), ("floor", 1), ("floor", 2),
                                   ("pyav", 2)]),
    ("long video, 1080p H.264 GOP 250", "remote long videos: warm >= 3x, cold >= 2.5x the "
     "best exact peer", long_specs(4)[3], "remote-videos", [("fluxon", 1), ("pyav", 1),
                                                             ("floor", 1)]),
    ("DataLoader video, 360p H.264", "DataLoader >= 1.5x decord", small_specs(1, 0, 0, lambda
     k: 4)[0], "loader-videos", [("fluxon", 1), ("decord", 1), ("floor", 1)]),
]
# Library (perf's DSO) -> stage, first match wins.
STAGES = [("decode", r"libavcodec|libdav1d|libvpx|libaom|libSvtAv1Dec|libde265|libopenh264"),
          ("convert", r"libswscale"), ("demux", r"libavformat"), ("libavutil", r"libavutil"),
          ("libc", r"libc[.-]|libm[.-]|ld-linux|libstdc\+\+|libgomp"),
          ("python", r"python|\.cpython-|numpy|libdecord|libtorchcodec|libspdl|libtorch"),
          ("kernel", r"\[kernel|\[vdso")]
STAGE_NAMES = [s for s, _ in STAGES] + ["other"]


# ---- the child: one contender, perf sampling only while the clips are read ----

def child(spec: dict) -> dict:
    sys.path.insert(0, str(BENCH))
    from contenders import open_handle

    path, clips, threads = Path(spec["path"]), spec["clips"], spec["threads"]
    family = "fluxon-local" if spec["contender"] == "fluxon" else spec["contender"]
    handle = open_handle(family, path, SIZE, SIZE, threads)
    handle.read(clips[0])  # first-touch costs (code pages, buffers) out of the window

    def window(on: bool) -> None:
        with open(spec["ctl"], "w") as ctl:
            ctl.write("enable\n" if on else "disable\n")
        with open(spec["ack"]) as ack:
            ack.readline()

    window(True)
    t0, c0 = time.perf_counter(), os.times()
    for clip in clips:
        handle.read(clip)
    t1, c1 = time.perf_counter(), os.times()
    window(False)
    handle.close()
    return {"wall_s": t1 - t0, "cpu_s": (c1.user - c0.user) + (c1.system - c0.system)}


# ---- the parent ----

def split_by_stage(report: str) -> dict[str, float]:
    """Fraction of the samples per stage, from the lines of `perf report --sort dso -q`
    ("  63.60%  libavcodec.so.59.37.100")."""
    found = dict.fromkeys(STAGE_NAMES, 0.0)
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(.+?)\s*$", line)
        if m:
            stage = next((s for s, rx in STAGES if re.search(rx, m.group(2))), "other")
            found[stage] += float(m.group(1)) / 100
    return found


def profile(contender: str, threads: int, path: Path, clips: list[list[int]]) -> dict:
    """One contender's child under perf: wall and CPU ms per clip, CPU ms per stage."""
    with tempfile.TemporaryDirectory(prefix="fluxon-stages-") as tmp:
        ctl, ack, data = Path(tmp, "ctl"), Path(tmp, "ack"), Path(tmp, "perf.data")
        os.mkfifo(ctl)
        os.mkfifo(ack)
        spec = {"contender": contender, "threads": threads, "path": str(path), "clips": clips,
                "ctl": str(ctl), "ack": str(ack)}
        run = subprocess.run(
            ["perf", "record", "-q", "-F", "1999", "-D", "-1", f"--control=fifo:{ctl},{ack}",
             "-o", str(data), "--", sys.executable, __file__, "--child", json.dumps(spec)],
            capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{contender} on {path.name}: {run.stderr.strip()[-400:]}")
        got = json.loads(run.stdout.strip().splitlines()[-1])
        report = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--sort", "dso",
                                 "-q", "--percent-limit", "0"],
                                capture_output=True, text=True, check=True).stdout
    split = split_by_stage(report)
    n = len(clips)
    cpu_ms = got["cpu_s"] * 1e3 / n
    return {"contender": contender, "threads": threads, "wall_ms": got["wall_s"] * 1e3 / n,
            "cpu_ms": cpu_ms, "stages_ms": {k: v * cpu_ms for k, v in split.items()}}


def render(results: dict) -> str:
    s = results["settings"]
    out = [*report_head("Where a clip's time goes (bench/stages.py)", results),
           f"{s['clips']} random clips of {CLIP} frames ({STRIDE} apart) at {SIZE}x{SIZE} per "
           "contender, read from the local file after an untimed open and first clip; perf "
           f"sampling at 1999 Hz only while the clips are read. Stage ms: CPU ms per clip "
           "(all threads) split by perf's samples per library; cores busy: CPU ÷ wall. wall ÷ "
           "fluxon: > 1 is slower than fluxon at 1 thread.", ""]
    for case in results["cases"]:
        rows = case["rows"]
        base = next(r["wall_ms"] for r in rows if r["contender"] == "fluxon")
        out += [f"## {case['case']}", "", f"{case['video']}; explains: {case['target']}", "",
                table(["contender", "threads", "wall ms/clip", "wall ÷ fluxon", "CPU ms/clip",
                       "cores busy", *STAGE_NAMES],
                      [[r["contender"], str(r["threads"]), num(r["wall_ms"], 1),
                        f"{r['wall_ms'] / base:.2f}×", num(r["cpu_ms"], 1),
                        f"{r['cpu_ms'] / r['wall_ms']:.2f}",
                        *(num(r["stages_ms"][k], 1) for k in STAGE_NAMES)] for r in rows]), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    if argv is None and sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(json.loads(sys.argv[2]))))
        return
    ap = scenario_parser("stages.py", __doc__, "4 clips of the first two cases",
                         "stages.md and stages.json")
    full, quick = add_options(ap, [
        ("--clips", int, 16, 4, "clips per contender"),
        ("--cases", str, ",".join(str(k + 1) for k in range(len(CASES))), "1,2",
         "cases to run, by number: " + "; ".join(f"{k + 1} {c[0]}" for k, c in enumerate(CASES))),
        ("--seed", int, 7, "clip sampling seed")])
    args = finish(ap, ap.parse_args(argv), full, quick, ("clips",))
    if not args.render and shutil.which("perf") is None:
        ap.error("`perf` is not installed (Debian: apt-get install linux-perf, or run "
                 "make bench-stages, which installs it)")
    if args.render:
        publish(args, "stages", render)
        return
    t_start = time.perf_counter()
    cases = []
    chosen = [CASES[int(k) - 1] for k in args.cases.split(",")]
    for name, target, spec, folder, contenders in chosen:
        video = prepare([spec], args.data / folder)[0]
        clips = sample_clips(video.frames, args.clips, CLIP, STRIDE,
                             np.random.default_rng(args.seed))
        rows = []
        for contender, threads in contenders:
            say(f"{name}: {contender}, {threads} thread(s)")
            rows.append(profile(contender, threads, video.path, clips))
        cases.append({"case": name, "target": target, "video": video.name, "rows": rows})
    results = {**header("stages.py", argv, time.perf_counter() - t_start, args),
               "machine": machine(), "versions": versions(), "cases": cases}
    publish(args, "stages", render, results)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
