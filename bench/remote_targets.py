"""The remote benchmark's targets table: each stated goal as fluxon against the best peer.

Every target is a ``Target`` row; a ``Run`` holds what all of them read (the
summaries, the passes, the target latency). One function per kind of goal.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from remote_summary import row_key
from tables import MiB, times

# The condition the goals are stated for.
GOAL_LATENCY_MS, GOAL_BANDWIDTH_MBPS = 10.0, 50


@dataclass(kw_only=True)
class Target:
    target: str
    condition: str
    goal: str = "–"
    fluxon: str
    other: str = "–"
    ratio: str = "–"
    status: str = "(context)"


@dataclass
class Run:
    results: dict
    summaries: list[dict]
    lats: list[float] = field(init=False)
    bw: float = field(init=False)
    lt: float = field(init=False)
    cond: str = field(init=False)

    def __post_init__(self) -> None:
        store = self.results["conditions"]["store"]
        self.lats, self.bw = store["latencies_ms"], store["bandwidth_mbps_per_connection"]
        self.lt = GOAL_LATENCY_MS if GOAL_LATENCY_MS in self.lats else max(self.lats)
        self.cond = (f"L = {self.lt:g} ms, {self.bw:g} MB/s per connection" if self.bw
                     else f"L = {self.lt:g} ms, no cap")
        if self.lt != GOAL_LATENCY_MS or self.bw != GOAL_BANDWIDTH_MBPS:
            self.cond += (f" (the goals' condition: L = {GOAL_LATENCY_MS:g} ms, "
                          f"{GOAL_BANDWIDTH_MBPS} MB/s)")

    @property
    def passes(self) -> list[dict]:
        return self.results["passes"]

    def fluxon(self, workload: str, cache: str, latency: float | None = None) -> dict | None:
        latency = self.lt if latency is None else latency
        return next((s for s in self.summaries if s["workload"] == workload
                     and s["latency_ms"] == latency and s["row"]["family"] == "fluxon"
                     and s["row"].get("cache") == cache), None)

    def peers(self, workload: str, latency: float | None = None,
              union: bool = False) -> list[dict]:
        """Peer rows with a rate; the union (batching) row only when asked for."""
        latency = self.lt if latency is None else latency
        return [s for s in self.summaries if s["workload"] == workload
                and s["latency_ms"] == latency and s["row"]["family"] != "fluxon"
                and s["clips_per_s"] and bool(s["row"].get("union")) == union]

    def passes_of(self, summary: dict, workload: str | None = None) -> list[dict]:
        return [p for p in self.passes if p["workload"] == (workload or summary["workload"])
                and p["latency_ms"] == summary["latency_ms"]
                and row_key(p["row"]) == row_key(summary["row"])]


def best(rows: list[dict], exact: bool = True) -> dict | None:
    rows = [s for s in rows if s["ok"]] if exact else rows
    return max(rows, key=lambda s: s["clips_per_s"]) if rows else None


def met(x: float | None, goal: float, lower: bool = False) -> str:
    if x is None:
        return "n/a"
    return "met" if (x <= goal if lower else x >= goal) else "missed"


def rate(s: dict | None) -> str:
    return f"{s['clips_per_s']:.2f} clips/s" if s and s["clips_per_s"] else "–"


def named_rate(s: dict | None, missing: str = "no exact peer") -> str:
    return f"{s['label']} {s['clips_per_s']:.2f} clips/s" if s else missing


def round_ratios(run: Run, flux: dict, peer: dict) -> str:
    """" (rounds a–b)": min and max over rounds of fluxon's clips/s ÷ the peer's, same round."""
    def by_round(s: dict) -> dict[int, float]:
        return {p["round"]: len(p["item_ms"]) / sum(p["item_ms"])
                for p in run.passes_of(s) if p.get("item_ms")}
    f, q = by_round(flux), by_round(peer)
    ratios = [f[r] / q[r] for r in f if r in q]
    return f" (rounds {min(ratios):.2f}–{max(ratios):.2f})" if ratios else ""


def subset_rates(run: Run, flux: dict, peer: dict) -> tuple[float, float, int] | None:
    """clips/s of fluxon and of a flagged peer over the items of the videos the peer got
    right (pooled over rounds)."""
    bad = {v for p in run.passes_of(peer, "clips") for v in p.get("flagged_videos", [])}

    def pooled(s: dict) -> tuple[float, int]:
        ms = [t for p in run.passes_of(s, "clips")
              for t, v in zip(p["item_ms"], p.get("item_videos", [])) if v not in bad]
        return (len(ms) / (sum(ms) / 1e3) if ms else 0.0), len(ms)
    (f, _), (q, n) = pooled(flux), pooled(peer)
    return (f, q, n) if f and q else None


def cold_items(run: Run, cold: dict) -> list[tuple[dict, dict]]:
    """(fluxon cold per-item stats, the plan's item) pairs of the clips workload."""
    out = []
    for p in run.passes_of(cold, "clips"):
        plan = {i["video"]: i for i in run.results["plans"]["clips"][p["round"]]}
        out += [(x, plan[x["video"]]) for x in p.get("extra", {}).get("per_item", [])
                if plan.get(x["video"], {}).get("needed_bytes")]
    return out


def bytes_by_layout(run: Run, cold: dict) -> str:
    """fluxon cold remote bytes ÷ needed bytes, per container layout (pooled over rounds)."""
    layout = {v["video"]: v["layout"] for v in run.results["videos"]}
    got: dict[str, list[float]] = {}
    for x, item in cold_items(run, cold):
        pair = got.setdefault(layout.get(x["video"], "?"), [0.0, 0.0])
        pair[0] += x["remote_bytes"]
        pair[1] += item["needed_bytes"]
    return ", ".join(f"{k} {a / b:.2f}×" for k, (a, b) in sorted(got.items()) if b)


def bytes_model(run: Run, cold: dict) -> str:
    """Where fluxon's cold bytes go: the piece-rounded spans, plus what the scan reads."""
    pairs = [(x, i) for x, i in cold_items(run, cold) if "span_piece_bytes" in i]
    need = sum(i["needed_bytes"] for _, i in pairs)
    if not need:
        return ""
    span = sum(i["span_piece_bytes"] for _, i in pairs) / need
    opened = sum(i["open_model_bytes"] for _, i in pairs) / need
    got = sum(x["remote_bytes"] for x, _ in pairs) / need
    return (f"÷ needed: the GOP spans in whole pieces {span:.2f}×; plus the pieces the cold "
            f"scan reads (MP4: the container bytes before the first and after the last packet; "
            f"MKV/WebM/AVI: the whole file) {opened:.2f}×; measured {got:.2f}× (the rest: "
            f"pages past the spans)")


def clip_targets(run: Run) -> list[Target]:
    """A random clip per item: every fluxon cache state against the best exact peer."""
    top = best(run.peers("clips"))
    out = []
    for cache, goal in (("warm-kv", 3.0), ("warm-kv+shared", 3.0), ("warm-reader", 3.0),
                        ("cold", 2.5)):
        f = run.fluxon("clips", cache)
        if not f:
            continue
        ratio = f["clips_per_s"] / top["clips_per_s"] if top and f["clips_per_s"] else None
        out.append(Target(
            target=f"random clip per item: fluxon {cache} ÷ best exact peer",
            condition=run.cond, goal=f"≥ {goal:g}×", fluxon=rate(f), other=named_rate(top),
            ratio=times(ratio) + (round_ratios(run, f, top) if top else ""),
            status=met(ratio, goal) if f["ok"] else "n/a (fluxon flagged)"))
    return out


def clip_context(run: Run) -> list[Target]:
    """What bounds the clip figures: a flagged faster peer, and fluxon's decoder alone."""
    peers = run.peers("clips")
    top, fastest = best(peers), best(peers, exact=False)
    warm, local = run.fluxon("clips", "warm-kv"), run.fluxon("clips", "local file")
    out = []
    sub = subset_rates(run, warm, fastest) if fastest and warm and not fastest["ok"] else None
    if sub:
        f_rate, p_rate, n = sub
        out.append(Target(
            target="context: fluxon warm-kv ÷ the fastest peer, on the videos where that "
                   "peer's frames were right", condition=run.cond,
            fluxon=f"{f_rate:.2f} clips/s",
            other=f"⚠ {fastest['label']} {p_rate:.2f} clips/s ({n} items)",
            ratio=times(f_rate / p_rate)))
    if local and top and local["clips_per_s"]:
        out.append(Target(
            target="context: fluxon's decoder on the local files ÷ best exact peer (the "
                   "ceiling of the rows above if the store cost nothing)",
            condition=run.cond, fluxon=f"local file {local['clips_per_s']:.2f} clips/s",
            other=named_rate(top), ratio=times(local["clips_per_s"] / top["clips_per_s"])))
    if local and warm and local["clips_per_s"] and warm["clips_per_s"]:
        out.append(Target(
            target="context: fluxon warm-kv ÷ fluxon's decoder on the local files",
            condition=run.cond, fluxon=rate(warm),
            other=f"local file {local['clips_per_s']:.2f} clips/s",
            ratio=times(warm["clips_per_s"] / local["clips_per_s"]),
            status="(context: 1 = the store costs nothing; decode bound)"))
    return out


def byte_targets(run: Run) -> list[Target]:
    """Remote bytes of a cold clip pass against what decoding needs and against the peers."""
    f = run.fluxon("clips", "cold")
    needed = run.results.get("needed_bytes", {}).get("clips")
    if not (f and needed and f["clips"]):
        return []
    rounds = sorted({p["round"] for p in run.passes_of(f)})
    need_per_clip = sum(needed[r] for r in rounds) / f["clips"] / MiB
    ratio = f["mib_per_clip"] / need_per_clip
    layouts = bytes_by_layout(run, f)
    cond = f"clips, {run.cond}"
    out = [Target(target="remote bytes: fluxon cold ÷ needed (GOP spans touched + container "
                         "index)", condition=cond, goal="≤ 1.25×",
                  fluxon=f"{f['mib_per_clip']:.2f} MiB/clip"
                  + (f" (by layout: {layouts})" if layouts else ""),
                  other=f"needed {need_per_clip:.2f} MiB/clip", ratio=times(ratio),
                  status=met(ratio, 1.25, lower=True))]
    model = bytes_model(run, f)
    if model:
        out.append(Target(target="context: where fluxon's cold bytes go (model from the "
                                 "ffprobe packet table, piece size)", condition=cond,
                          fluxon=model))
    fewest = min((s for s in run.peers("clips") if s["mib_per_clip"] is not None),
                 key=lambda s: s["mib_per_clip"], default=None)
    if fewest:
        ratio = f["mib_per_clip"] / fewest["mib_per_clip"]
        out.append(Target(target="remote bytes: fluxon cold ÷ the peer fetching the fewest",
                          condition=cond, goal="< 1× (fewer than every peer)",
                          fluxon=f"{f['mib_per_clip']:.2f} MiB/clip",
                          other=f"{fewest['label']} {fewest['mib_per_clip']:.2f} MiB/clip",
                          ratio=times(ratio), status="met" if ratio < 1 else "missed"))
    return out


def batched_targets(run: Run) -> list[Target]:
    """K clips of one video per item, at no latency and at the target latency."""
    out = []
    for lat in sorted({0.0, run.lt} & set(run.lats)):
        top = best(run.peers("batched", lat))
        for cache in ("warm-kv", "cold"):
            f = run.fluxon("batched", cache, lat)
            ratio = f["clips_per_s"] / top["clips_per_s"] if f and top and f["clips_per_s"] \
                else None
            out.append(Target(
                target=f"batched K clips of one video: fluxon read_many {cache} ÷ best exact "
                       "peer one by one",
                condition=f"L = {lat:g} ms, {run.bw:g} MB/s" if run.bw else f"L = {lat:g} ms",
                goal="≥ 5×", fluxon=rate(f), other=named_rate(top),
                ratio=times(ratio) + (round_ratios(run, f, top) if f and top else ""),
                status=met(ratio, 5.0) if f and f["ok"] else "n/a (fluxon flagged)"))
        union = best(run.peers("batched", lat, union=True))
        f = run.fluxon("batched", "warm-kv", lat)
        if union and f and f["clips_per_s"]:
            out.append(Target(
                target="context: fluxon read_many warm-kv ÷ PyAV decoding the K clips' union "
                       "in one pass", condition=f"L = {lat:g} ms", fluxon=rate(f),
                other=named_rate(union), ratio=times(f["clips_per_s"] / union["clips_per_s"]),
                status="(context: what batching alone gives a peer)"))
    return out


def metadata_targets(run: Run) -> list[Target]:
    """Time to frame count, fps and duration: the fastest exact peer's open ÷ fluxon's."""
    peers = [s for s in run.summaries if s["workload"] == "metadata"
             and s["latency_ms"] == run.lt and s["row"]["family"] != "fluxon"
             and s["item_ms_p50"]]
    fastest = min((s for s in peers if s["ok"]), key=lambda s: s["item_ms_p50"], default=None)
    out = []
    for cache in ("warm-kv", "warm-kv+shared", "cold"):
        f = run.fluxon("metadata", cache)
        if not f or not f["item_ms_p50"]:
            continue
        ratio = fastest["item_ms_p50"] / f["item_ms_p50"] if fastest else None
        fx = f.get("fluxon", {})
        # The library's count: the stat and the index read alongside are one round trip.
        trips = statistics.median(x["open_round_trips"] for x in fx["per_item"])
        warm = cache.startswith("warm")
        trips_status = "; 1 round trip: met" if trips <= 1.0 else f"; {trips:g} round trips, goal 1"
        out.append(Target(
            target=f"metadata only: fastest exact peer's open ÷ fluxon {cache} video_metadata "
                   "(p50 per video)",
            condition=run.cond, goal="≥ 10× (warm)" if warm else "–",
            fluxon=f"{f['item_ms_p50']:.1f} ms; {f['requests_per_item']:.2f} agent req + "
                   f"{fx.get('kv_round_trips_per_item', 0):.2f} KV round trips per video; "
                   f"{trips:g} round trip(s) one after another (p50)",
            other=(f"{fastest['label']} {fastest['item_ms_p50']:.1f} ms, "
                   f"{fastest['requests_per_item']:.2f} req" if fastest else "–"),
            ratio=times(ratio), status=met(ratio, 10.0) + trips_status if warm else "(context)"))
    return out


# Round trips before the first frame a cold read may take, by container layout.
COLD_ROUND_TRIPS = {"mkv": 3, "mp4 faststart": 2, "mp4 moov-at-end": 3}


def round_trip_targets(run: Run) -> list[Target]:
    """Round trips before the first frame, as the library counts them
    (FluxonFsVideoReadStats.open_round_trips + first_frame_waits), per layout."""
    layout = {v["video"]: v["layout"] for v in run.results["videos"]}
    out = []
    for cache in ("warm-kv", "warm-kv+shared", "cold"):
        f = run.fluxon("clips", cache)
        if not f or "fluxon" not in f:
            continue
        by_layout: dict[str, list[float]] = {}
        for x in f["fluxon"]["per_item"]:
            by_layout.setdefault(layout.get(x["video"], "?"), []).append(
                x["open_round_trips"] + x["first_frame_waits"])
        warm = cache.startswith("warm")
        ok = all(statistics.median(v) <= (1 if warm else COLD_ROUND_TRIPS.get(k, 3))
                 for k, v in by_layout.items())
        out.append(Target(
            target=f"round trips before the first frame, fluxon {cache} (counted by the "
                   "library: open_round_trips + first_frame_waits, p50 per layout)",
            condition=f"clips, {run.cond}",
            goal="1" if warm else "≤ 2 faststart, ≤ 3 moov-at-end / MKV",
            fluxon="; ".join(f"{k} {statistics.median(v):g} (max {max(v):g})"
                             for k, v in sorted(by_layout.items())),
            other=f"{f['fluxon']['stat_requests_per_item']:.1f} agent stats, "
                  f"{f['requests_per_item']:.1f} agent req, "
                  f"{f['fluxon']['kv_round_trips_per_item']:.1f} KV round trips per item in all",
            status="met" if ok else "missed"))
    return out


NOT_HERE = Target(target="local files ≥ 1.5× best exact peer, ≤ 0.8× decode floor; read_many "
                         "peak RSS", condition="–", fluxon="–",
                  status="not measured here: bench/run.py, bench/read_many_memory.py")


def targets(results: dict, summaries: list[dict]) -> list[Target]:
    run = Run(results, summaries)
    return [*clip_targets(run), *clip_context(run), *byte_targets(run), *batched_targets(run),
            *metadata_targets(run), *round_trip_targets(run), NOT_HERE]
