"""The benchmark as data: a ``Case`` is one row of the matrix (workload x store model x
contender x cache state); the filters of the command line select cases. The named suites
that list them are bench/suites.py."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from contenders import PEERS
from harness import KiB, MiB
# fluxon's cache states through FluxonFS: cold (Redis flushed, a new process),
# cold+lookahead (cold, each item read with the next one's requests as read_many's
# ``ahead``), warm-kv (a new process, Redis warm), warm-kv+shared (the same with
# metadata_cache_shared), warm-reader (the cold process's pool again). "" is no cache: a
# peer, or fluxon's decoder on the local file.
CACHES = ("cold", "cold+lookahead", "warm-kv", "warm-kv+shared", "warm-reader")
WORKLOADS = {
    "clips": "random 16-frame clips, stride 4, 224x224",
    "clips-native": "random 16-frame clips, stride 4, native size",
    "sequential": "full sequential decode, 224x224",
    "batched": "K clips of one video per item: fluxon read_many_numpy_with_stats vs one by one",
    "metadata": "time until frame count, fps and duration are known, per video",
    "long": "a random clip of a 2-minute video (720p and 1080p, 45-90 MB) per item",
    "loader-clips": "a torch DataLoader (fresh workers every epoch, batches of 8) over random "
                    "16-frame clips at 224x224 in shuffled order, a random video per item",
    "loader-batched": "the same DataLoader over SameVideoBatchSampler's batches: 4 clips of "
                      "each of 2 videos per batch, each video opened once per batch",
    # ---- LeRobot's LeRobotDataset against fluxon_video.lerobot's (the lerobot suite) ----
    **{f"lerobot-clip-w{n}": f"a DataLoader with {n} workers, batches of 8 random rows: a "
                             "16-frame clip of the front camera (delta_timestamps), one frame "
                             "of the wrist camera, state and action; items/s" for n in (0, 2)},
    **{f"lerobot-rows16-w{n}": f"a DataLoader with {n} workers, batches of 16 consecutive rows "
                               "(both cameras, a frame each); rows/s" for n in (0, 2)},
    "lerobot-plain": "ds[i] for random rows in one process; items/s",
    # ---- A-V clips: frames and their audio on one clock (the av suite) ----
    "av-clips": "a random 2 s span per item: its 16 frames at 8 fps, 224x224, and its audio "
                "at 16 kHz mono; one handle per video for all its items",
    "av-clips-open": "the same spans, each item opening its video anew (a dataset's random "
                     "clip per item) through the remote-store model",
}
# The datasets: "codecs", one video per codec and layout with several clips each (the
# local suite); "remote", 24 short 720p/1080p videos (and the 2-minute "long" ones), one
# clip per video per item, a new open per item (the remote suites); "threads", 1080p
# H.264 and HEVC read at 1, 2 and auto decoder threads (the threads suite); "loader", the
# DataLoader's short videos (the loader suites); "av", videos with audio (the av suite).
DATASETS = {
    "codecs": "one video per codec and layout, several clips of each through one handle",
    "remote": "short 720p/1080p videos, one item per video per round, a new open per item",
    "threads": "1080p H.264 and HEVC; clips of 16 frames 2 apart (not 4), one handle per "
               "pass and video",
    "loader": "24 short 640x360 videos (H.264 faststart and moov-at-end, HEVC, VP9 WebM), one "
              "clip plan every contender reads in a real DataLoader",
    "lerobot": "a LeRobot v3 dataset LeRobot 0.6.1 wrote (two cameras, 480x640 and 240x320, "
               "AV1, episodes spread over shard files), every run a process of its own",
    "av": "videos with audio (30 s; --quick 12 s): 720p H.264 + AAC 48 kHz stereo (MP4), 360p "
          "VP9 + Opus (WebM) and the MP4 cut at a non-keyframe (an edit list)"}
STORES = ("local", "agent", "s3")
# The lerobot suite's contenders that are not bench/contenders.py's peers: LeRobot's own
# dataset on its torchcodec and pyav backends, and Daft's LeRobot reader.
LEROBOT_PEERS = ("lerobot-torchcodec", "lerobot-pyav", "daft")
# A "batched" peer case of the remote suites that is not one peer but the best exact one
# (and the fastest, if that is another, flagged one) of "clips" at the same latency.
BEST_CLIPS_PEER = "best-clips-peer"
# The av suite's fluxon access that seeks with a pre-roll for the audio instead of decoding
# it from the stream's start (get_clip_played_in_range's exact_audio=False).
PREROLL_AUDIO = "exact_audio=False"


@dataclass(frozen=True)
class Case:
    """One row of the matrix. ``store``: "local" (the file on this disk), "agent" (a
    directory export at ``latency_ms`` per request and ``bandwidth_mbps`` per connection:
    fluxon through the agent, peers through the HTTP Range server) or "s3" (moto behind the
    latency relay). A local-store case of a remote suite carries the latency of the rows it
    runs beside (it is their reference). ``access``: how a peer reaches the bytes ("path",
    "fsspec", "download", "download-union", "s3fs", "obstore", "file-object") or how fluxon
    reads ("" clip by clip, "read_many": one call for the item, PREROLL_AUDIO: A-V clips
    whose audio starts at a seek with pre-roll); ``block_size`` of the
    file object (None: the library's default)."""

    workload: str
    dataset: str
    store: str
    family: str
    cache: str = ""
    access: str = ""
    latency_ms: float = 0.0
    bandwidth_mbps: float = 0.0
    block_size: int | None = None
    seek_mode: str = ""        # torchcodec's
    piece_size: int | None = None  # FluxonFS piece size; None: the export's default
    threads: int | None = None  # decoder threads (0: the library's "auto"); None: --threads

    @property
    def fluxon(self) -> bool:
        return self.family == "fluxon"

    @property
    def via_store(self) -> bool:
        """fluxon through FluxonFS (it has a cache state)."""
        return self.fluxon and self.store != "local"

    @property
    def setup(self) -> str:
        """What cases share to run together: the dataset, its servers and plan (a suite has
        one store origin, and its local reference rows run beside that store)."""
        return self.dataset

    @property
    def cache_name(self) -> str:
        return self.cache or "none"

    def peer_row(self) -> dict[str, Any]:
        """The row dict the peer executors take (bench/peer_passes.py)."""
        mode = "download" if self.access.startswith("download") else (
            "fsspec" if self.access == "file-object" else self.access)
        return {"family": self.family, "mode": mode, "block_size": self.block_size,
                **({"seek_mode": self.seek_mode} if self.seek_mode else {}),
                **({"union": True} if self.access == "download-union" else {})}

    def label(self) -> str:
        """The row's name in tables: contender, access and cache (and decoder threads)."""
        if self.threads is not None:
            count = f"{self.threads} thread" + "s" * (self.threads > 1) if self.threads \
                else "auto threads"
            return f"{self.family} · {count}"
        if self.fluxon and self.store == "local" and self.access == PREROLL_AUDIO:
            return f"fluxon-local · {self.access}"
        if self.fluxon:
            if self.store == "local" and self.dataset == "lerobot" and self.access:
                return f"fluxon local file · {self.access}"
            if self.store == "local":
                return "fluxon local file" if self.dataset in ("remote", "lerobot") \
                    else "fluxon-local"
            how = {"read_many": "read_many ", "metadata": "video_metadata "}.get(
                "metadata" if self.workload == "metadata" else self.access, "")
            return f"fluxon {how}{self.cache}".strip()
        if self.store == "local" or self.family == BEST_CLIPS_PEER:
            return self.family
        if self.access.startswith("download"):
            return f"{self.family} · download (1 GET)" + (
                ", K clips in one pass (union)" if self.access == "download-union" else "")
        if self.access == "file-object":
            return f"{self.family} · file object (reads it whole)"
        seek = f" {self.seek_mode}" if self.seek_mode else ""
        tool = {"s3fs": "s3fs", "obstore": "obstore reader"}.get(self.access, "fsspec")
        return f"{self.family}{seek} · " + (f"{tool} {size_text(self.block_size)}"
                                            if self.block_size else "fsspec 5 MiB (default)")

    def key(self) -> str:
        """A short unique name: workload/store@L/label[/piece]."""
        piece = f"/piece {size_text(self.piece_size)}" if self.piece_size else ""
        return (f"{self.workload}/{self.dataset}/{self.store}@{self.latency_ms:g}ms/"
                f"{self.label()}{piece}")


def size_text(size: int | None) -> str:
    if not size:
        return "default"
    return f"{size // MiB} MiB" if size % MiB == 0 else f"{size // KiB} KiB"


def parse_size(text: str) -> int:
    """Bytes from "256K", "1M", "4MiB" or a plain number."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
    return int(float(text.rstrip("KM")) * scale)


# ---- selection ----

@dataclass(frozen=True)
class Filters:
    """The command line's case filters (empty: everything of the suite)."""

    workloads: frozenset[str] = field(default_factory=frozenset)
    stores: frozenset[str] = field(default_factory=frozenset)
    contenders: frozenset[str] = field(default_factory=frozenset)
    caches: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def parse(cls, **lists: str | None) -> Filters:
        return cls(**{k: frozenset(x.strip() for x in (v or "").split(",") if x.strip())
                      for k, v in lists.items()})

    def keeps(self, case: Case) -> bool:
        contender = "fluxon" if case.fluxon else case.family
        return all(not allowed or value in allowed for allowed, value in (
            (self.workloads, case.workload), (self.stores, case.store),
            (self.contenders, contender), (self.caches, case.cache_name)))


def select(suite_cases: list[Case], filters: Filters) -> list[Case]:
    """A suite's cases that pass the filters, each once, in the suite's order. A warm
    fluxon case needs its cold pass first (it primes Redis; warm-reader reuses its pool):
    the cold case of the same workload, store and latency is kept with it."""
    cases = list(dict.fromkeys(suite_cases))
    kept = [c for c in cases if filters.keeps(c)]
    warm = [c for c in kept if c.via_store and c.cache.startswith("warm")]
    needed = {o for o in cases if o.via_store and o.cache == "cold" for c in warm
              if replace(o, cache=c.cache, access=c.access) == c}
    return [c for c in cases if c in kept or c in needed]


def unknown(filters: Filters) -> list[str]:
    """Filter values no case can have (a typo would otherwise select nothing)."""
    known = {"workloads": set(WORKLOADS), "stores": set(STORES),
             "contenders": {*PEERS, *LEROBOT_PEERS, "fluxon"},
             "caches": {*CACHES, "none"}}
    return [f"--{name} {value}" for name, allowed in known.items()
            for value in sorted(getattr(filters, name)) if value not in allowed]

