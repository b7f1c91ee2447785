"""LeRobot's own LeRobotDataset against fluxon_video.lerobot's, on a dataset LeRobot wrote.

LeRobot 0.6.1 (its own virtualenv, bench/install_peers.py --lerobot-venv) writes, once
and cached under <data>/lerobot-real, a v3 dataset with LeRobotDataset.create +
add_frame + save_episode (bench/lerobot_write.py: two cameras, front 480x640 and wrist
240x320, 30 fps, LeRobot's default AV1 encoding, episodes spread over several shard
files per camera). Every run is a process of its own (bench/lerobot_client.py) reading
the same seeded items:

- clip:   DataLoader, batch 8 random rows, each a 16-frame clip of the front camera
          (delta_timestamps -15/30 .. 0 s, LeRobot's padding at episode starts), one
          frame of the wrist camera, state and action; 0 and 2 workers
- rows16: DataLoader, batches of 16 consecutive rows (both cameras, one frame each);
          0 and 2 workers
- plain:  ds[i] for random rows, one process

Contenders: LeRobot's LeRobotDataset with video_backend torchcodec and pyav (local
files), Daft 0.7.26's LeRobot reader (local files, 0-worker rows: it runs its own
threads), fluxon_video.lerobot.LeRobotDataset on the local files, and fluxon through an
S3 export (moto behind bench/range_server.py --proxy: L ms per request, 50 MB/s per
connection; the agent reads the bucket, Redis in between): cold (Redis flushed) and
warm (a new process, Redis warm); cold+lookahead: cold, the dataset told the DataLoader's
batch order (``plan_batches``, as with a SeededBatchSampler) so each process fetches its
next batch's bytes while one decodes. LeRobot reads no object store, so the S3 rows are
compared with LeRobot on local files. Every frame is checked against the ffmpeg CLI's
frame whose pts is nearest to the row's time (from_timestamp + the row's float32
timestamp, LeRobot's rule), computed here from the parquet tables and ffprobe.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
FPS = 30
FRONT, WRIST = "observation.images.front", "observation.images.wrist"
CAMERAS = {FRONT: (480, 640), WRIST: (240, 320)}
CLIP = {FRONT: [(k - 15) / FPS for k in range(16)]}
RUNS = [("clip", 0), ("clip", 2), ("rows16", 0), ("rows16", 2), ("plain", 0)]
LOCAL = {"LeRobot (torchcodec)": ("lerobot", "torchcodec"), "LeRobot (pyav)": ("lerobot", "pyav"),
         "Daft": ("daft", None),
         "fluxon": ("fluxon", None)}
REMOTE = ("fluxon S3 cold", "fluxon S3 cold+lookahead", "fluxon S3 warm")
BASE = "LeRobot (torchcodec)"
GOAL_LOCAL, GOAL_S3 = 1.5, 2.0


# ---- the dataset, as LeRobot wrote it, and the expected frames ----

def parquet(paths: list[Path]) -> dict[str, np.ndarray]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables([pq.read_table(p) for p in paths])
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names
            if not name.startswith("stats/")}


def expectations(root: Path) -> dict[str, Any]:
    """Per row and camera: the video file and the frame LeRobot's rule picks there
    (nearest pts to from_timestamp + float32 timestamp), and the row's episode bounds."""
    from frames import frame_times

    info = json.loads((root / "meta" / "info.json").read_text())
    eps = parquet(sorted((root / "meta" / "episodes").rglob("*.parquet")))
    data = parquet(sorted((root / "data").rglob("*.parquet")))
    order = np.argsort(data["index"])
    index, episode = data["index"][order], data["episode_index"][order]
    stamp = data["timestamp"][order].astype(np.float32)
    assert (index == np.arange(len(index))).all()
    by_ep = {int(e): k for k, e in enumerate(eps["episode_index"])}
    files: list[str] = []
    pts: dict[str, np.ndarray] = {}
    out: dict[str, Any] = {"fps": info["fps"], "file": {}, "frame": {}, "time": {},
                           "ep_from": [], "ep_to": []}
    for cam in CAMERAS:
        fid, frame, when = [], [], []
        for row in range(len(index)):
            k = by_ep[int(episode[row])]
            rel = info["video_path"].format(
                video_key=cam, chunk_index=int(eps[f"videos/{cam}/chunk_index"][k]),
                file_index=int(eps[f"videos/{cam}/file_index"][k]))
            if rel not in pts:
                pts[rel] = frame_times(root / rel)
                files.append(rel)
            t = float(eps[f"videos/{cam}/from_timestamp"][k]) + float(stamp[row])
            fid.append(files.index(rel))
            frame.append(int(np.argmin(np.abs(pts[rel] - t))))
            when.append(t)
        out["file"][cam], out["frame"][cam], out["time"][cam] = fid, frame, when
    for row in range(len(index)):
        k = by_ep[int(episode[row])]
        out["ep_from"].append(int(eps["dataset_from_index"][k]))
        out["ep_to"].append(int(eps["dataset_to_index"][k]))
    out["files"] = files
    out["pts_gap_us"] = max(float(np.min(np.abs(pts[files[f]] - t))) * 1e6
                            for cam in CAMERAS for f, t in zip(out["file"][cam], out["time"][cam]))
    out["below_pts"] = sum(int(pts[files[f]][i] > t) for cam in CAMERAS for f, i, t in
                           zip(out["file"][cam], out["frame"][cam], out["time"][cam]))
    return out


