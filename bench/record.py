"""One typed record per measured case (per video where the suite measures per video), and
the one results file: ``{"meta": {...}, "records": [...]}``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from cases import Case

FORMAT = "fluxon-bench-matrix/1"


@dataclass
class Record:
    """What one case measured. Rates are per item (an item: one clip, K clips of one video,
    a whole video decoded, or one video's metadata; ``clips_per_item`` and
    ``frames_per_item`` say which); the median over rounds (or repeats) with every round's
    value; times over every item of every round. Byte and request counts are the origin's
    own counters (fluxon: the agent's; peers: the range server's or the S3 proxy's), per
    item. None: not measured for this case."""

    case: Case
    video: str | None = None            # None: every video of the workload
    settings: dict[str, Any] = field(default_factory=dict)  # threads, size, rounds, ...
    rounds: int = 0
    items: int = 0
    clips_per_item: float = 1.0
    frames_per_item: float | None = None
    items_per_s: float | None = None
    items_per_s_rounds: list[float] = field(default_factory=list)
    item_ms_p50: float | None = None
    item_ms_p95: float | None = None
    item_ms_p99: float | None = None
    round_median_ms: list[float] = field(default_factory=list)  # each round's item p50
    open_ms: float | None = None
    index_ms: float | None = None       # a one-time scan before the clips (not timed in them)
    mib_per_item: float | None = None
    requests_per_item: float | None = None
    connections: float | None = None
    round_trips_p50: float | None = None      # fluxon: open_round_trips + first_frame_waits
    kv_round_trips_per_item: float | None = None
    cpu_s: float | None = None          # the reading process's CPU-seconds per item (every
    # thread of it, timed items only; the servers' processes are not in it)
    peak_rss_mib: float | None = None
    floor_ms: float | None = None       # the decode floor of the same clips, p50 per clip
    needed_mib_per_item: float | None = None  # GOP spans touched + container bytes
    ok: bool = True
    verdict: str = ""
    frames_checked: int = 0
    frames_exact: int = 0
    frames_wrong: int = 0
    errors: list[str] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)  # the row's own counters

    @property
    def clips_per_s(self) -> float | None:
        return self.items_per_s * self.clips_per_item if self.items_per_s else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown record fields: {sorted(unknown)}")
        return cls(**{**data, "case": Case(**data["case"])})


@dataclass
class Results:
    """A results file: ``meta`` (suite, argv, settings, machine, versions, videos, notes,
    skipped contenders, duration) and the records."""

    meta: dict[str, Any]
    records: list[Record]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "meta": self.meta,
                "records": [r.to_json() for r in self.records]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Results:
        if data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} results file")
        return cls(data["meta"], [Record.from_json(r) for r in data["records"]])

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1, default=str) + "\n")
        return path


def load(path: Path) -> Results:
    """A results file of either format: this one, or a legacy bench/run.py or
    bench/remote.py JSON (converted by bench/legacy.py)."""
    data = json.loads(path.read_text())
    if data.get("format") == FORMAT:
        return Results.from_json(data)
    from legacy import convert

    return convert(data)
