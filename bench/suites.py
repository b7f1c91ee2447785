"""The named suites: each a list of cases made from the run's settings (what the retired
bench/run.py, bench/remote.py and bench/threads.py ran), the settings' defaults (full and
--quick), the goals its report evaluates and the notes it prints."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from cases import BEST_CLIPS_PEER, CACHES, PEERS, PREROLL_AUDIO, Case, parse_size
from goals import BEST_PEER, FASTEST_PEER, FEWEST_BYTES_PEER, Goal, Pick
from harness import MiB

@dataclass(frozen=True)
class Suite:
    """A named set of cases (made from the run's settings), its settings' defaults (full
    and --quick), where its results go and the goals its report evaluates."""

    name: str
    about: str
    stem: str                     # results file stem under --out
    cases: Callable[[dict[str, Any]], list[Case]]
    defaults: dict[str, Any]
    quick: dict[str, Any]
    goals: tuple[Goal, ...] = ()
    goal_latency_ms: float = 10.0  # the latency the goals are stated at (else the highest)
    notes: tuple[str, ...] = ()    # what the report says under its tables


def latencies(settings: dict[str, Any]) -> list[float]:
    return [float(x) for x in str(settings["latencies"]).split(",") if x.strip()]


def blocks(settings: dict[str, Any]) -> list[int | None]:
    return [None if b.strip() == "default" else parse_size(b)
            for b in str(settings["block_sizes"]).split(",") if b.strip()]


def target_latency(settings: dict[str, Any]) -> float:
    lats = latencies(settings)
    return 10.0 if 10.0 in lats else max(lats)


def local_cases(s: dict[str, Any]) -> list[Case]:
    """bench/run.py's matrix: peers and fluxon's decoder on the local files; fluxon through
    the agent at each latency (no bandwidth cap) cold, warm reader and warm KV; the batched
    clips of the 60 s video (fluxon also in one read_many call); the piece-size sweep."""
    out: list[Case] = []
    for workload in ("clips", "clips-native", "sequential", "batched"):
        local = Case(workload, "codecs", "local", "fluxon")
        out += [replace(local, family=p) for p in PEERS]
        out += [local] * (workload != "batched")
        for lat in latencies(s):
            agent = Case(workload, "codecs", "agent", "fluxon", latency_ms=lat)
            out += [replace(agent, cache=c) for c in ("cold", "warm-reader", "warm-kv")
                    if not (workload == "batched" and c == "warm-reader")]
            if workload == "batched":
                out.append(replace(agent, cache="warm-kv", access="read_many"))
    for size in [parse_size(x) for x in str(s["sweep_piece_sizes"]).split(",") if x.strip()]:
        out += [Case("clips", "codecs", "agent", "fluxon", c,
                     latency_ms=float(s["sweep_latency_ms"]), piece_size=size)
                for c in ("cold", "warm-kv")]
    return out


def remote_peer_cases(workload: str, s: dict[str, Any], lat: float) -> list[Case]:
    """The peer rows of one remote workload at one latency (bench/remote.py's)."""
    bw = float(s["bandwidth_mbps"])
    store = "s3" if s.get("store") == "s3" else "agent"
    base = Case(workload, "remote", store, "pyav", latency_ms=lat, bandwidth_mbps=bw)
    sizes = blocks(s)
    if workload == "batched":
        return [replace(base, family=BEST_CLIPS_PEER), replace(base, access="download"),
                replace(base, access="download-union")]
    if store == "s3":  # PyAV and torchcodec (exact) over s3fs and obstore; PyAV download
        return [replace(base, family=fam, access=mode, block_size=b,
                        seek_mode="exact" if fam == "torchcodec" else "")
                for fam in ("pyav", "torchcodec") for mode in ("s3fs", "obstore")
                for b in sizes] + [replace(base, access="download")]
    if workload in ("clips", "long"):
        return [*(replace(base, access="fsspec", block_size=b) for b in sizes),
                replace(base, access="download"),
                *(replace(base, family="torchcodec", access="fsspec", block_size=b,
                          seek_mode="exact") for b in sizes),
                replace(base, family="decord", access="file-object"),
                # SPDL reads a path or bytes, no file object: its users download the file.
                replace(base, family="spdl", access="download")]
    small = min(sizes, key=lambda b: b or 5 * MiB)  # metadata: opening reads least with it
    return [replace(base, access="fsspec", block_size=small),
            replace(base, family="torchcodec", access="fsspec", block_size=small,
                    seek_mode="approximate"),
            replace(base, family="torchcodec", access="fsspec", seek_mode="exact"),
            replace(base, family="decord", access="file-object")]


def remote_cases(s: dict[str, Any]) -> list[Case]:
    """bench/remote.py's matrix: at every latency, each workload's peer rows and fluxon in
    every cache state (warm-reader on the clip workloads); fluxon's decoder on the local
    files beside the clip workloads at the target latency."""
    s3 = s.get("store") == "s3"
    workloads = ("clips", "long") if s3 else (
        ("clips", "batched", "metadata") + (("long",) if int(s["long_videos"]) else ()))
    out = []
    for lat in latencies(s):
        for workload in workloads:
            out += remote_peer_cases(workload, s, lat)
            flux = Case(workload, "remote", "s3" if s3 else "agent", "fluxon", latency_ms=lat,
                        bandwidth_mbps=float(s["bandwidth_mbps"]),
                        access="read_many" if workload == "batched" else "")
            caches = CACHES if workload in ("clips", "long") else CACHES[:4]
            out += [replace(flux, cache=c) for c in caches]
            if workload in ("clips", "long") and lat == target_latency(s):
                out.append(Case(workload, "remote", "local", "fluxon", latency_ms=lat))
    return out


def versus_best_peer(workload: str, caches: Iterable[tuple[str, float]], what: str,
                     latency_ms: float | None = None) -> list[Goal]:
    """``what`` names the two sides, with {cache} for fluxon's."""
    return [Goal(what.format(cache=cache),
                 Pick(workload, "fluxon", cache, latency_ms=latency_ms),
                 Pick(workload, BEST_PEER, latency_ms=latency_ms), at_least=goal)
            for cache, goal in caches]


CLIP_CACHES = (("warm-kv", 3.0), ("warm-kv+shared", 3.0), ("warm-reader", 3.0),
               ("cold", 2.5), ("cold+lookahead", 2.5))


def remote_goals() -> tuple[Goal, ...]:
    """bench/remote.py's targets (at L = 10 ms, 50 MB/s; batched also at 0 ms)."""
    clip = Pick("clips", "fluxon", "warm-kv")
    local = Pick("clips", "fluxon", store="local")
    return (*versus_best_peer("clips", CLIP_CACHES, "random clip per item: fluxon {cache} ÷ "
                                                     "best exact peer"),
             *versus_best_peer("long", CLIP_CACHES, "random clip of a long video per item: "
                                                    "fluxon {cache} ÷ best exact peer"),
             Goal("fluxon cold+lookahead ÷ fluxon warm-kv (issue 38: cold as fast as warm)",
                  Pick("clips", "fluxon", "cold+lookahead"), clip, at_least=0.9),
             Goal("long videos: fluxon cold+lookahead ÷ fluxon warm-kv (issue 38)",
                  Pick("long", "fluxon", "cold+lookahead"), Pick("long", "fluxon", "warm-kv"),
                  at_least=0.9),
             Goal("fluxon warm-kv ÷ fluxon's decoder on the local files (the store costs "
                  "≤ 10%)", clip, local, at_least=0.9),
             Goal("fluxon warm-kv+shared ÷ fluxon's decoder on the local files",
                  Pick("clips", "fluxon", "warm-kv+shared"), local, at_least=0.9),
             Goal("context: fluxon's decoder on the local files ÷ best exact peer (the "
                  "ceiling if the store cost nothing)", local, Pick("clips", BEST_PEER)),
             Goal("remote bytes: fluxon cold ÷ needed (GOP spans touched + container index)",
                  Pick("clips", "fluxon", "cold"), figure="mib_per_item",
                  bottom_figure="needed_mib_per_item", at_most=1.25),
             Goal("context: fluxon cold bytes ÷ the GOP spans in whole pieces (model from the "
                  "ffprobe packet table and the piece size)", Pick("clips", "fluxon", "cold"),
                  figure="mib_per_item", bottom_figure="span_piece_mib_per_item"),
             Goal("context: fluxon cold bytes ÷ those pieces plus the pieces the cold scan "
                  "reads (MP4: the container bytes around the packets; MKV/WebM/AVI: the "
                  "whole file)", Pick("clips", "fluxon", "cold"), figure="mib_per_item",
                  bottom_figure="open_model_mib_per_item"),
             Goal("remote bytes: fluxon cold ÷ the peer fetching the fewest",
                  Pick("clips", "fluxon", "cold"), Pick("clips", FEWEST_BYTES_PEER),
                  figure="mib_per_item", at_most=0.999),
             *(g for lat in (0.0, None) for g in versus_best_peer(
                 "batched", (("warm-kv", 5.0), ("cold", 5.0)),
                 "batched K clips of one video: fluxon read_many {cache} ÷ best exact peer "
                 "one by one",
                 latency_ms=lat)),
             Goal("context: fluxon read_many warm-kv ÷ PyAV decoding the K clips' union in "
                  "one pass", Pick("batched", "fluxon", "warm-kv"),
                  Pick("batched", "pyav", access="download-union")),
             *(Goal(f"metadata only: fastest exact peer's open ÷ fluxon {cache} video_metadata "
                    "(p50 per video)", Pick("metadata", BEST_PEER),
                    Pick("metadata", "fluxon", cache), figure="item_ms_p50",
                    at_least=10.0 if cache.startswith("warm") else None)
               for cache in ("warm-kv", "warm-kv+shared", "cold")),
             *(Goal(f"metadata only: round trips one after another, fluxon {cache} "
                    "video_metadata (p50 per video)", Pick("metadata", "fluxon", cache),
                    figure="round_trips_p50", at_most=1.0 if cache.startswith("warm") else None)
               for cache in ("warm-kv", "warm-kv+shared", "cold")),
             *(Goal(f"round trips before the first frame, fluxon {cache} (open_round_trips + "
                    "first_frame_waits, p50 per item)", Pick("clips", "fluxon", cache),
                    figure="round_trips_p50", at_most=1.0 if cache.startswith("warm") else 3.0)
               for cache in ("warm-kv", "warm-kv+shared", "cold")))


LOCAL_GOALS = (
    Goal("(a) clips/s, warm KV vs best peer on local files", Pick("clips", "fluxon", "warm-kv"),
         Pick("clips", BEST_PEER), per_video=True, first_video_only=True),
    Goal("(c) per-clip time ÷ decode floor, fluxon warm KV",
         Pick("clips", "fluxon", "warm-kv"), figure="item_ms_p50", bottom_figure="floor_ms",
         per_video=True, first_video_only=True),
    Goal("(b) N clips of one video: read_many ÷ best peer one by one",
         Pick("batched", "fluxon", "warm-kv", access="read_many"), Pick("batched", BEST_PEER),
         per_video=True),
    Goal("(e) local file, 1 thread: fluxon ÷ best exact peer", Pick("clips", "fluxon",
                                                                      store="local"),
         Pick("clips", BEST_PEER), at_least=1.5, per_video=True),
    Goal("(e) local file, 1 thread: clip ÷ decode floor", Pick("clips", "fluxon", store="local"),
         figure="item_ms_p50", bottom_figure="floor_ms", at_most=0.8, per_video=True),
    Goal("(d) cold remote bytes ÷ (GOP spans touched + container)",
         Pick("clips", "fluxon", "cold"), figure="mib_per_item",
         bottom_figure="needed_mib_per_item", per_video=True),
)

TORCHCODEC_NOTE = (
    "torchcodec's decoder-side Resize (bilinear with antialiasing) differs from the ffmpeg "
    "CLI's bilinear scale by more than the tolerance, so its 224x224 rows are flagged OFF "
    "whenever that shows (its native-size frames are bit-exact).")
LOCAL_NOTES = (
    "The decode floor (floor ms, clip/floor) is every frame from the keyframe to the last "
    "target, decoded in a fresh decoder, nothing converted (fluxon_video._floor); fluxon "
    "can go below 1 because it skips non-reference frames it does not return and keeps its "
    "decoder from one clip to the next.",
    "Every measurement runs in a process of its own (its peak RSS is its own; a \"new "
    "process\" starts with nothing cached).", TORCHCODEC_NOTE)
REMOTE_NOTES = (
    "decord's VideoReader accepts a file object, but only to call read() once and decode "
    "from memory: its row is decord's download pipeline (fsspec: HEAD + one GET).",
    "PyAV gets each video's frame -> pts table from the dataset's ffprobe scan, untimed (as "
    "if kept in the dataset's manifest); it seeks to the keyframe before the clip and "
    "decodes forward; a seek that lands past a target is redone from the first keyframe.",
    "torchcodec's exact mode scans every packet when it opens: over an fsspec file that "
    "reads the whole file. " + TORCHCODEC_NOTE,
    "Timed per item: open (fsspec.open's HEAD, the GET, or the pool call) to frames as "
    "numpy, close included; not timed: process start, library initialisation, frame "
    "checks. MiB and requests are the origin servers' counters, conns the connections that "
    "carried requests during a pass (the relay's count, median over passes).",
    "Redis has no injected latency: it is the cache next to the training nodes, the agent "
    "is the remote store.",
    "store CPU ms/clip: the CPU time of the store's processes (Redis, the agent, the relays, "
    "moto) during the row's passes, per clip. They run on the same cores as the reader, so a "
    "row that makes the store work (a cold read) pays for it in its own time too; in a real "
    "deployment that work is on other machines.")

THREADS = (1, 2, 0)  # 0: each library's own choice (FFmpeg's thread_count 0, fluxon "auto")


def threads_cases(s: dict[str, Any]) -> list[Case]:
    """bench/threads.py's matrix: every contender at 1, 2 and auto decoder threads on the
    local 1080p files; fluxon as its users open a file (``open_video``)."""
    return [Case("clips", "threads", "local", family, access="open_video" * (family == "fluxon"),
                 threads=t) for t in THREADS for family in ("fluxon", *PEERS)]


THREAD_GOALS = (
    Goal("fluxon 2 threads ÷ 1 thread", Pick("clips", "fluxon", store="local", threads=2),
         Pick("clips", "fluxon", store="local", threads=1), at_least=1.7, per_video=True),
    Goal("context: fluxon auto threads ÷ 1 thread", Pick("clips", "fluxon", store="local",
                                                         threads=0),
         Pick("clips", "fluxon", store="local", threads=1), per_video=True),
    *(Goal(f"context: fluxon ÷ best exact peer, {t or 'auto'} thread(s) each",
           Pick("clips", "fluxon", store="local", threads=t),
           Pick("clips", BEST_PEER, threads=t), per_video=True) for t in THREADS))

LOADER_PEERS = ("decord", "torchcodec")


def loader_cases(s: dict[str, Any]) -> list[Case]:
    """bench/dataloader.py's rows: per order, fluxon through the store cold (batched: also
    cold with the sampler's lookahead) and warm, and the peers on the local files."""
    store, lat = str(s["store"]), target_latency(s)
    out = []
    for workload in ("loader-clips", "loader-batched"):
        flux = Case(workload, "loader", store, "fluxon", latency_ms=lat)
        caches = ("cold", "cold+lookahead", "warm-kv") if workload == "loader-batched" \
            else ("cold", "warm-kv")
        out += [replace(flux, cache=c) for c in caches]
        out += [Case(workload, "loader", "local", peer, latency_ms=lat) for peer in LOADER_PEERS]
    return out


def loader_goals(busy_goal: float | None) -> tuple[Goal, ...]:
    """The DataLoader's goals; ``busy_goal``: the cores each worker keeps busy, cold with
    lookahead (issue 38 states it for 4 workers over an S3 export)."""
    return (
        *(Goal(f"{what}: fluxon warm-kv ÷ best exact peer on the local files",
               Pick(workload, "fluxon", "warm-kv"), Pick(workload, BEST_PEER), at_least=1.5)
          for workload, what in (("loader-clips", "clips in shuffled order"),
                                 ("loader-batched", "SameVideoBatchSampler's batches"))),
        Goal("batched: fluxon cold+lookahead ÷ fluxon warm-kv (issue 38: cold as fast as warm)",
             Pick("loader-batched", "fluxon", "cold+lookahead"),
             Pick("loader-batched", "fluxon", "warm-kv"), at_least=0.9),
        Goal("context: batched, fluxon cold+lookahead ÷ fluxon cold",
             Pick("loader-batched", "fluxon", "cold+lookahead"),
             Pick("loader-batched", "fluxon", "cold")),
        *(Goal(f"{what}: fluxon warm-kv ÷ the fastest peer, its frames flagged or not",
               Pick(workload, "fluxon", "warm-kv"), Pick(workload, FASTEST_PEER))
          for workload, what in (("loader-clips", "context: clips in shuffled order"),
                                 ("loader-batched", "context: SameVideoBatchSampler's "
                                                    "batches"))),
        *(Goal(f"cores busy, fluxon {cache}, batched: the workers' CPU ÷ the cores they can "
               "use (min(workers, cores))", Pick("loader-batched", "fluxon", cache),
               figure="cores_busy") for cache in ("cold", "cold+lookahead", "warm-kv")),
        # The relays and moto stand in for the network and the object store: on a training
        # node they are other machines, here they take the workers' cores.
        *(Goal(f"cores busy, fluxon {cache}, batched: the workers' CPU ÷ the cores left after "
               "the store model (the relays and moto, other machines in a deployment)",
               Pick("loader-batched", "fluxon", cache), figure="cores_busy_left",
               at_least=busy_goal if cache == "cold+lookahead" else None)
          for cache in ("cold", "cold+lookahead")),
        *(Goal(f"context: cores busy, fluxon {cache}, batched: every process's CPU (the "
               "workers, the main process, the store's, other work) ÷ the machine's cores",
               Pick("loader-batched", "fluxon", cache), figure="machine_busy")
          for cache in ("cold+lookahead", "warm-kv")))


LOADER_NOTES = (
    "Every contender reads the same clip plan: 4 random 16-frame clips (stride 4, 224x224) "
    "of each of items/4 videos. loader-clips: DataLoader shuffle=True with one seeded "
    "generator for every row; fluxon's VideoClipDataset (items forced to the plan's clips), "
    "one read_many call per batch; decord VideoReader(path, width, height) + get_batch; "
    "torchcodec VideoDecoder(seek_mode=\"exact\", transforms=[Resize]) + get_frames_at, a new "
    "reader per item. loader-batched: SameVideoBatchSampler's batches for every row; peers "
    "open each video once per batch and read the sorted union of its clips in one call.",
    "fluxon cold: Redis flushed before the epoch; cold+lookahead: the same with the "
    "sampler's lookahead (each worker's next batch, its indexes, readers and bytes, read "
    "while one decodes); warm-kv: Redis holds every piece and index (an untimed warm-up "
    "epoch and a top-up pass), and its batched row plans ahead too. Peers read the local "
    "files with the page cache warm (an untimed warm-up epoch of their own).",
    "clips/s: items ÷ wall time from iter(loader) to the last batch, worker start-up "
    "included, fresh workers every epoch (persistent_workers=False); the median over "
    "epochs, the range in brackets. CPU ms/clip: this process and its workers over the "
    "epoch (the agent's, Redis's and the store's not in it).",
    "worker CPU: each worker's CPU time from its start to its last batch ÷ that span (1.00: "
    "a core kept busy), sorted, medians over epochs; cores busy: the workers' sum ÷ the "
    "cores they can use, and every process's CPU during the epoch ÷ the machine's cores "
    "(the main process, the store's processes and other work share the same cores). store "
    "model's cores: the CPU of the processes that stand in for other machines (the latency "
    "relays and moto; the agent and Redis count as ours) ÷ the epoch; the workers' share of "
    "the rest: their sum ÷ min(workers, cores - that). other "
    "CPU: cores the machine spent on work that is not the benchmark's during the epoch; an "
    "epoch above max_other_cpu was redone (at most retries times).",
    "KV hit/miss, MiB/clip (from the store), index scans/from KV and lookahead pages: the "
    "workers' FluxonFS stats over the first timed epoch (StatsCollate + LoaderStats).",
    "frames: every item of the first timed epoch against the ffmpeg CLI (bilinear 224x224): "
    "fluxon bit-exact; peers the right frame within a mean abs diff of 3 (bench/frames.py). "
    "That check runs in the main process during the first epoch, for every row alike: it "
    "is in that epoch's time and CPU (the median over epochs leans on the others).")
LOADER_DEFAULTS: dict[str, Any] = {
    "store": "agent", "latencies": "0", "items": 96, "repeat": 3, "workers": 2,
    "batch_size": 8, "per_video": 4, "threads": 1, "context": None, "max_other_cpu": 0.25,
    "retries": 3, "seed": 7}
LOADER_QUICK = {"items": 32, "repeat": 1}

# ---- the lerobot suite (bench/lerobot_group.py; was bench/lerobot.py) ----

LEROBOT_WORKLOADS = ("lerobot-clip-w0", "lerobot-clip-w2", "lerobot-rows16-w0",
                     "lerobot-rows16-w2", "lerobot-plain")
LEROBOT_BASE = "lerobot-torchcodec"  # the goals' reference: LeRobot as its users run it


def lerobot_cases(s: dict[str, Any]) -> list[Case]:
    """Per workload: LeRobot (torchcodec, pyav), Daft (0-worker rows: it runs its own
    threads) and fluxon on the local files; fluxon through an S3 export cold, cold with
    lookahead (not ds[i]: no next batch to plan) and warm."""
    lat, out = target_latency(s), []
    for workload in LEROBOT_WORKLOADS:
        local = Case(workload, "lerobot", "local", "fluxon", latency_ms=lat)
        peers = [LEROBOT_BASE, "lerobot-pyav"] + ["daft"] * (not workload.endswith("w2"))
        out += [*(replace(local, family=p) for p in peers), local]
        if workload != "lerobot-plain":  # a batch of float clips against one of uint8
            out.append(replace(local, access="uint8"))
        s3 = Case(workload, "lerobot", "s3", "fluxon", latency_ms=lat, bandwidth_mbps=50.0)
        out += [replace(s3, cache=c) for c in ("cold", "cold+lookahead", "warm-kv")
                if not (workload == "lerobot-plain" and c == "cold+lookahead")]
    return out


def lerobot_goals() -> tuple[Goal, ...]:
    """Issue 36's: fluxon >= 1.5x LeRobot (torchcodec) locally, >= 2x through an S3 export
    cold; peak memory no higher than LeRobot's; no wrong frame."""
    goals: list[Goal] = []
    for w in LEROBOT_WORKLOADS:
        local, base = Pick(w, "fluxon", store="local", access=""), Pick(w, LEROBOT_BASE)
        goals.append(Goal("fluxon ÷ LeRobot (torchcodec), local files", local, base,
                          at_least=1.5))
        if w != "lerobot-plain":
            goals.append(Goal("context: fluxon with uint8 frames (return_uint8=True) ÷ fluxon "
                              "(float), local files", Pick(w, "fluxon", store="local",
                                                          access="uint8"), local))
        goals += [Goal(f"fluxon S3 {cache} ÷ LeRobot (torchcodec) on the local files",
                       Pick(w, "fluxon", cache), base, at_least=2.0)
                  for cache in ("cold", "cold+lookahead")]
        goals.append(Goal("context: fluxon S3 warm-kv ÷ LeRobot (torchcodec) on the local "
                          "files", Pick(w, "fluxon", "warm-kv"), base))
        workers = w.endswith("w2")
        goals.append(Goal(f"peak RSS {'per worker' if workers else 'of the main process'}: "
                          "fluxon ÷ LeRobot (torchcodec)", local, base,
                          figure="worker_rss_mib" if workers else "peak_rss_mib", at_most=1.0))
        goals += [Goal(f"wrong frames, fluxon {where}", pick, figure="frames_wrong", at_most=0)
                  for where, pick in (("local files", local),
                                      ("S3 cold", Pick(w, "fluxon", "cold")))]
    return tuple(goals)


LEROBOT_NOTES = (
    "LeRobot 0.6.1 runs in its own virtualenv on Python 3.12 (bench/install_peers.py "
    "--lerobot-venv) and writes the dataset once (bench/lerobot_write.py: LeRobotDataset."
    "create + add_frame + save_episode; LeRobot's default AV1 encoding).",
    "Every pass is a client process of its own (bench/lerobot_client.py) reading the same "
    "seeded rows; each case's timed pass comes right after an untimed one (warmup: on "
    "this VM a process that allocates fresh memory right after another program's pays for "
    "huge-page compaction, which a running training job does not): a local case's of its "
    "own, an S3 case's the same client on the local files (its own would fill its cache). "
    "Throughput: items (rows16: rows) per second of one epoch, DataLoader start-up "
    "included, dataset construction excluded; the median over --repeat passes, "
    "interleaved: each round runs every contender of a run, local and S3 alike. Peak "
    "RSS: the client's main process and, with workers, its largest worker.",
    "S3 rows: moto behind the latency proxy at L ms per request and 50 MB/s per connection, "
    "read through the agent and Redis; cold: Redis flushed before the pass; cold+lookahead: "
    "cold, the dataset told the DataLoader's batch order (plan_batches) so that each process "
    "fetches its next batch's bytes while one decodes. LeRobot reads no object store: the "
    "S3 rows' goals compare them with LeRobot on the local files.",
    "fluxon local file · uint8: the same dataset with return_uint8=True, frames uint8 "
    "(C, H, W) as decoded, for a training step that divides by 255 where the batch lands; "
    "not a drop-in for LeRobot's float frames, so no goal compares it with LeRobot.",
    "Daft: its LeRobot reader (daft.datasets.lerobot.read, one camera decoded per "
    "DataFrame), queried per batch for the batch's rows (a clip's window clamped to its "
    "episode as LeRobot pads); it gives uint8 HWC frames (no float conversion) and runs its "
    "own threads, so it has 0-worker rows only.",
    "CPU-s: the whole client run (dataset construction and, with workers, the untimed check "
    "pass included); for S3 rows also what redis, moto, the relays and the agent used "
    "meanwhile, on the same cores.",
    "Frames: each against the ffmpeg CLI's frame whose pts is nearest the row's time "
    "(from_timestamp + the row's float32 timestamp, LeRobot's rule): exact (bit for bit), "
    "right (that frame, another converter's rounding) or wrong; *_is_pad flags checked too.")
LEROBOT_DEFAULTS: dict[str, Any] = {
    "episodes": 12, "clip_batches": 10, "row_batches": 20, "plain_items": 40, "repeat": 2,
    "warmup": 1, "seed": 7, "latencies": "10"}
LEROBOT_QUICK = {"episodes": 4, "clip_batches": 2, "row_batches": 3, "plain_items": 12,
                 "repeat": 1, "warmup": 0}


# ---- the av suite (bench/av_group.py; was bench/av_clips.py) ----

AV_PEERS = ("torchcodec", "pyav", "decord")


def av_cases(s: dict[str, Any]) -> list[Case]:
    """bench/av_clips.py's rows: fluxon (exact audio, and with pre-roll) and the peers on
    the local files; at each latency through its remote-store model (stores.PassModel, 50
    MB/s per connection), fluxon cold and warm-kv and the peers downloading the file."""
    local = Case("av-clips", "av", "local", "fluxon")
    out = [local, replace(local, access=PREROLL_AUDIO),
           *(replace(local, family=p) for p in AV_PEERS)]
    for lat in latencies(s):
        flux = Case("av-clips-open", "av", "agent", "fluxon", latency_ms=lat,
                    bandwidth_mbps=50.0)
        out += [replace(flux, cache=c) for c in ("cold", "warm-kv")]
        out += [replace(flux, family=p, access="download") for p in AV_PEERS]
    return out


AV_FLUXON = Pick("av-clips", "fluxon", store="local", access="")  # exact audio
AV_GOALS = (
    *(Goal(f"audio equal to the ffmpeg CLI's on every item: fluxon {where}", pick,
           figure="audio_exact_share", at_least=1.0)
      for where, pick in (("on the local files", AV_FLUXON),
                          ("cold, each item opening its video through the store",
                           Pick("av-clips-open", "fluxon", "cold")),
                          ("warm-kv, each item opening its video through the store",
                           Pick("av-clips-open", "fluxon", "warm-kv")))),
    Goal("context: A-V clips/s, fluxon ÷ best exact peer on the local files", AV_FLUXON,
         Pick("av-clips", BEST_PEER)),
    *(Goal(f"context: A-V clips/s, fluxon {cache} ÷ best exact peer, each item opening its "
           "video through the store", Pick("av-clips-open", "fluxon", cache),
           Pick("av-clips-open", BEST_PEER)) for cache in ("cold", "warm-kv")),
    Goal("context: A-V clips/s, fluxon exact_audio=False (pre-roll) ÷ exact audio, local files",
         Pick("av-clips", "fluxon", store="local", access=PREROLL_AUDIO), AV_FLUXON))
AV_NOTES = (
    "Each item is a random 2 s span [t, t + 2 s) of a video (as many per video as the items "
    "setting, seeded): the 16 frames on screen at t + k/8 s, 224x224, and the span's audio at "
    "16 kHz mono. Videos as long as the seconds setting: 720p H.264 + AAC 48 kHz stereo (MP4 "
    "faststart), 360p VP9 + Opus (WebM), and the MP4 cut at 1.3 s, a non-keyframe (an edit "
    "list). One process, one decoder thread.",
    "Rows: fluxon-local: fv.open_video + get_clip_played_in_range (exact_audio=True: the "
    "audio decoded as the CLI does, AAC from the stream's start); fluxon-local · "
    "exact_audio=False: the audio from a seek with pre-roll instead; torchcodec: "
    "VideoDecoder (exact, decoder-side Resize) get_frames_played_at + AudioDecoder"
    "(sample_rate=16000, num_channels=1) get_samples_played_in_range; pyav: one container, "
    "per clip a seek and forward decode of the video (its reformatter) and of the audio "
    "(AudioResampler to 16 kHz mono); decord: AVReader(sample_rate=16000, mono=True, width, "
    "height), one slice of the span's frames with their audio.",
    "av-clips: the local files, one handle per video for all its items. av-clips-open: each "
    "item opens its video through the remote-store model (L ms per request, 50 MB/s per "
    "connection): fluxon through the agent and Redis, cold (Redis flushed, then a new "
    "patcher) and warm-kv (a new patcher, Redis warm); the peers download the file from the "
    "HTTP Range server (one GET) and decode the bytes. The open is timed with the item.",
    "Audio is checked against `ffmpeg -i IN -map 0:a:0 -af aresample=16000 -ac 1 -f f32le -` "
    "at each contender's own start time: audio exact counts the items equal to it sample for "
    "sample (per video: the MP4, the WebM, the edit-list MP4); where not exact, audio shift "
    "lists the shifts within 1/8 s at which the samples match the CLI's (mean difference "
    "under 5% of their level; \"no match\": nowhere) and audio max diff the largest "
    "difference there.",
    "Frames against the ffmpeg CLI (bilinear 224x224): fluxon bit-exact, peers the right "
    "frame within a mean abs diff of 3 (bench/frames.py); a row with items that failed is "
    "flagged, its first error shown.",
    "A-V clips/s: items ÷ the pass's time (each item from its open or read to its samples, "
    "checks not timed), the median over repeat passes of a row run one after another, the "
    "range in brackets. CPU ms/clip: this process's CPU time per item, every thread (the "
    "agent's, Redis's and the range server's not in it). MiB and requests per clip: the "
    "origin's counters (the agent's for fluxon, the range server's for the peers).")
AV_DEFAULTS: dict[str, Any] = {"latencies": "10", "items": 8, "seconds": 30.0, "repeat": 2,
                               "seed": 7}
AV_QUICK = {"items": 3, "seconds": 12.0}


REMOTE_DEFAULTS: dict[str, Any] = {
    "store": "agent", "latencies": "0,2,10", "bandwidth_mbps": 50.0, "rounds": "2",
    "videos": 24, "batched_items": 3, "batched_clips": 8, "block_sizes": "256K,default",
    "threads": 1, "piece_size": None, "seed": 15, "long_videos": 0, "long_items": 0}
REMOTE_QUICK = {"latencies": "10", "rounds": "1", "videos": 12, "batched_items": 2}
# 8 clips of each long video per round: with 4, a round's one cold start (the first open,
# nothing before it to look ahead from) was an eighth of the cold+lookahead row (0.85x of
# warm at a p50 of 0.95x; 0.89x with 8, session 20)
S3_DEFAULTS = {**REMOTE_DEFAULTS, "store": "s3", "latencies": "10", "videos": 16,
               "block_sizes": "256K,4M", "long_videos": 2, "long_items": 8}

SUITES = {s.name: s for s in (
    Suite("local", "peers on local files vs fluxon through FluxonFS on loopback, per video "
          "(was bench/run.py)", "latest", local_cases,
          {"latencies": "0", "repeat": 3, "clips": 6, "batch_clips": 8, "seed": 5, "threads": 1,
           "piece_size": None, "sweep_piece_sizes": "256K,1M,4M", "sweep_latency_ms": 2.0,
           "bandwidth_mbps": 0.0},
          {"repeat": 1, "clips": 2, "batch_clips": 4, "sweep_piece_sizes": "256K,1M"},
          LOCAL_GOALS, goal_latency_ms=0.0, notes=LOCAL_NOTES),
    Suite("remote", "fluxon through the agent vs peers over HTTP, one store model (was "
          "bench/remote.py)", "remote", remote_cases, REMOTE_DEFAULTS, REMOTE_QUICK,
          remote_goals(), notes=REMOTE_NOTES),
    Suite("remote-s3", "an S3 origin: moto behind the latency relay (was bench/remote.py "
          "--store s3)", "remote-s3", remote_cases, S3_DEFAULTS,
          {"rounds": "1", "videos": 6, "long_videos": 1, "long_items": 2},
          tuple(g for g in remote_goals() if g.top.workload in ("clips", "long")
                and g.bottom is not None and (g.bottom.family == BEST_PEER
                                              or g.top.cache == "cold+lookahead")),
          notes=REMOTE_NOTES),
    Suite("remote-long", "the remote store on 2-minute videos (was bench/remote.py "
          "--long-videos 4 --long-items 3 --latencies 10 --videos 4 --batched-items 1)",
          "remote-long/remote", remote_cases, {**REMOTE_DEFAULTS, "long_videos": 4, "long_items": 3,
                                   "latencies": "10", "videos": 4, "batched_items": 1},
          {"rounds": "1", "long_videos": 1, "long_items": 2}, remote_goals(), notes=REMOTE_NOTES),
    Suite("loader", "fluxon_video.torch vs decord and torchcodec in a real DataLoader, fluxon "
          "through the agent (was bench/dataloader.py)", "dataloader", loader_cases,
          LOADER_DEFAULTS, LOADER_QUICK, loader_goals(None), goal_latency_ms=0.0,
          notes=LOADER_NOTES),
    Suite("loader-s3", "the DataLoader with 4 workers, fluxon through an S3 export at 10 ms per "
          "request and 50 MB/s per connection (was bench/dataloader.py --store s3 "
          "--agent-latency-ms 10 --workers 4)", "dataloader-s3-4workers", loader_cases,
          {**LOADER_DEFAULTS, "store": "s3", "latencies": "10", "workers": 4}, LOADER_QUICK,
          loader_goals(0.9), notes=LOADER_NOTES),
    Suite("lerobot", "LeRobot's LeRobotDataset (torchcodec, pyav) and Daft vs "
          "fluxon_video.lerobot on a dataset LeRobot wrote, locally and fluxon through an S3 "
          "export (was bench/lerobot.py)", "lerobot", lerobot_cases, LEROBOT_DEFAULTS,
          LEROBOT_QUICK, lerobot_goals(), notes=LEROBOT_NOTES),
    Suite("threads", "decoder threads on 1080p: 1, 2 and auto threads, fluxon against every "
          "peer at the same setting (was bench/threads.py)", "threads", threads_cases,
          {"clips": 12, "repeat": 3, "thread_videos": "h264,hevc", "seed": 5,
           "latencies": "0", "threads": 1},
          {"clips": 4, "repeat": 1, "thread_videos": "h264"}, THREAD_GOALS, goal_latency_ms=0.0,
          notes=("auto is each library's own choice: FFmpeg's thread_count 0 for the peers, "
                 "num_threads=\"auto\" for fluxon (a thread per core the process may run on).",
                 "fluxon opens each file with fv.open_video(path, 224, 224, num_threads=t): "
                 "with t >= 2 a read whose frames start at different keyframes is split over "
                 "two decoders.", TORCHCODEC_NOTE)),
    Suite("av", "A-V clips: a 2 s span's frames and its 16 kHz audio, fluxon vs torchcodec, "
          "PyAV and decord's AVReader, local and through the remote-store model (was "
          "bench/av_clips.py)", "av", av_cases, AV_DEFAULTS, AV_QUICK, AV_GOALS,
          notes=AV_NOTES),
)}