def plans(rows: int, args: Any) -> dict[str, list[list[int]]]:
    rng = random.Random(args.seed)
    clip = [[rng.randrange(rows) for _ in range(8)] for _ in range(args.clip_batches)]
    rows16 = [list(range(s, s + 16)) for s in
              (rng.randrange(rows - 16) for _ in range(args.row_batches))]
    plain = [[rng.randrange(rows)] for _ in range(args.plain_items)]
    return {"clip": clip, "rows16": rows16, "plain": plain}


def needed(expect: dict, plan: dict[str, list[list[int]]]) -> dict[int, set[int]]:
    """Per file number, the frames the checks compare against (and their neighbours)."""
    out: dict[int, set[int]] = {}
    for workload, batches in plan.items():
        for batch in batches:
            for row in batch:
                for cam in CAMERAS:
                    offs = [round(d * FPS) for d in CLIP.get(cam, [0])] if workload == "clip" \
                        else [0]
                    for d in offs:
                        r = min(max(row + d, expect["ep_from"][row]), expect["ep_to"][row] - 1)
                        i = expect["frame"][cam][r]
                        out.setdefault(expect["file"][cam][r], set()).update((i - 1, i, i + 1))
    return out


# ---- runs ----

def servers_cpu_s() -> float:
    """CPU seconds so far of this bench's other children (redis, moto, the relays,
    the agent): what the S3 rows' store costs the 2 cores the client decodes on."""
    import psutil

    total = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def lerobot_dataset(python: Path, data: Path, episodes: int, seed: int
                    ) -> tuple[Path, dict[str, Any]]:
    """The dataset LeRobot writes (bench/lerobot_write.py with LeRobot's python), written
    once under ``<data>/lerobot-real``: its root and what the writer reported."""
    from harness import say

    root = data / "lerobot-real" / f"ds-{episodes}ep-s{seed}"
    report = root.parent / f"{root.name}.json"
    if not (root / "meta" / "info.json").exists() or not report.exists():
        say(f"LeRobot writes {episodes} episodes to {root}")
        shutil.rmtree(root, ignore_errors=True)  # LeRobot refuses to write into a folder
        proc = subprocess.run([str(python), str(BENCH / "lerobot_write.py"), str(root),
                               "--episodes", str(episodes), "--seed", str(seed),
                               "--video-mb", "4"], capture_output=True, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if proc.returncode:
            sys.exit(f"bench: LeRobot could not write the dataset: {proc.stderr[-2000:]}")
        report.write_text(proc.stdout.strip().splitlines()[-1])
    return root, json.loads(report.read_text())


def run_client(python: Path, spec: dict, work: Path, name: str) -> dict[str, Any]:
    import resource

    path = work / f"spec-{name}.json"
    path.write_text(json.dumps(spec))
    servers0 = servers_cpu_s()
    own0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": str(BENCH.parent) if spec["impl"] == "fluxon" else "",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([str(python), str(BENCH / "lerobot_client.py"), str(path)],
                          capture_output=True, text=True, env=env, timeout=1800)
    own1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300]}
    # the client with its DataLoader workers (reaped by it), and the servers, over
    # the whole run (dataset construction and the check pass included)
    return {**json.loads(lines[-1]),
            "client_cpu_s": own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime,
            "servers_cpu_s": servers_cpu_s() - servers0}


