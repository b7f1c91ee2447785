#!/usr/bin/env python3
"""Remote-store benchmark: fluxon through FluxonFS vs peers the way their users
read remote videos, under one model of the remote store.

The store model, the same for every contender: each origin server waits L ms
(--latencies) before answering each request (the fluxon agent with
--inject-latency-ms before every stat and read; bench/range_server.py, an
aiohttp HTTP Range server over the dataset, before every GET and HEAD), and
every connection goes through the same TCP relay (bench/range_server.py),
which caps each connection at --bandwidth-mbps MB/s (token bucket) and counts
connections. Requests and bytes are the servers' own counters (the agent's
/metrics: fluxon_agent_requests_total, fluxon_agent_served_bytes_total).

Rows (a "row" is one pipeline, timed over the same items as every other row):
  pyav        fsspec HTTP file object (block 256 KiB, fsspec's default 5 MiB),
              and "download": one GET, then decode from memory
  torchcodec  VideoDecoder(fsspec file, seek_mode="exact") at both block sizes
  decord      VideoReader(fsspec file): decord calls read() once, the whole file
  spdl        "download": one GET, then demux_video(bytes) and sample_decode_video
              (SPDL takes a path or bytes, no file object)
  fluxon      cold (Redis flushed, new process), warm-kv (new process, Redis
              warm, default settings), warm-kv+shared (the same with
              metadata_cache_shared: the stat the cold pass had authorised
              comes with the index in one KV round trip, no agent request),
              warm-reader (the cold process's pool again)

Workloads, at every latency (default 0, 2 and 10 ms):
  clips     a random 16-frame clip (stride 4, 224x224) of each of 24 videos,
            shuffled, a new open per item
  batched   K=8 clips of one video per item: fluxon read_many_numpy_with_stats
            vs the best peers of "clips" reading them one by one (one open)
  metadata  time until frame count, fps and duration are known: fluxon
            video_metadata cold and warm vs opening the file with each peer

A reference row, "fluxon local file" (fluxon's decoder on the local files, no
store), runs at the target latency (10 ms, or the highest): what decoding
alone costs. The metadata rows of PyAV and torchcodec (approximate) use the
smallest block size (opening reads least with it).

Rows are interleaved (the order rotates every round); figures are medians
over --rounds with their ranges; nothing fails on a timing. Frames are
checked as in bench/run.py: fluxon bit-exact against the ffmpeg CLI, peers
the right frame within tolerance, else the row is flagged and is never the
"best exact peer". Writes remote.md, remote.json and remote.png to --out.

--store s3: the origin is an object store instead. moto's S3 server (buckets
in memory, fluxon_video.testing.S3Server) holds the videos under
s3://bench/videos; in front of it, bench/range_server.py --proxy sleeps L ms
before forwarding each request and counts requests and body bytes (moto has
no metrics), and its relay caps each connection: every contender's S3
requests, the agent's included, go through that one proxy. fluxon reads
through the agent (export root s3://bench/videos, the store options and
credentials in the agent's config, no injected latency; its relay is not
shaped: the agent is the cache service next to the trainers, like Redis).
Peers: PyAV and torchcodec (exact) over an s3fs file object and over an
obstore reader (obstore.open_reader, its read() copied into bytes) at each
--block-sizes, and PyAV after one GET of the whole file (s3fs cat_file).
Workloads: "clips" over the short videos, and "long": --long-items random
clips of each of --long-videos 2-minute 720p videos (about 45 MB each), a
new open per item. fluxon rows as above. Writes
remote-s3.md and remote-s3.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

# Keep this module's top level light: every spawned child imports it again.
from scenario import finish, header, parse_size, scenario_parser  # noqa: E402
from fluxon_access import store  # noqa: E402
from machine import machine, versions  # noqa: E402
from passes import failed_pass  # noqa: E402
from remote_plan import CLIP_LEN, SIZE, STRIDE, Plan  # noqa: E402
from remote_store import PeerWorker, S3Store, Store, fluxon_process  # noqa: E402
from remote_summary import label  # noqa: E402
from tables import MiB  # noqa: E402

EXPORT = "remote"
FAMILIES = ("pyav", "torchcodec", "decord", "spdl")
DEFAULTS = {"latencies": "0,2,10", "rounds": "2", "videos": 24, "batched_items": 3,
            "block_sizes": "256K,default", "long_videos": 0, "long_items": 0}
QUICK = {**DEFAULTS, "latencies": "10", "rounds": "1", "videos": 12, "batched_items": 2}
# --store s3: fewer short videos, the long ones, one latency.
S3_DEFAULTS = {**DEFAULTS, "latencies": "10", "videos": 16, "block_sizes": "256K,4M",
               "long_videos": 2, "long_items": 4}
S3_QUICK = {**S3_DEFAULTS, "rounds": "1", "videos": 6, "long_videos": 1, "long_items": 2}
FLUXON_CACHES = ("cold", "warm-kv", "warm-kv+shared")
# How long a shared stat lives in the shared rows: long enough to outlast the
# passes between the cold pass that writes it and the row that reads it (a
# static training set can afford minutes; the default TTL is 5 s).
SHARED_STAT_TTL_MS = 120_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = scenario_parser("remote.py", __doc__, "smoke run (~2-3 min): 10 ms only, 1 round, "
                         "12 videos, 2 batched items", "remote.md/.json/.png")
    ap.add_argument("--store", choices=("dir", "s3"), default="dir",
                    help="the origin: 'dir', the agent's directory export and the HTTP Range "
                         "server; 's3', moto's S3 server behind a delaying, counting proxy "
                         "(see above; different defaults: L = 10 ms, 16 videos, 2 long "
                         "videos x 4 items, blocks 256K,4M; quick: 6 videos, 1 long x 2)")
    ap.add_argument("--long-videos", type=int, help="2-minute 720p videos of the 'long' "
                                                    "workload (default: 0; s3: 2)")
    ap.add_argument("--long-items", type=int, help="items (random clips, a new open each) "
                                                   "per long video per round (s3: 4)")
    ap.add_argument("--latencies", help="per-request latencies, ms, comma separated "
                                        "(default: 0,2,10; quick: 10)")
    ap.add_argument("--bandwidth-mbps", type=float, default=50.0,
                    help="per-connection cap in MB/s (10^6 bytes/s), server -> client, for "
                         "every contender (the relay); 0: no cap (default: 50)")
    ap.add_argument("--rounds", help="interleaved rounds per workload: one number for every "
                                     "latency, or one per latency, comma separated; figures are "
                                     "medians over rounds (default: 2; quick: 1)")
    ap.add_argument("--videos", type=int, help="videos in the clips and metadata workloads, "
                                               "one item each per round (default: 24, quick: 12)")
    ap.add_argument("--batched-items", type=int,
                    help="videos per round in the batched workload (default: 3, quick: 2)")
    ap.add_argument("--batched-clips", type=int, default=8, help="K, clips per batched item "
                                                                 "(default: 8)")
    ap.add_argument("--block-sizes",
                    help="fsspec block sizes of the PyAV and torchcodec rows; 'default' is "
                         "fsspec's (5 MiB) (default: 256K,default); with --store s3 the "
                         "s3fs block and obstore buffer sizes (default: 256K,4M)")
    ap.add_argument("--threads", type=int, default=1,
                    help="decoder threads for every contender (default: 1)")
    ap.add_argument("--piece-size", type=int, default=None,
                    help="FluxonFS piece size, bytes (default: the export default)")
    ap.add_argument("--seed", type=int, default=15, help="clip sampling seed (default: 15)")
    args = ap.parse_args(argv)
    s3 = args.store == "s3"
    args = finish(ap, args, S3_DEFAULTS if s3 else DEFAULTS, S3_QUICK if s3 else QUICK,
                  ("videos", "batched_items", "batched_clips", "threads"))
    if s3 and (args.long_videos < 0 or args.long_items < (1 if args.long_videos else 0)):
        ap.error("--long-videos >= 0 and --long-items >= 1")
    try:
        args.latency_list = [float(x) for x in args.latencies.split(",") if x.strip()]
        args.block_list = [None if b.strip() == "default" else parse_size(b)
                           for b in args.block_sizes.split(",") if b.strip()]
    except ValueError as exc:
        ap.error(str(exc))
    if not args.latency_list or any(x < 0 for x in args.latency_list):
        ap.error("--latencies: one or more values >= 0")
    lats = args.latency_list
    args.target_latency = 10.0 if 10.0 in lats else max(lats)
    try:
        rounds = [int(x) for x in args.rounds.split(",")]
    except ValueError as exc:
        ap.error(f"--rounds: {exc}")
    if len(rounds) == 1:
        rounds *= len(lats)
    if len(rounds) != len(lats) or min(rounds) < 1:
        ap.error("--rounds: one number >= 1, or one per latency")
    args.rounds_for = dict(zip(lats, rounds))
    args.max_rounds = max(rounds)
    if args.bandwidth_mbps < 0:
        ap.error("--bandwidth-mbps must be >= 0")
    if s3 and None in args.block_list:
        ap.error("--store s3: name every block size (s3fs's default is 50 MiB; obstore needs one)")
    return args


class Bench:
    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args, self.argv = args, argv
        self.work = args.data / "remote-work"
        self.t0 = time.perf_counter()
        self.versions: dict[str, str] = {}
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}
        self.passes: list[dict] = []  # every pass result, with its latency, workload, round
        self.workers: dict[str, PeerWorker] = {}
        self.store: Store | None = None
        self.load: list[tuple[str, list[float]]] = []
        self.target_latency = args.target_latency
        self.plan = Plan(args, self.say, self.notes)
        self.s3 = args.store == "s3"
        self.families = ("pyav", "torchcodec") if self.s3 else FAMILIES
        self.workloads = (("clips", "long") if self.s3
                          else ("clips", "batched", "metadata") + (("long",) if args.long_videos
                                                                   else ()))

    def say(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.0f} s] {text}", flush=True)

    # ---- processes ----

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        if self.s3:
            self.say("servers: moto S3 (uploading the videos), range_server.py --proxy + relay, "
                     "redis-server, the agent + relay on loopback")
            self.store = S3Store(self.work, EXPORT, self.plan.video_dir,
                                 self.args.bandwidth_mbps, list(self.plan.videos))
        else:
            self.say("servers: redis-server, the agent, range_server.py + relays on loopback")
            self.store = Store(self.work, EXPORT, self.plan.video_dir, self.args.bandwidth_mbps)
        ctx = mp.get_context("spawn")
        self.ctx = ctx
        warm = str(next(iter(self.plan.videos.values())).path)
        for family in self.families:
            self.say(f"starting the {family} worker")
            worker = PeerWorker(ctx, family, warm, self.args.threads)
            if worker.ready:
                self.workers[family] = worker
                self.versions.update(worker.versions)
            else:
                self.skipped[family] = worker.error
                self.notes.append(f"{family} skipped: {worker.error}")
                worker.stop()

    def stop(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        if self.store is not None:
            self.store.stop()

    def fluxon_config(self) -> dict:
        assert self.store is not None
        return store(EXPORT, self.store.root, self.store.agent_relay.url,
                     self.store.redis.url, piece_size=self.plan.piece_size())

    # ---- rows and passes ----

    def peer_rows(self, workload: str) -> list[dict]:
        blocks = self.args.block_list
        rows: list[dict] = []
        if self.s3:
            rows = s3_peer_rows(blocks)
        elif workload in ("clips", "long"):
            rows += [{"family": "pyav", "mode": "fsspec", "block_size": b} for b in blocks]
            rows.append({"family": "pyav", "mode": "download"})
            rows += [{"family": "torchcodec", "mode": "fsspec", "block_size": b,
                      "seek_mode": "exact"} for b in blocks]
            rows.append({"family": "decord", "mode": "fsspec", "block_size": None})
            # SPDL reads a path or bytes, no file object: its users download the file.
            rows.append({"family": "spdl", "mode": "download"})
        elif workload == "metadata":  # the smallest block: opening reads least with it
            small = min(blocks, key=lambda b: b or 5 * MiB)
            rows.append({"family": "pyav", "mode": "fsspec", "block_size": small})
            rows.append({"family": "torchcodec", "mode": "fsspec", "block_size": small,
                         "seek_mode": "approximate"})
            rows.append({"family": "torchcodec", "mode": "fsspec", "block_size": None,
                         "seek_mode": "exact"})
            rows.append({"family": "decord", "mode": "fsspec", "block_size": None})
        return [r for r in rows if r["family"] in self.workers]

    def batched_peer_rows(self, latency: float) -> list[dict]:
        """The best exact peer row of "clips" at this latency, the fastest peer row if it is
        another (flagged) one, PyAV download (one GET serves all K clips), and PyAV download
        decoding the union of the K clips in one pass per cluster (context, not "one by one")."""
        summaries = [s for s in self.summaries() if s["latency_ms"] == latency
                     and s["workload"] == "clips" and s["row"]["family"] != "fluxon"
                     and s["clips_per_s"]]
        chosen: list[dict] = []
        exact = [s for s in summaries if s["ok"]]
        for pool in (exact, summaries):
            if pool:
                best = max(pool, key=lambda s: s["clips_per_s"])["row"]
                if best not in chosen:
                    chosen.append(best)
        download = {"family": "pyav", "mode": "download"}
        if "pyav" in self.workers:
            if download not in chosen:
                chosen.append(download)
            chosen.append({**download, "union": True})  # context: batching a peer can do
        return chosen

    def task(self, workload: str, items: list[dict], latency: float, r: int) -> dict:
        assert self.store is not None
        return {"workload": workload, "items": items,
                "videos": self.plan.video_table(self.store.range.url),
                "store": self.store.urls(), "threads": self.args.threads,
                "latency_ms": latency, "round": r,
                "s3": self.store.peer_access() if isinstance(self.store, S3Store) else None}

    def record(self, result: dict, workload: str, latency: float, r: int) -> dict:
        result.update({"workload": workload, "latency_ms": latency, "round": r})
        self.passes.append(result)
        return result

    def run_peer(self, row: dict, workload: str, latency: float, r: int) -> None:
        task = {**self.task(workload, self.plan.plans[workload][r], latency, r), "row": row}
        result = self.workers[row["family"]].run(task)
        self.record(result, workload, latency, r)
        self.say(f"  {workload} L={latency:g} ms round {r + 1}: {label(row)}: {brief(result)}")

    def run_fluxon(self, workload: str, latency: float, r: int) -> None:
        assert self.store is not None
        warm = str(next(iter(self.plan.videos.values())).path)
        for cache in FLUXON_CACHES:
            if cache == "cold":
                self.store.flush()
            shared = cache == "warm-kv+shared"
            fx = self.fluxon_config()
            if shared:
                fx = {**fx, "metadata_cache_shared": True,
                      "metadata_cache_ttl_ms": SHARED_STAT_TTL_MS}
            task = {**self.task(workload, self.plan.plans[workload][r], latency, r),
                    "fluxon": fx, "cache": cache, "warm_path": warm,
                    "warm_reader": cache == "cold" and workload in ("clips", "long"),
                    "local_pass": (cache == "warm-kv" and workload == "clips"
                                   and latency == self.target_latency)}
            if shared:  # another process authorised the stats first (untimed)
                primed = fluxon_process(self.ctx, {**task, "prime_shared_stats": True})
                if "fatal" in primed:
                    raise RuntimeError(f"priming shared stats failed: {primed['fatal']}")
            out = fluxon_process(self.ctx, task)
            if "fatal" in out:
                self.record(failed_pass({"family": "fluxon", "cache": cache}, out["fatal"]),
                            workload, latency, r)
                self.say(f"  {workload} L={latency:g} ms round {r + 1}: fluxon {cache}: "
                         f"FAILED {out['fatal']}\n{out.get('traceback', '')}")
                continue
            self.versions.update(out.get("versions", {}))
            for result in out["passes"]:
                self.record(result, workload, latency, r)
                self.say(f"  {workload} L={latency:g} ms round {r + 1}: {label(result['row'])}: "
                         f"{brief(result)}")

    def run_workload(self, workload: str, latency: float) -> None:
        rows = (self.batched_peer_rows(latency) if workload == "batched"
                else self.peer_rows(workload))
        slots: list[dict | None] = [*rows, None]  # None: the FLUXON_CACHES passes
        for r in range(self.args.rounds_for[latency]):
            shift = r % len(slots)
            for slot in slots[shift:] + slots[:shift]:
                if slot is None:
                    self.run_fluxon(workload, latency, r)
                else:
                    self.run_peer(slot, workload, latency, r)

    def run(self) -> int:
        self.plan.make()
        self.load.append(("start", list(os.getloadavg())))
        try:
            self.start()
            for latency in self.args.latency_list:
                assert self.store is not None
                self.store.set_latency(latency)
                self.say(f"latency {latency:g} ms, bandwidth "
                         f"{self.args.bandwidth_mbps:g} MB/s per connection")
                for workload in self.workloads:
                    self.run_workload(workload, latency)
                self.load.append((f"after {latency:g} ms", list(os.getloadavg())))
        finally:
            self.stop()
        results = self.results()
        written = report_module(self.s3).write(results, self.args.out)
        self.say("wrote " + ", ".join(str(p) for p in written))
        return 0

    # ---- results ----

    def summaries(self) -> list[dict]:
        import remote_summary

        return remote_summary.summarise(self.passes, self.args.batched_clips)

    def results(self) -> dict:
        return {
            **header("remote.py", self.argv, time.perf_counter() - self.t0, self.args),
            "conditions": self.conditions(),
            "videos": [v.facts() for v in self.plan.videos.values()],
            "plans": self.plan.plans,
            "needed_bytes": self.plan.needed_bytes(),
            "passes": self.passes,
            "skipped": self.skipped,
            "notes": self.notes,
        }

    def conditions(self) -> dict:
        a = self.args
        out = self.dir_conditions()
        if self.s3:
            out["store"].update(S3_CONDITIONS)
        out["workload"].update(long_videos=a.long_videos, long_items=a.long_items,
                               block_sizes=a.block_sizes)
        return out

    def dir_conditions(self) -> dict:
        a = self.args
        return {
            "machine": {**machine(), "load_average": self.load},
            "versions": {**versions(), **self.versions},
            "store": {
                "latencies_ms": a.latency_list, "bandwidth_mbps_per_connection": a.bandwidth_mbps,
                "peers": "bench/range_server.py --root (aiohttp, HTTP/1.1, Range) on loopback",
                "fluxon": "the agent (python -m fluxon_video agent --inject-latency-ms L) on "
                          "loopback; Redis on loopback, no persistence",
                "relay": "bench/range_server.py relay in front of both servers: per-connection "
                         "token bucket (64 KiB burst) on server -> client bytes; counts "
                         "connections",
                "latency": "each origin sleeps L before answering each request (agent: "
                           "/v1/stat and /v1/read; range server: every GET and HEAD)",
                "piece_size": self.fluxon_config()["piece_size"] if self.store else None,
            },
            "workload": {"clip": f"{CLIP_LEN} frames, stride {STRIDE}, {SIZE}x{SIZE} RGB",
                         "rounds": {f"{k:g}": v for k, v in a.rounds_for.items()},
                         "threads": a.threads,
                         "batched_clips": a.batched_clips},
        }


S3_CONDITIONS = {
    "origin": "s3",
    "peers": "s3fs file objects, obstore readers and s3fs cat_file, to moto's S3 server "
             "(standalone, buckets in memory) through bench/range_server.py --proxy",
    "fluxon": "the agent (export root s3://bench/videos, obstore, the store options in its "
              "config, no injected latency) on loopback behind an unshaped relay; Redis on "
              "loopback, no persistence; the agent's S3 requests go through the same proxy",
    "relay": "bench/range_server.py relay in front of the S3 proxy: per-connection token "
             "bucket (64 KiB burst) on server -> client bytes; counts connections",
    "latency": "the proxy (range_server.py --proxy) sleeps L before forwarding each request "
               "to S3 (any method: GET, HEAD, LIST), for the peers and the agent alike; it "
               "counts the requests and GET body bytes",
}


def s3_peer_rows(blocks: list[int]) -> list[dict]:
    """PyAV and torchcodec (exact) over s3fs and obstore at each block size; PyAV download."""
    rows = [{"family": fam, "mode": mode, "block_size": b,
             **({"seek_mode": "exact"} if fam == "torchcodec" else {})}
            for fam in ("pyav", "torchcodec") for mode in ("s3fs", "obstore") for b in blocks]
    return rows + [{"family": "pyav", "mode": "download"}]


def report_module(s3: bool) -> Any:
    import remote_report
    import remote_s3_report

    return remote_s3_report if s3 else remote_report


def brief(result: dict) -> str:
    if result.get("fatal"):
        return f"FAILED {result['fatal']}"
    ms = result.get("item_ms") or []
    if not ms:
        return "no items: " + "; ".join(result.get("errors", []))[:200]
    server = result.get("server", {})
    check = result.get("check") or {}
    return (f"{len(ms)} items, p50 {statistics.median(ms):.0f} ms/item, "
            f"{server.get('requests', 0) / len(ms):.1f} req/item, "
            f"{server.get('bytes', 0) / len(ms) / MiB:.2f} MiB/item, "
            f"{server.get('connections_used', 0):.0f} conn"
            + (f", {check.get('verdict', '')[:60]}" if check else "")
            + (f", {result['error_count']} errors" if result.get("error_count") else ""))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        results = json.loads(args.render.read_text())
        s3 = results["conditions"]["store"].get("origin") == "s3"
        written = report_module(s3).write(results, args.out)
        print("wrote " + ", ".join(str(p) for p in written))
        return 0
    bench = Bench(args, argv if argv is not None else sys.argv[1:])
    return bench.run()


if __name__ == "__main__":
    sys.exit(main())
