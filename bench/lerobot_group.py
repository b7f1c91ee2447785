"""The LeRobot group (the lerobot suite; was bench/lerobot.py): LeRobot's own
LeRobotDataset against fluxon_video.lerobot's, on a dataset LeRobot wrote.

LeRobot 0.6.1 (its own virtualenv, bench/install_peers.py --lerobot-venv) writes, once
and cached under <data>/lerobot-real, a v3 dataset with LeRobotDataset.create +
add_frame + save_episode (bench/lerobot_write.py: two cameras, front 480x640 and wrist
240x320, 30 fps, LeRobot's default AV1 encoding, episodes spread over several shard
files per camera). Every run is a process of its own (bench/lerobot_client.py) reading
the same seeded items:

- lerobot-clip-w0/-w2: DataLoader (0 or 2 workers), batch 8 random rows, each a 16-frame
  clip of the front camera (delta_timestamps -15/30 .. 0 s, LeRobot's padding at episode
  starts), one frame of the wrist camera, state and action
- lerobot-rows16-w0/-w2: DataLoader, batches of 16 consecutive rows (both cameras, one
  frame each)
- lerobot-plain: ds[i] for random rows, one process

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
from collections.abc import Sequence
from typing import Any

import numpy as np

from cases import Case
from harness import grouped, header, machine, median, say, versions

BENCH = Path(__file__).resolve().parent
FPS = 30
FRONT, WRIST = "observation.images.front", "observation.images.wrist"
CAMERAS = {FRONT: (480, 640), WRIST: (240, 320)}
CLIP = {FRONT: [(k - 15) / FPS for k in range(16)]}
# The runs' names (bench/lerobot.py's, which its JSONs keep): (workload, workers) and the
# contenders, each the client's (impl, backend) and the case it is.
RUNS = {"clip w0": ("clip", 0), "clip w2": ("clip", 2), "rows16 w0": ("rows16", 0),
        "rows16 w2": ("rows16", 2), "plain w0": ("plain", 0)}
NAMES = {"LeRobot (torchcodec)": ("lerobot-torchcodec", "local", ""),
         "LeRobot (pyav)": ("lerobot-pyav", "local", ""), "Daft": ("daft", "local", ""),
         "fluxon": ("fluxon", "local", ""), "fluxon S3 cold": ("fluxon", "s3", "cold"),
         "fluxon S3 cold+lookahead": ("fluxon", "s3", "cold+lookahead"),
         "fluxon S3 warm": ("fluxon", "s3", "warm-kv"),
         # uint8 frames (return_uint8=True): the same decode without the float batch
         "fluxon uint8": ("fluxon", "local", "", "uint8")}
CLIENT = {"lerobot-torchcodec": ("lerobot", "torchcodec"), "lerobot-pyav": ("lerobot", "pyav"),
          "daft": ("daft", None), "fluxon": ("fluxon", None)}


def workload_of(run: str) -> str:
    """A run's workload in the matrix: "clip w2" -> "lerobot-clip-w2", "plain w0" ->
    "lerobot-plain" (ds[i] has no workers)."""
    kind, workers = RUNS[run]
    return f"lerobot-{kind}" + (f"-w{workers}" if kind != "plain" else "")


def case_of(run: str, name: str, latency_ms: float) -> Case:
    family, store, cache, *access = NAMES[name]
    return Case(workload_of(run), "lerobot", store, family, cache, *access,
                latency_ms=latency_ms, bandwidth_mbps=50.0 * (store == "s3"))


def run_of(case: Case) -> str:
    return next(run for run in RUNS if workload_of(run) == case.workload)


def name_of(case: Case) -> str:
    return next(n for n, (family, store, cache, *access) in NAMES.items()
                if (family, store, cache, *(access or [""])) == (
                    case.family, case.store, case.cache, case.access))


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

def lerobot_dataset(python: Path, data: Path, episodes: int, seed: int
                    ) -> tuple[Path, dict[str, Any]]:
    """The dataset LeRobot writes (bench/lerobot_write.py with LeRobot's python), written
    once under ``<data>/lerobot-real``: its root and what the writer reported."""
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


def run_client(python: Path, spec: dict, work: Path, name: str,
               store_pids: Sequence[int] = ()) -> dict[str, Any]:
    """One pass in a client process of its own; its figures, its CPU (with its workers)
    and what the store's processes (``store_pids``: the S3 rows') spent meanwhile."""
    import resource

    from stores import cpu_s

    path = work / f"spec-{name}.json"
    path.write_text(json.dumps(spec))
    servers0 = cpu_s(store_pids)
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
            "servers_cpu_s": cpu_s(store_pids) - servers0}


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


class LerobotGroup:
    """The lerobot suite's cases: LeRobot (its own virtualenv, installed on first use)
    writes the dataset once; the expected frames and the CLI's references are made once;
    then each run's local contenders, interleaved ``repeat`` times, and, when the cases
    have S3 rows, fluxon through an S3 export of the dataset (cold after a flush, cold
    with lookahead, warm), each pass a client process of its own."""

    def __init__(self, cases: list[Case], settings: dict[str, Any], data: Path) -> None:
        from types import SimpleNamespace

        self.cases, self.s, self.data = cases, settings, data
        self.args = SimpleNamespace(**settings)
        self.latency_ms = float(str(settings["latencies"]).split(",")[0])
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}

    def references(self, root: Path, expect: dict, plan: dict) -> Path:
        """The CLI's frames the checks need, made once per dataset and plan."""
        from frames import references

        a = self.args
        refs = self.work / f"refs-{root.name}-{a.seed}-{a.clip_batches}-{a.row_batches}-" \
                           f"{a.plain_items}"
        if not (refs / "done").exists():
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
        return refs

    def passes(self, runs: dict[str, list[Case]], python: dict[str, Path], spec: Any,
               store: Any = None) -> dict[str, dict[str, Any]]:
        """Every run's cases, local and S3 alike interleaved ``repeat`` times (so that the
        machine's load falls on them alike); the summaries by run and name. Each case's
        timed pass comes right after ``warmup`` untimed ones: a process that allocates
        fresh memory right after another program's is slow on this VM (transparent huge
        pages compacted on fault), which a running training job is not. A local case
        warms up with itself; an S3 case, whose own pass would fill its cache, with the
        same client on the local files. ``store``: the S3 cases' (Redis flushed before a
        cold pass; its processes' CPU counted in theirs)."""
        out: dict[str, dict[str, Any]] = {}
        for run, cases in runs.items():
            got: dict[str, list] = {name_of(c): [] for c in cases}
            for _ in range(self.s["repeat"]):
                for case in cases:
                    remote = case.store == "s3"
                    for _ in range(self.s["warmup"]):
                        where = " on the local files" if remote else ""
                        say(f"{run}: {name_of(case)} (warm-up{where}, untimed)")
                        run_client(python[case.family], spec(run, case), self.work, "warmup")
                    if remote and case.cache.startswith("cold"):
                        store.flush()
                    say(f"{run}: {name_of(case)}")
                    got[name_of(case)].append(run_client(
                        python[case.family], spec(run, case, store.fx() if remote else None),
                        self.work, case.store, store.pids() if remote else ()))
            out[run] = {name: summarise(p) for name, p in got.items() if p}
        return out

    def run(self, argv: list[str]) -> dict[str, Any]:
        from install_peers import install_daft, install_lerobot

        t_start, load_start = time.perf_counter(), os.getloadavg()[0]
        say("LeRobot's virtualenv")
        lerobot_py = install_lerobot(self.data / "venv-lerobot")
        if lerobot_py is None:
            sys.exit("bench: LeRobot did not install (see above)")
        cases = self.cases
        if any(c.family == "daft" for c in cases) and not install_daft(lerobot_py):
            self.skipped["daft"] = "Daft did not install: its rows are missing"
            cases = [c for c in cases if c.family != "daft"]
        a = self.args
        root, written = lerobot_dataset(lerobot_py, self.data, a.episodes, a.seed)
        say("expected frames (parquet + ffprobe) and the CLI's reference frames")
        expect = expectations(root)
        plan = plans(len(expect["ep_from"]), a)
        self.work = self.data / "lerobot-real" / "work"
        refs = self.references(root, expect, plan)
        python = {family: Path(sys.executable) if impl == "fluxon" else lerobot_py
                  for family, (impl, _) in CLIENT.items()}

        def spec(run: str, case: Case, fx: dict | None = None) -> dict:
            workload, workers = RUNS[run]
            impl, backend = CLIENT[case.family]
            return {"impl": impl, "backend": backend, "repo_id": "fluxon/bench",
                    "root": f"lerobot:{root.name}" if fx else str(root.resolve()), "fx": fx,
                    "delta": CLIP if workload == "clip" else None, "workload": workload,
                    "workers": workers, "batches": plan[workload], "cameras": list(CAMERAS),
                    "refs": str(refs), "expect": expect,
                    "ahead": case.cache == "cold+lookahead", "uint8": case.access == "uint8"}

        store = self.s3_export(root) if any(c.store == "s3" for c in cases) else None
        try:
            results = self.passes(grouped(cases, run_of), python, spec, store)
        finally:
            if store is not None:
                store.stop()
        self.notes += [
            f"LeRobot-written dataset: {written['rows']} rows, {written['episodes']} episodes;"
            " shard files per camera: " + ", ".join(
                f"{cam.rsplit('.', 1)[-1]} {len(v)}" for cam, v in written["shards"].items())
            + f"; written in {written['seconds']} s",
            f"Row times below their frame's pts: {expect['below_pts']} of "
            f"{len(CAMERAS) * len(expect['ep_from'])} (row, camera) times; the largest gap to "
            f"the nearest pts {expect['pts_gap_us']:.2f} µs",
            f"Load average (1 min) at the start {load_start:.1f}, at the end "
            f"{os.getloadavg()[0]:.1f}, on {os.cpu_count()} cores shared with other work"]
        found = subprocess.run(
            [str(lerobot_py), "-c", "import lerobot, torch, torchcodec, av; print(lerobot."
             "__version__, torch.__version__, torchcodec.__version__, av.__version__); "
             "import daft; print(daft.__version__)"],
            capture_output=True, text=True, cwd="/").stdout.split()
        lerobot_side = {f"LeRobot's {k}": v for k, v in zip(
            ("lerobot", "torch", "torchcodec", "av", "daft"), found)}
        return {**header("matrix.py", argv, time.perf_counter() - t_start, a),
                "conditions": {"machine": machine(), "versions": {**versions(),
                                                                  **lerobot_side}},
                "latency_ms": self.latency_ms, "batches": {k: len(v) for k, v in plan.items()},
                "dataset": {k: v for k, v in written.items() if k != "root"},
                "runs": results, "notes": self.notes, "skipped": self.skipped}

    def s3_export(self, root: Path) -> Any:
        """The dataset as an S3 export: moto behind the latency relay at 50 MB/s per
        connection, the agent and Redis in between."""
        from stores import RemoteStore

        names = [str(p.relative_to(root.parent)) for p in sorted(root.rglob("*")) if p.is_file()]
        say(f"S3 export: {len(names)} files into moto, {self.latency_ms:g} ms per request")
        s3work = self.work / "s3"
        s3work.mkdir(parents=True, exist_ok=True)
        store = RemoteStore(s3work, "lerobot", root.parent, 50.0, s3=names)
        try:
            store.set_latency(self.latency_ms)
        except BaseException:
            store.stop()
            raise
        return store