def median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def summarise(passes: list[dict]) -> dict[str, Any]:
    ok = [p for p in passes if "items_per_s" in p]  # the passes that ran and were checked
    if not ok:
        return {"error": passes[0].get("error", "?"), "passes": passes}
    check = ok[-1]["check"]
    for p in ok[:-1]:
        for k, v in p["check"].items():
            check[k] = max(check[k], v) if k != "frames" else check[k]
    return {"items_per_s": median([p["items_per_s"] for p in ok]),
            "main_mib": max(p["rss"]["main_mib"] for p in ok),
            "worker_mib": max((max(p["rss"]["workers_mib"], default=0) for p in ok),
                              default=0) or None,
            "client_cpu_s": median([p["client_cpu_s"] for p in ok if "client_cpu_s" in p]),
            "servers_cpu_s": median([p["servers_cpu_s"] for p in ok if "servers_cpu_s" in p]),
            "check": check, "examples": ok[-1]["examples"], "passes": passes}


def main(argv: list[str] | None = None) -> None:
    from harness import (add_options, finish, header, machine, publish, say, scenario_parser,
                         versions)

    ap = scenario_parser("lerobot.py", __doc__, "4 episodes, a few batches",
                         "lerobot.md and lerobot.json")
    full, quick = add_options(ap, [
        ("--episodes", int, 12, 4, "episodes LeRobot writes"),
        ("--clip-batches", int, 10, 2, "clip batches of 8 rows"),
        ("--row-batches", int, 20, 3, "batches of 16 consecutive rows"),
        ("--plain-items", int, 40, 12, "ds[i] items"),
        ("--repeat", int, 2, 1, "timed runs per row (median; interleaved)"),
        ("--seed", int, 7, "seed of the episodes and the items"),
        ("--latency-ms", float, 10.0, -1.0, "the S3 model's latency per request (-1: local "
                                             "only)"),
        ("--runs", str, ",".join(f"{w}:{n}" for w, n in RUNS),
         "workload:workers pairs to run, comma-separated")])
    args = finish(ap, ap.parse_args(argv), full, quick, ("episodes", "repeat"))
    runs = [(w, int(n)) for w, n in (r.split(":") for r in args.runs.split(","))]
    if any(r not in RUNS for r in runs):
        ap.error(f"--runs: choose among {','.join(f'{w}:{n}' for w, n in RUNS)}")
    if args.render:
        return publish(args, "lerobot", render)
    t_start = time.perf_counter()
    from install_peers import install_daft, install_lerobot

    load_start = os.getloadavg()[0]
    notes: list[str] = []
    say("LeRobot's virtualenv")
    lerobot_py = install_lerobot(args.data / "venv-lerobot")
    if lerobot_py is None:
        sys.exit("bench: LeRobot did not install (see above)")
    if not install_daft(lerobot_py):
        notes.append("Daft did not install: its rows are missing")
        LOCAL.pop("Daft")
    root, written = lerobot_dataset(lerobot_py, args.data, args.episodes, args.seed)
    say("expected frames (parquet + ffprobe) and the CLI's reference frames")
    expect = expectations(root)
    plan = plans(len(expect["ep_from"]), args)
    work = args.data / "lerobot-real" / "work"
    refs = work / f"refs-{root.name}-{args.seed}-{args.clip_batches}-{args.row_batches}-" \
                  f"{args.plain_items}"
    if not (refs / "done").exists():
        from frames import references

        refs.mkdir(parents=True, exist_ok=True)
        info = json.loads((root / "meta" / "info.json").read_text())["features"]
        jobs = {}
        for fid, frames in needed(expect, plan).items():
            rel = expect["files"][fid]
            h, w = info[rel.split("/")[1]]["shape"][:2]
            jobs[fid] = (root / rel, h, w, sorted(i for i in frames if i >= 0))
        for fid, ref in references(jobs, 2).items():
            ref.save(refs / f"{fid}.npz")
        (refs / "done").touch()
    lerobot_ver = subprocess.run([str(lerobot_py), "-c", "import lerobot, torch, torchcodec, av; "
                                  "print(lerobot.__version__, torch.__version__, "
                                  "torchcodec.__version__, av.__version__); import daft; "
                                  "print(daft.__version__)"],
                                 capture_output=True, text=True, cwd="/").stdout.split()

    def spec(impl: str, backend: str | None, workload: str, workers: int,
             root_arg: str, fx: dict | None = None) -> dict:
        return {"impl": impl, "backend": backend, "repo_id": "fluxon/bench", "root": root_arg,
                "fx": fx, "delta": CLIP if workload == "clip" else None, "workload": workload,
                "workers": workers, "batches": plan[workload], "cameras": list(CAMERAS),
                "refs": str(refs), "expect": expect}

    results: dict[str, dict[str, Any]] = {}
    for workload, workers in runs:
        key = f"{workload} w{workers}"
        results[key] = {}
        passes: dict[str, list] = {name: [] for name in LOCAL}
        for _ in range(args.repeat):
            for name, (impl, backend) in LOCAL.items():  # interleaved
                if impl == "daft" and workers:
                    continue  # Daft runs its own threads, not DataLoader workers
                say(f"{key}: {name}")
                py = Path(sys.executable) if impl == "fluxon" else lerobot_py
                passes[name].append(run_client(py, spec(impl, backend, workload, workers,
                                                        str(root.resolve())), work, "local"))
        for name in LOCAL:
            if passes[name]:
                results[key][name] = summarise(passes[name])
    if args.latency_ms >= 0:
        from stores import RemoteStore

        names = [str(p.relative_to(root.parent)) for p in sorted(root.rglob("*")) if p.is_file()]
        say(f"S3 export: {len(names)} files into moto, {args.latency_ms:g} ms per request")
        s3work = work / "s3"
        s3work.mkdir(parents=True, exist_ok=True)
        store = RemoteStore(s3work, "lerobot", root.parent, 50.0, s3=names)
        try:
            store.set_latency(args.latency_ms)
            for workload, workers in runs:
                key = f"{workload} w{workers}"
                passes = {name: [] for name in REMOTE}
                for _ in range(args.repeat):
                    for name in REMOTE:
                        if name.endswith("lookahead") and workload == "plain":
                            continue  # ds[i] has no next batch to plan
                        if "cold" in name:
                            store.flush()
                        say(f"{key}: {name}")
                        passes[name].append(run_client(Path(sys.executable), {**spec(
                            "fluxon", None, workload, workers, f"lerobot:{root.name}",
                            store.fx()), "ahead": name.endswith("lookahead")}, work, "s3"))
                for name in REMOTE:
                    if passes[name]:
                        results[key][name] = summarise(passes[name])
        finally:
            store.stop()
    notes.append(f"LeRobot-written dataset: {written['rows']} rows, {written['episodes']} "
                 f"episodes; shard files per camera: " + ", ".join(
                     f"{cam.rsplit('.', 1)[-1]} {len(v)}" for cam, v in written["shards"].items())
                 + f"; written in {written['seconds']} s")
    notes.append(f"Row times below their frame's pts: {expect['below_pts']} of "
                 f"{len(CAMERAS) * len(expect['ep_from'])} (row, camera) times; the largest gap "
                 f"to the nearest pts {expect['pts_gap_us']:.2f} µs")
    notes.append(f"Load average (1 min) at the start {load_start:.1f}, at the end "
                 f"{os.getloadavg()[0]:.1f}, on {os.cpu_count()} cores shared with other work")
    out = {**header("lerobot.py", argv, time.perf_counter() - t_start, args),
           "machine": machine(), "versions": versions(),
           "lerobot_versions": dict(zip(("lerobot", "torch", "torchcodec", "av", "daft"),
                                        lerobot_ver)),
           "dataset": {k: v for k, v in written.items() if k != "root"},
           "runs": results, "notes": notes}
    publish(args, "lerobot", render, out)


