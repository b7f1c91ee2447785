"""The local benchmark's result records (bench/run.py): what a child measured for one
contender on one video, written as JSON for the parent and for latest.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# A failed child's task kind -> the cache state its records stood for.
CACHE_OF_KIND = {"local": "local", "fluxon-cold": "cold", "fluxon-warm-kv": "warm-kv",
                 "batched": "warm-kv"}


@dataclass
class Repeat:
    """One timed pass over a video's clips: the handle's opening, each read, their counts."""

    open_ms: float
    clip_ms: list[float] = field(default_factory=list)
    pass_ms: float = 0.0  # open + reads
    stats: dict[str, float] = field(default_factory=dict)
    labels: dict[str, list[str]] = field(default_factory=dict)
    group_size: int | None = None  # read_many: clips the call decoded together

    def add_stats(self, stats: dict[str, Any] | None) -> None:
        """Sum the numbers; keep each distinct text (fluxon's read path, fallback reason)."""
        for key, value in (stats or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.stats[key] = self.stats.get(key, 0) + value
            elif isinstance(value, str) and value and value not in self.labels.setdefault(key, []):
                self.labels[key].append(value)


@dataclass
class Record:
    """One contender, cache state and video: its repeats, frame check and peak RSS."""

    contender: str
    cache: str
    workload: str
    video: str
    height: int
    width: int
    clips: int
    frames_per_clip: int
    threads: int | None
    piece_size: int | None
    repeats: list[Repeat] = field(default_factory=list)
    check: dict | None = None
    error: str | None = None
    peak_rss_mib: float | None = None
    index_ms: float | None = None  # the contender's one-time scan of the file, untimed

    @classmethod
    def of(cls, task: dict, item: dict, cache: str, contender: str,
           error: str | None = None) -> Record:
        return cls(contender, cache, item["workload"], item["video"], item["height"],
                   item["width"], len(item["clips"]), len(item["clips"][0]), task.get("threads"),
                   task.get("fluxon", {}).get("piece_size"), error=error)

    @classmethod
    def failed(cls, task: dict, item: dict, error: str) -> Record:
        """A record standing for a child process that died (it shows as FAILED)."""
        contender = task.get("contender") or ("fluxon read_many" if task["kind"] == "batched"
                                              else "fluxon")
        return cls.of(task, item, CACHE_OF_KIND.get(task["kind"], "?"), contender, error)
