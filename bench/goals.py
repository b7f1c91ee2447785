"""Goals as data (a Goal: a ratio between two picked records, or a record's figure against
a bound) and their evaluation on a results file: each Goal's records picked (a fluxon row,
or the best exact peer), their ratio, and whether it meets the goal."""

from __future__ import annotations

from dataclasses import dataclass

from record import Record

BEST_PEER = "best exact peer"          # the fastest peer row whose frames passed the check
FEWEST_BYTES_PEER = "fewest-bytes peer"  # the peer row fetching the fewest bytes (any)
FASTEST_PEER = "fastest peer"          # the fastest peer row, its frames flagged or not


@dataclass(frozen=True)
class Pick:
    """One record of a results file: a fluxon row (``cache``, ``store``, ``access``), or
    BEST_PEER / FEWEST_BYTES_PEER / FASTEST_PEER of the workload. ``latency_ms`` None: the
    suite's goal latency."""

    workload: str
    family: str
    cache: str = ""
    store: str | None = None
    access: str | None = None
    latency_ms: float | None = None
    threads: int | None = None  # None: any


@dataclass(frozen=True)
class Goal:
    """A ratio the report states: ``top``'s ``figure`` ÷ ``bottom``'s ``bottom_figure``
    (bottom None: ``top``'s own ``bottom_figure``, or with no bottom_figure the figure
    itself), met when >= ``at_least`` / <= ``at_most`` (neither: context only).
    ``per_video``: evaluated for each video of per-video records."""

    text: str
    top: Pick
    bottom: Pick | None = None
    figure: str = "clips_per_s"
    bottom_figure: str | None = None
    at_least: float | None = None
    at_most: float | None = None
    per_video: bool = False
    first_video_only: bool = False

    def threshold(self) -> str:
        if self.at_least is not None:
            return f"≥ {self.at_least:g}×" if self.bottom or self.bottom_figure else \
                f"≥ {self.at_least:g}"
        if self.at_most is not None:
            return f"≤ {self.at_most:g}×" if self.bottom or self.bottom_figure else \
                f"≤ {self.at_most:g}"
        return "(context)"

LOWER_IS_BETTER = ("item_ms_p50", "item_ms_p95", "mib_per_item", "requests_per_item",
                   "round_trips_p50", "peak_rss_mib")


@dataclass
class Outcome:
    """One goal on one video (or the whole workload): the records compared, the ratio."""

    goal: Goal
    video: str | None
    top: Record | None
    bottom: Record | None
    ratio: float | None
    rounds: tuple[float, float] | None  # min and max of the per-round ratios

    @property
    def status(self) -> str:
        if self.ratio is None:
            return "n/a"
        if self.top is not None and not self.top.ok and self.top.case.fluxon:
            return "n/a (fluxon flagged)"
        g = self.goal
        if g.at_least is not None:
            return "met" if self.ratio >= g.at_least else "missed"
        if g.at_most is not None:
            return "met" if self.ratio <= g.at_most else "missed"
        return "(context)"


def value(record: Record | None, figure: str) -> float | None:
    """A record's figure: a field, or one of its counts."""
    if record is None:
        return None
    got = getattr(record, figure, None)
    got = record.counts.get(figure) if got is None else got
    return float(got) if isinstance(got, (int, float)) else None


def goal_latency(records: list[Record], wanted: float) -> float:
    """The latency the goals are read at: the suite's, else the highest measured."""
    lats = {r.case.latency_ms for r in records if r.case.store != "local"}
    return wanted if wanted in lats or not lats else max(lats)


def pick(records: list[Record], p: Pick, latency: float, figure: str,
         video: str | None = None) -> Record | None:
    """The record ``p`` names at ``latency`` (local-store records stand at any latency: the
    file has none), of ``video`` when given; sweep records never count."""
    lat = latency if p.latency_ms is None else p.latency_ms
    rows = [r for r in records if r.case.workload == p.workload and r.case.piece_size is None
            and (r.case.store == "local" or r.case.latency_ms == lat)
            and (video is None or r.video == video)
            and (p.threads is None or r.case.threads == p.threads)]
    if p.family in (BEST_PEER, FEWEST_BYTES_PEER, FASTEST_PEER):
        exact = p.family == BEST_PEER
        peers = [r for r in rows if not r.case.fluxon and value(r, figure)
                 and r.case.access != "download-union" and (r.ok or not exact)]
        lower = figure in LOWER_IS_BETTER
        chosen = (min if lower else max)(peers, key=lambda r: value(r, figure) or 0,
                                         default=None)
        return chosen
    for r in rows:
        store_ok = (r.case.store == p.store if p.store is not None else
                    (r.case.store == "local") == (not p.cache) if p.family == "fluxon" else True)
        if (r.case.family == p.family and r.case.cache == p.cache and store_ok
                and (p.access is None or r.case.access == p.access)
                and (p.threads is None or r.case.threads == p.threads)):
            return r
    return None


def evaluate(goals: tuple[Goal, ...], records: list[Record], wanted_latency: float,
             videos: list[str]) -> list[Outcome]:
    """Every goal on the records (per video where the goal says so and records have one)."""
    latency = goal_latency(records, wanted_latency)
    out = []
    for g in goals:
        # The dataset's order, else the records' (a stable sort keeps the latter).
        with_video = sorted(dict.fromkeys(r.video for r in records if r.video and r.case.workload
                                          == g.top.workload),
                            key=lambda v: videos.index(v) if v in videos else len(videos))
        for video in (with_video[:1] if g.first_video_only else with_video) \
                if g.per_video and with_video else [None]:
            top = pick(records, g.top, latency, g.figure, video)
            bottom_figure = g.bottom_figure or g.figure
            bottom = pick(records, g.bottom, latency, bottom_figure, video) if g.bottom else top
            if top is None:
                continue
            if g.bottom and bottom is None:  # e.g. no peer's frames passed the check
                out.append(Outcome(g, video, top, None, None, None))
                continue
            a = value(top, g.figure)
            b = value(bottom, bottom_figure) if (g.bottom or g.bottom_figure) else 1.0
            out.append(Outcome(g, video, top, bottom, a / b if a is not None and b else None,
                               round_range(top, bottom) if g.bottom and g.figure
                               == "clips_per_s" else None))
    return out


def round_range(top: Record, bottom: Record | None) -> tuple[float, float] | None:
    """Min and max over rounds of top's rate ÷ bottom's: only where rounds ran interleaved
    (the round groups; a per-video group's repeats of two rows ran apart)."""
    if bottom is None or top is bottom or "rounds" not in top.settings:
        return None
    pairs = [a / b for a, b in zip(top.items_per_s_rounds, bottom.items_per_s_rounds) if b]
    scale = top.clips_per_item / bottom.clips_per_item
    return (min(pairs) * scale, max(pairs) * scale) if len(pairs) > 1 else None