# ---- the report ----

UNITS = {"clip": "items/s", "rows16": "rows/s", "plain": "items/s"}
WHAT = {"clip w0": "clip, 0 workers", "clip w2": "clip, 2 workers",
        "rows16 w0": "16 consecutive rows, 0 workers", "rows16 w2": "16 consecutive rows, 2 workers",
        "plain w0": "plain ds[i]"}


def fmt(x: float | None, d: int = 1) -> str:
    return "—" if x is None else f"{x:.{d}f}"


def render(res: dict) -> str:
    from harness import report_head, table

    s = res["settings"]
    runs = res["runs"]
    names = list(dict.fromkeys(n for r in runs.values() for n in r))
    out = [*report_head("LeRobot's LeRobotDataset vs fluxon_video.lerobot (bench/lerobot.py)",
                        res),
           "LeRobot side: " + ", ".join(f"{k} {v}" for k, v in res["lerobot_versions"].items())
           + " (its own virtualenv, see bench/README.md).", "",
           f"Items: clip = batches of 8 random rows, 16 frames of the front camera "
           f"(delta_timestamps) + 1 of the wrist camera + state/action ({s['clip_batches']} "
           f"batches); rows16 = batches of 16 consecutive rows, both cameras "
           f"({s['row_batches']} batches); plain = ds[i] ({s['plain_items']} items). "
           f"Throughput: items (rows) per second of one epoch, DataLoader start-up included, "
           f"dataset construction excluded; median of {s['repeat']} run(s). S3 rows: moto "
           f"behind the latency proxy at {s['latency_ms']:g} ms per request and 50 MB/s per "
           "connection, read through the agent and Redis; ratios against LeRobot "
           "(torchcodec) on the local files. Daft: its LeRobot reader "
           "(`daft.datasets.lerobot.read`, one camera decoded per DataFrame), queried per "
           "batch for the batch's rows (a clip's window clamped to its episode as LeRobot "
           "pads); it gives uint8 HWC frames (no float conversion) and runs its own threads, "
           "so it has 0-worker rows only.", ""]
    rows = []
    for key, r in runs.items():
        base = r.get(BASE, {}).get("items_per_s")
        for name in names:
            x = r.get(name)
            if x is None:
                continue
            if "error" in x:
                rows.append([WHAT[key], name, "FAILED: " + x["error"][:80], "", "", "", "", ""])
                continue
            c = x["check"]
            ratio = x["items_per_s"] / base if base else None
            rows.append([WHAT[key], name, fmt(x["items_per_s"], 2),
                         "—" if ratio is None else f"{ratio:.2f}×",
                         fmt(x["main_mib"], 0), fmt(x["worker_mib"], 0),
                         f"{fmt(x.get('client_cpu_s'))} / {fmt(x.get('servers_cpu_s'))}"
                         if name.startswith("fluxon S3") else fmt(x.get("client_cpu_s")),
                         f"{c['frames']} checked: {c['exact']} exact, {c['right']} right, "
                         f"{c['wrong']} wrong" + (f", {c['pad_flags_wrong']} bad pad flags"
                                                  if c.get("pad_flags_wrong") else "")])
    out += [table(["workload", "contender", "items/s", "÷ LeRobot (torchcodec)",
                   "peak RSS main MiB", "peak RSS per worker MiB",
                   "CPU-s: client / store's servers", "frames vs ffmpeg CLI"],
                  rows), "",
           "CPU-s: the whole client run (dataset construction and, with workers, the "
           "untimed check pass included); for S3 rows also what redis, moto, the relays and "
           "the agent used meanwhile, on the same 2 cores.", ""]
    goals = []
    wrong = sum(x["check"]["wrong"] for r in runs.values() for n, x in r.items()
                if n.startswith("fluxon") and "check" in x)
    goals.append(["0 wrong frames (fluxon, every row)", f"{wrong} wrong",
                  "met" if wrong == 0 else "missed"])
    for key, r in runs.items():
        base = r.get(BASE, {}).get("items_per_s")
        for name, goal in (("fluxon", GOAL_LOCAL), ("fluxon S3 cold", GOAL_S3),
                           ("fluxon S3 cold+lookahead", GOAL_S3)):
            x = r.get(name, {})
            if base and x.get("items_per_s"):
                ratio = x["items_per_s"] / base
                goals.append([f"{name} ≥ {goal:g}× LeRobot (torchcodec), {WHAT[key]}",
                              f"{ratio:.2f}×", "met" if ratio >= goal else "missed"])
        lr, fx = r.get(BASE, {}), r.get("fluxon", {})
        side = "worker_mib" if key.endswith("w2") else "main_mib"
        if lr.get(side) and fx.get(side):
            goals.append([f"fluxon peak RSS ≤ LeRobot's ({'per worker' if side == 'worker_mib' else 'main process'}), {WHAT[key]}",
                          f"{fx[side]:.0f} vs {lr[side]:.0f} MiB",
                          "met" if fx[side] <= lr[side] else "missed"])
    out += ["## Goals", "", table(["goal", "measured", "status"], goals), ""]
    examples = [f"{n} ({WHAT[k]}): {e}" for k, r in runs.items() for n, x in r.items()
                for e in x.get("examples", [])[:2]]
    if examples:
        out += ["Wrong frames, first of each row:", "", *[f"- {e}" for e in examples], ""]
    out += [f"- {n}" for n in res.get("notes", [])]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH))
    main()
