"""The per-video group: the codecs dataset (one video per codec and layout, made once),
a private redis-server and the real agent on loopback (one per latency, no bandwidth
cap), and each selected case of the "local" suite run as a child of its own per
contender: every clip of a video through one handle, ``repeat`` times."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cases import Case
from harness import failed_pass, header, machine, once, say, versions

CLIP_LENGTH, CLIP_STRIDE, TRAIN_SIZE = 16, 4, 224
QUICK_SCALE = 0.25  # --quick: videos this much shorter
EXPORT = "bench"


# ---- what a child runs ----

def child_versions(contender: str | None) -> dict[str, str]:
    from contenders import PEERS, peer_versions
    from harness import fluxon_versions

    if contender in PEERS:
        return peer_versions(contender)
    return {k.removeprefix("fluxon's "): v for k, v in fluxon_versions().items()
            if k.startswith("fluxon's")}


def child(kind: str, task: dict) -> dict:
    from fluxon_passes import batched_task, fluxon_task
    from peer_passes import floor_task, local_task

    work = {"local": local_task, "fluxon": fluxon_task, "batched": batched_task,
            "floor": floor_task}[kind]
    return {"passes": work(task), "versions": child_versions(task.get("contender"))}


# ---- the parent ----

class CodecsGroup:
    """The selected cases of the codecs dataset, run step by step (a new process each)."""

    def __init__(self, cases: list[Case], settings: dict[str, Any], data: Path,
                 quick: bool) -> None:
        from dataset import DATASET

        self.cases, self.s = cases, settings
        self.specs = [s.scaled(QUICK_SCALE) for s in DATASET] if quick else list(DATASET)
        self.video_dir = data / ("quick-videos" if quick else "videos")
        self.data, self.work, self.redis = data, data / "work", None
        self.agents: dict[float, Any] = {}
        self.videos: dict[str, Any] = {}
        self.clips: dict[str, list[list[int]]] = {}
        self.refs: dict[tuple, Path] = {}
        self.passes, self.floors, self.notes = [], [], []
        self.versions: dict[str, str] = {}
        self.skipped: dict[str, str] = {}

    def has(self, **match: Any) -> bool:
        return any(all(getattr(c, k) == v for k, v in match.items()) for c in self.cases)

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        from contenders import PEERS

        steps = [("dataset", self.make_videos), ("references", self.make_references),
                 ("redis", self.start_redis), ("which peers import", self.check_peers)]
        for w in ("clips", "clips-native", "sequential", "batched"):
            steps += [(f"{w} {c}", lambda w=w, c=c: self.local(w, c)) for c in PEERS
                      if self.has(workload=w, store="local", family=c)]
            if self.has(workload=w, store="local", family="fluxon"):
                steps.append((f"{w} fluxon-local", lambda w=w: self.local(w, "fluxon-local")))
            for c in (c for c in self.cases if c.workload == w and c.via_store
                      and c.piece_size is None and c.cache in ("cold", "warm-kv")):
                if c.access == "read_many":
                    steps.append((f"{w} fluxon read_many {c.cache}", lambda c=c: self.child(
                        "batched", {"items": self.items(c.workload), "fluxon": self.fx(c)})))
                    continue
                reader = self.has(workload=w, cache="warm-reader", latency_ms=c.latency_ms)
                steps.append((f"{w} fluxon {c.cache} @ {c.latency_ms:g} ms",
                              lambda c=c, reader=reader: self.fluxon(c, warm_reader=reader)))
            if w == "sequential" and (self.has(workload="clips") or
                                      self.has(workload="clips-native")):
                steps.append(("decode floor", lambda: self.child("floor", {"items": [
                    i for k in ("clips", "clips-native") if self.has(workload=k)
                    for i in self.items(k)]})))
        steps += [(f"sweep {(c.piece_size or 0) >> 10} KiB {c.cache}",
                   lambda c=c: self.fluxon(c, warm_reader=False))
                  for c in self.cases if c.piece_size is not None]
        return steps

    def run(self, argv: list[str]) -> dict:
        """Every step; the results in bench/run.py's shape (bench/tally.py reads it)."""
        from tqdm import tqdm

        started = time.perf_counter()
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        steps = self.steps()
        try:
            with tqdm(total=len(steps), unit="step", dynamic_ncols=True) as bar:
                for label, step in steps:
                    bar.set_description(label)
                    step()
                    bar.update()
        finally:
            for server in [*self.agents.values(), self.redis]:
                if server is not None:
                    server.stop()
        say(f"codecs group: {time.perf_counter() - started:.0f} s")
        return self.results(time.perf_counter() - started, argv)

    def make_videos(self) -> None:
        import numpy as np

        from dataset import prepare, sample_clips

        for video in prepare(self.specs, self.video_dir):
            self.videos[video.name] = video
            role = video.spec.role == "clips"
            count = self.s["clips"] if role else self.s["batch_clips"]
            key = len(self.clips) if role else 1000
            self.clips[video.name] = sample_clips(video.frames, count, CLIP_LENGTH, CLIP_STRIDE,
                                                  np.random.default_rng([self.s["seed"], key]))

    def items(self, workload: str) -> list[dict]:
        """What a child reads for ``workload``: videos, output size, clips, reference file."""
        clip_videos = [v for v in self.videos.values() if v.spec.role == "clips"]
        videos = {"batched": [v for v in self.videos.values() if v.spec.role == "batched"],
                  "sweep": clip_videos[:2]}.get(workload, clip_videos)
        out = []
        for v in videos:
            native = workload == "clips-native"
            h, w = (v.spec.height, v.spec.width) if native else (TRAIN_SIZE, TRAIN_SIZE)
            out.append({"workload": "clips" if workload == "sweep" else workload,
                        "video": v.name, "path": str(v.path), "relpath": v.name, "height": h,
                        "width": w, "native": native, "ref": str(self.refs.get((v.name, h, w))),
                        "clips": ([list(range(v.frames))] if workload == "sequential"
                                  else self.clips[v.name])})
        return out

    def make_references(self) -> None:
        from frames import reference_files

        items = [i for w in ("clips", "clips-native", "sequential", "batched")
                 if self.has(workload=w) for i in self.items(w)]
        self.refs = reference_files(
            [((i["video"], i["height"], i["width"]), self.videos[i["video"]], i["height"],
              i["width"], i["clips"]) for i in items], self.data / "refs", self.notes)

    def start_redis(self) -> None:
        from fluxon_video.testing import RedisServer

        self.redis = RedisServer(self.work).start()

    def agent(self, latency_ms: float) -> Any:
        """The agent answering at ``latency_ms`` (started on first use)."""
        from stores import agent

        if latency_ms not in self.agents:
            self.agents[latency_ms] = agent(self.work, EXPORT, self.video_dir.resolve(),
                                            latency_ms)
        return self.agents[latency_ms]

    def check_peers(self) -> None:
        from contenders import PEERS, unavailable

        for contender in (*PEERS, "fluxon-local"):
            why = once(unavailable, contender, timeout=300)
            if why:
                self.skipped[contender] = why["fatal"] if isinstance(why, dict) else why

    def fx(self, case: Case) -> dict:
        from stores import store

        return store(EXPORT, self.video_dir.resolve(), self.agent(case.latency_ms).url,
                     self.redis.url, piece_size=case.piece_size or self.s["piece_size"],
                     agent_latency_ms=case.latency_ms)

    def child(self, kind: str, task: dict) -> None:
        """Run one task in a new process and keep its passes (or why it failed)."""
        from peer_passes import row_of

        task = {"threads": self.s["threads"], "repeat": self.s["repeat"], **task}
        out = once(child, kind, task, timeout=3600)
        if "fatal" in out:
            contender = task.get("contender") or ("fluxon read_many" if kind == "batched"
                                                  else "fluxon")
            cache = "local" if kind == "local" else task.get("cache", "warm-kv")
            self.passes += [{**failed_pass(row_of(task, item, contender, cache), out["fatal"]),
                             "extra": {"clips": len(item["clips"])}} for item in task["items"]]
            return
        self.versions.update(out["versions"])
        for p in out["passes"]:
            (self.floors if p.get("floor") else self.passes).append(p)

    def local(self, workload: str, contender: str) -> None:
        if contender not in self.skipped:
            self.child("local", {"contender": contender, "items": self.items(workload)})

    def fluxon(self, case: Case, warm_reader: bool) -> None:
        sweep = case.piece_size is not None
        self.child("fluxon", {"items": self.items("sweep" if sweep else case.workload),
                              "cache": case.cache, "warm_reader": warm_reader, "sweep": sweep,
                              "fluxon": self.fx(case)})

    def results(self, seconds: float, argv: list[str]) -> dict:
        from harness import run as run_cmd

        lats = sorted({c.latency_ms for c in self.cases if c.via_store and not c.piece_size})
        sweep = sorted({c.latency_ms for c in self.cases if c.piece_size})
        return {
            **header("matrix.py", argv, seconds, SimpleNamespace(**self.s)),
            "conditions": {"machine": machine(), "versions": {**versions(), **self.versions},
                           "export": {
                               "root": str(self.video_dir),
                               "filesystem": run_cmd("stat", "-f", "-c", "%T",
                                                     str(self.video_dir)),
                               "agent_latency_ms": lats[0] if lats else 0.0,
                               "sweep_agent_latency_ms": sweep[0] if sweep else None,
                               "piece_size": self.s["piece_size"]}},
            "videos": [v.facts() for v in self.videos.values()],
            "clips": self.clips,
            "ideal_bytes": {v.name: {"gop_span_bytes": v.span_bytes(self.clips[v.name]),
                                     "container_bytes": v.container_bytes()}
                            for v in self.videos.values()},
            "passes": self.passes, "floors": self.floors,
            "skipped": self.skipped, "notes": self.notes}

