"""The DataLoader benchmark's result records: one timed epoch, and a row over its epochs."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Epoch:
    """One epoch with fresh workers: wall time, start-up, failures, other load, checks."""

    items: int
    seconds: float
    first_batch_s: float | None
    workers_up_s: float | None
    errors: int
    first_error: str | None
    other_cpu_cores: float
    clips_per_s: float = field(init=False)
    fluxon_stats: dict | None = None
    check: dict | None = None
    redone: int = 0  # epochs thrown away first: other work loaded the machine

    def __post_init__(self) -> None:
        self.clips_per_s = self.items / self.seconds


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass
class LoaderRow:
    """A contender, read order and cache state over its timed epochs (medians; counts and
    the frame check of the first epoch)."""

    row: str
    contender: str
    order: str
    cache: str
    items: int
    clips_per_s: float
    clips_per_s_min: float
    clips_per_s_max: float
    epoch_s: float
    first_batch_s: float | None
    workers_up_s: float | None
    errors: int
    other_cpu_cores: float
    redone: int
    first_error: str | None
    fluxon_stats: dict | None
    check: dict | None
    epochs: list[dict[str, Any]]

    @classmethod
    def of(cls, row: str, cache: str, epochs: list[Epoch]) -> LoaderRow:
        rates = [e.clips_per_s for e in epochs]
        first = epochs[0]
        return cls(
            row, row.split(" ")[0], row.split(" ", 1)[1], cache, first.items,
            statistics.median(rates), min(rates), max(rates),
            statistics.median(e.seconds for e in epochs),
            statistics.median(e.first_batch_s for e in epochs),
            _median([e.workers_up_s for e in epochs if e.workers_up_s is not None]),
            sum(e.errors for e in epochs), statistics.median(e.other_cpu_cores for e in epochs),
            sum(e.redone for e in epochs),
            next((e.first_error for e in epochs if e.first_error), None),
            first.fluxon_stats, first.check, [vars(e) for e in epochs])
