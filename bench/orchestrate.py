"""The parent process of the benchmark: dataset, servers, the plan of child tasks, results.

Each measurement is a child process (``run.py --phase TASK.json``, see
tasks.py); this module writes the tasks, runs them in order under a
progress bar and gathers their records for report.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fluxon_video.testing import AgentProcess, RedisServer
from tqdm import tqdm

import report
from scenario import header
from contenders import PEERS
from fluxon_access import store, write_agent_config
from local_plan import WORKLOADS, LocalPlan
from local_records import Record
from machine import machine, run, versions

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
EXPORT = "bench"
LOCAL_CONTENDERS = (*PEERS, "fluxon-local")

class Bench:
    def __init__(self, args: Any, argv: list[str]) -> None:
        self.args = args
        self.argv = argv
        self.work = args.data / "work"
        self.records: list[dict] = []
        self.floors: list[dict] = []
        self.versions: dict[str, str] = {}
        self.notes: list[str] = []
        self.plan = LocalPlan(args, self.notes)
        self.skipped: dict[str, str] = {}
        self.servers: list[Any] = []
        self.redis: RedisServer | None = None
        self.agent: AgentProcess | None = None
        self.sweep_agent: AgentProcess | None = None
        self.tasks_run = 0

    # ---- plan ----

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        steps: list[tuple[str, Callable[[], None]]] = [
            (f"dataset {s.name}", lambda s=s: self.plan.make_video(s)) for s in self.plan.specs]
        steps += [("references", self.plan.make_references),
                  ("servers", self.start_servers),
                  ("which peers import", self.check_peers)]
        for workload in ("clips224", "clips-native", "sequential224"):
            steps += [(f"{workload} {c}", lambda w=workload, c=c: self.run_local(w, c))
                      for c in LOCAL_CONTENDERS]
            steps += [(f"{workload} fluxon cold + warm reader",
                       lambda w=workload: self.run_fluxon_cold(w)),
                      (f"{workload} fluxon warm KV", lambda w=workload: self.run_fluxon_warm(w))]
        steps.append(("decode floor", self.run_floor))
        steps += [(f"batched {c}", lambda c=c: self.run_local("batched", c)) for c in PEERS]
        steps += [("batched fluxon cold (primes Redis)",
                   lambda: self.run_fluxon_cold("batched", warm_reader=False)),
                  ("batched fluxon one by one, warm KV", lambda: self.run_fluxon_warm("batched")),
                  ("batched fluxon read_many, warm KV", self.run_batched)]
        if self.args.sweep:
            steps.append(("sweep agent", self.start_sweep_agent))
            for size in self.args.sweep:
                steps += [(f"sweep {size >> 10} KiB cold",
                           lambda p=size: self.run_fluxon_cold("sweep", warm_reader=False,
                                                               piece_size=p)),
                          (f"sweep {size >> 10} KiB warm KV",
                           lambda p=size: self.run_fluxon_warm("sweep", piece_size=p))]
        return steps

    def run(self) -> int:
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
            for server in reversed(self.servers):
                server.stop()
        results = self.results(time.perf_counter() - started)
        written = report.write(results, self.args.out)
        print(f"bench: {time.perf_counter() - started:.0f} s; wrote "
              + ", ".join(str(p) for p in written))
        return 0

    # ---- servers ----

    def start_servers(self) -> None:
        self.redis = RedisServer(self.work).start()
        self.servers.append(self.redis)
        self.agent = self.start_agent(self.args.agent_latency_ms)

    def start_sweep_agent(self) -> None:
        self.sweep_agent = self.start_agent(self.args.sweep_latency_ms)

    def start_agent(self, latency_ms: float) -> AgentProcess:
        config = write_agent_config(self.work / f"agent-{len(self.servers)}.toml", EXPORT,
                                    self.plan.video_dir.resolve())
        agent = AgentProcess(config, ["--inject-latency-ms", str(latency_ms)]).start()
        self.servers.append(agent)
        return agent

    def check_peers(self) -> None:
        for contender in LOCAL_CONTENDERS:
            code = f"from contenders import unavailable; print(unavailable({contender!r}) or '')"
            proc = subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True,
                                  text=True)
            why = proc.stdout.strip() or (proc.stderr.strip().splitlines() or [""])[-1]
            if why:
                self.skipped[contender] = why

    # ---- children ----

    def fluxon(self, agent: AgentProcess | None = None, piece_size: int | None = None) -> dict:
        assert self.redis is not None and self.agent is not None
        return store(EXPORT, self.plan.video_dir.resolve(), (agent or self.agent).url,
                     self.redis.url,
                     piece_size=piece_size or self.args.piece_size,
                     agent_latency_ms=(self.args.sweep_latency_ms if agent is not None
                                       else self.args.agent_latency_ms))

    def child(self, task: dict) -> None:
        """Run one task in a new process and keep its records (or why it failed)."""
        task = {"threads": self.args.threads, "repeat": self.args.repeat, **task}
        self.tasks_run += 1
        path = self.work / f"task{self.tasks_run:03d}-{task['kind']}.json"
        path.write_text(json.dumps(task))
        out = Path(f"{path}.out")
        proc = subprocess.run([sys.executable, str(BENCH / "run.py"), "--phase", str(path)],
                              capture_output=True, text=True,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if proc.returncode != 0 or not out.exists():
            lines = (proc.stderr or "").strip().splitlines()
            error = f"the process exited with {proc.returncode}: {lines[-1] if lines else ''}"
            self.records += [{**asdict(Record.failed(task, item, error)),
                              "sweep": task.get("sweep", False)} for item in task["items"]]
            return
        result = json.loads(out.read_text())
        self.versions.update(result["versions"])
        for record in result["records"]:
            record["agent_latency_ms"] = task.get("fluxon", {}).get("agent_latency_ms")
            record["sweep"] = task.get("sweep", False)
        if task["kind"] == "floor":
            self.floors += result["records"]
        else:
            self.records += result["records"]

    def run_local(self, workload: str, contender: str) -> None:
        if contender in self.skipped:
            return
        self.child({"kind": "local", "contender": contender, "items": self.plan.items(workload)})

    def run_fluxon_cold(self, workload: str, warm_reader: bool = True,
                        piece_size: int | None = None) -> None:
        sweep = workload == "sweep"
        self.child({"kind": "fluxon-cold", "items": self.plan.items(workload),
                    "warm_reader": warm_reader, "sweep": sweep,
                    "fluxon": self.fluxon(self.sweep_agent if sweep else None, piece_size)})

    def run_fluxon_warm(self, workload: str, piece_size: int | None = None) -> None:
        sweep = workload == "sweep"
        self.child({"kind": "fluxon-warm-kv", "items": self.plan.items(workload), "sweep": sweep,
                    "fluxon": self.fluxon(self.sweep_agent if sweep else None, piece_size)})

    def run_batched(self) -> None:
        self.child({"kind": "batched", "items": self.plan.items("batched"),
                    "fluxon": self.fluxon()})

    def run_floor(self) -> None:
        self.child({"kind": "floor",
                    "items": self.plan.items("clips224") + self.plan.items("clips-native")})

    # ---- results ----

    def results(self, seconds: float) -> dict:
        return {
            **header("run.py", self.argv, seconds, self.args, leave_out=("phase",)),
            "workloads": WORKLOADS,
            "conditions": self.conditions(),
            "videos": [v.facts() for v in self.plan.videos.values()],
            "clips": self.plan.clips,
            "ideal_bytes": self.plan.ideal_bytes(),
            "records": self.records,
            "floors": self.floors,
            "skipped": self.skipped,
            "notes": self.notes,
        }

    def conditions(self) -> dict:
        return {
            "machine": machine(),
            "versions": {**versions(), **self.versions},
            "export": {"where": "agent process on loopback (127.0.0.1), HTTP/1.1",
                       "root": str(self.plan.video_dir),
                       "filesystem": run("stat", "-f", "-c", "%T", str(self.plan.video_dir)),
                       "agent_latency_ms": self.args.agent_latency_ms,
                       "sweep_agent_latency_ms": self.args.sweep_latency_ms,
                       "kv": "redis-server on loopback, no persistence",
                       "piece_size": self.args.piece_size,
                       "miss_policy": "RemoteRead, async backfill"},
        }
