"""remote.md/.json/.png (and remote-s3.md/.json with --store s3) of bench/remote.py: one
summary per (workload, latency, row) over its rounds, the tables, and the targets."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from pathlib import Path

from harness import (DASH, KiB, MiB, Target, best, count, fill, grouped, kinds_of, listing,
                     met, num, pct, stat, summarise, table, times, write_outputs)

# The condition the goals are stated for.
GOAL_LATENCY_MS, GOAL_BANDWIDTH_MBPS = 10.0, 50
CACHE_RANK = {"cold": 0, "cold+lookahead": 1, "warm-kv": 2, "warm-kv+shared": 3,
              "warm-reader": 4}
S3_WORKLOADS = {"clips": "short videos (4-7.5 s), one random clip per video",
                "long": "long videos (2 min, 720p and 1080p, 45-90 MB), random clips"}
# Round trips before the first frame a cold read may take, by container layout.
COLD_ROUND_TRIPS = {"mkv": 3, "mp4 faststart": 2, "mp4 moov-at-end": 3}


def label(row: dict) -> str:
    fam, block = row["family"], row.get("block_size")
    if fam == "fluxon":
        return ("fluxon local file (reference: decode only, no store)"
                if row["cache"] == "local file" else f"fluxon {row['cache']}")
    if row["mode"] == "download":
        return f"{fam} · download (1 GET)" + (", K clips in one pass (union)"
                                              if row.get("union") else "")
    if fam == "decord":
        return "decord · file object (reads it whole)"
    tool = {"s3fs": "s3fs", "obstore": "obstore reader"}.get(row["mode"], "fsspec")
    size = f"{block // MiB} MiB" if block and block % MiB == 0 else f"{(block or 0) // KiB} KiB"
    seek = f" {row['seek_mode']}" if fam == "torchcodec" and row.get("seek_mode") else ""
    return f"{fam}{seek} · " + (f"{tool} {size}" if block else "fsspec 5 MiB (default)")


def key(row: dict) -> str:
    return json.dumps(row, sort_keys=True)


def summaries(passes: list[dict], batched_clips: int) -> list[dict]:
    """One summary per (workload, latency, row), over the row's passes of every round."""
    groups = grouped(passes, lambda p: (p["workload"], p["latency_ms"], key(p["row"])))
    out = []
    for (workload, latency, _), group in groups.items():
        s = summarise(group, batched_clips if workload == "batched" else 1,
                      "right" if workload == "metadata" else DASH)
        s.update(workload=workload, latency_ms=latency, label=label(s["row"]))
        if s["per_item"]:
            s["fluxon"] = {"paths": count(s["per_item"]).get("path", {}), "per_item": s["per_item"], "open_index_ms_p50": pct(
                [x.get("open_ms", 0) + x.get("index_ms", 0) for x in s["per_item"]], 0.5),
                **{f"{k}_per_item": stat(s, k, "mean") for k in (
                    "kv_round_trips", "stat_requests", "remote_reads", "frames_decoded")}}
        out.append(s)
    return out


def ordered(rows: list[dict], workload: str) -> list[dict]:
    return sorted((s for s in rows if s["workload"] == workload),
                  key=lambda s: (s["latency_ms"], s["row"]["family"] == "fluxon",
                                 CACHE_RANK.get(s["row"].get("cache", ""), 0), s["label"]))


# ---- tables ----

def f(x: float | None, digits: int = 2) -> str:
    return num(x, digits, grouped=True)


def name(s: dict) -> str:
    text = s["label"]
    if s["row"]["family"] == "fluxon" and s["workload"] in ("batched", "metadata"):
        how = "read_many" if s["workload"] == "batched" else "video_metadata"
        text = text.replace("fluxon ", f"fluxon {how} ", 1)
    return ("" if s["ok"] else "⚠ ") + text


def check_text(s: dict) -> str:
    text = s["verdict"]
    if s.get("fluxon", {}).get("paths"):
        text += " · " + listing(s["fluxon"]["paths"].items())
    if s.get("fallbacks"):
        text += f" · {s['fallbacks']} re-decode(s) from the first keyframe"
    return text.replace("|", "/")


def fx(s: dict, key: str, digits: int) -> str:
    return f(s["fluxon"][key], digits) if s.get("fluxon") else DASH


def rate_cells(s: dict, per: str) -> list[str]:
    """L, row, clips/s (range), p50, p99, MiB and requests per clip or item, connections."""
    return [f"{s['latency_ms']:g}", name(s),
            f"{f(s['clips_per_s'])} ({f(s['clips_per_s_min'])}–{f(s['clips_per_s_max'])})",
            f(s["item_ms_p50"], 0), f(s["item_ms_p99"], 0), f(s[f"mib_per_{per}"]),
            f(s[f"requests_per_{per}"], 1), f(s["connections_used"], 0)]


def clips_table(rows: list[dict], workload: str = "clips") -> str:
    return table(["L ms", "row", "clips/s (median, range)", "p50 ms", "p99 ms", "MiB/clip",
                  "req/clip", "conns", "open+index p50 ms", "KV RT/clip", "frames"],
                 [[*rate_cells(s, "clip"), fx(s, "open_index_ms_p50", 1),
                   fx(s, "kv_round_trips_per_item", 1), check_text(s)]
                  for s in ordered(rows, workload)])


def batched_table(rows: list[dict]) -> str:
    return table(["L ms", "row", "clips/s (median, range)", "ms/item p50", "p99", "MiB/item",
                  "req/item", "conns", "frames decoded/item", "frames"],
                 [[*rate_cells(s, "item"), f(s.get("fluxon", {}).get("frames_decoded_per_item"),
                                             0), check_text(s)]
                  for s in ordered(rows, "batched")])


def metadata_table(rows: list[dict]) -> str:
    return table(["L ms", "row", "ms/video p50 (range of round medians)", "p99", "req/video",
                  "KiB/video", "KV RT/video", "conns", "frame count, fps, duration"],
                 [[f"{s['latency_ms']:g}", name(s), f"{f(s['item_ms_p50'], 1)} "
                   f"({f(s['pass_median_ms_min'], 1)}–{f(s['pass_median_ms_max'], 1)})",
                   f(s["item_ms_p99"], 1), f(s["requests_per_item"], 2),
                   f((s["mib_per_item"] or 0) * 1024, 0), fx(s, "kv_round_trips_per_item", 2),
                   f(s["connections_used"], 0), check_text(s)] for s in ordered(rows, "metadata")])


def dataset_table(results: dict) -> str:
    """One row per kind of video (codec, size, layout) with the ranges over its videos."""
    kinds = kinds_of({**v, "layout": v["layout"] + (" (long)" if "_long_" in v["video"] else "")}
                     for v in results["videos"])

    def span(vs: list[dict], k: str, scale: float, digits: int) -> str:
        return f"{min(v[k] for v in vs) / scale:.{digits}f}–{max(v[k] for v in vs) / scale:.{digits}f}"
    return table(["kind", "videos", "frames", "GOP", "file MiB", "container KiB"],
                 [[kind, str(len(vs)), span(vs, "frames", 1, 0),
                   "/".join(sorted({str(v["gop"]) for v in vs})), span(vs, "file_bytes", MiB, 2),
                   span(vs, "container_bytes", KiB, 0)] for kind, vs in kinds.items()])


def conditions(results: dict) -> dict[str, object]:
    c = results["conditions"]
    m, store, wl = c["machine"], c["store"], c["workload"]
    bw = store["bandwidth_mbps_per_connection"]
    notes = [f"- {n}" for n in results.get("notes", [])]
    notes += [f"- {family} skipped: {why}" for family, why in results.get("skipped", {}).items()]
    return dict(
        command=results["command"], generated=results["generated"],
        duration=f"{results['duration_s']:.0f}", git=m["git"],
        latencies=", ".join(f"{x:g}" for x in store["latencies_ms"]),
        bandwidth=(f"**{bw:g} MB/s per connection** (10^6 B/s, server -> client)" if bw
                   else "no bandwidth cap"),
        piece_kib=(store.get("piece_size") or 0) // KiB, clip=wl["clip"],
        rounds=", ".join(f"{v} at {k} ms" for k, v in wl["rounds"].items()),
        threads=wl["threads"], k=wl["batched_clips"], frames_asked=wl["batched_clips"] * 16,
        cpu=m["cpu"], cores=m["cores"], memory=m["memory_gib"], os=m["os"],
        load=", ".join(f"{k}: {v[0]:.2f}" for k, v in m["load_average"]),
        versions=listing(c["versions"].items()), dataset_table=dataset_table(results),
        tail="".join("\n" + line for line in notes))


# ---- targets ----

class Run:
    """What every target reads: the summaries and passes, the target latency and condition."""

    def __init__(self, results: dict, rows: list[dict]) -> None:
        store = results["conditions"]["store"]
        self.results, self.rows, self.passes = results, rows, results["passes"]
        self.lats, self.bw = store["latencies_ms"], store["bandwidth_mbps_per_connection"]
        self.lt = GOAL_LATENCY_MS if GOAL_LATENCY_MS in self.lats else max(self.lats)
        self.cond = (f"L = {self.lt:g} ms, {self.bw:g} MB/s per connection" if self.bw
                     else f"L = {self.lt:g} ms, no cap")
        if self.lt != GOAL_LATENCY_MS or self.bw != GOAL_BANDWIDTH_MBPS:
            self.cond += (f" (the goals' condition: L = {GOAL_LATENCY_MS:g} ms, "
                          f"{GOAL_BANDWIDTH_MBPS} MB/s)")

    def fluxon(self, workload: str, cache: str, latency: float | None = None) -> dict | None:
        return next((s for s in self.rows if s["workload"] == workload and s["latency_ms"] ==
                     (self.lt if latency is None else latency) and s["row"]["family"] == "fluxon"
                     and s["row"].get("cache") == cache), None)

    def peers(self, workload: str, latency: float | None = None, union: bool = False) -> list:
        """Peer rows with a rate; the union (batching) row only when asked for."""
        return [s for s in self.rows if s["workload"] == workload and s["latency_ms"] ==
                (self.lt if latency is None else latency) and s["row"]["family"] != "fluxon"
                and s["clips_per_s"] and bool(s["row"].get("union")) == union]

    def passes_of(self, s: dict, workload: str | None = None) -> list[dict]:
        return [p for p in self.passes if p["workload"] == (workload or s["workload"])
                and p["latency_ms"] == s["latency_ms"] and key(p["row"]) == key(s["row"])]

    def round_ratios(self, flux: dict | None, peer: dict | None) -> str:
        """" (rounds a–b)": min and max over rounds of fluxon's clips/s ÷ the peer's."""
        if not (flux and peer):
            return ""
        f, q = ({p["round"]: len(p["item_ms"]) / sum(p["item_ms"])
                 for p in self.passes_of(s) if p.get("item_ms")} for s in (flux, peer))
        ratios = [f[r] / q[r] for r in f if r in q]
        return f" (rounds {min(ratios):.2f}–{max(ratios):.2f})" if ratios else ""


def rate(s: dict | None) -> str:
    return f"{s['clips_per_s']:.2f} clips/s" if s and s["clips_per_s"] else DASH


def named_rate(s: dict | None, missing: str = "no exact peer") -> str:
    return f"{s['label']} {s['clips_per_s']:.2f} clips/s" if s else missing


def ratio(a: dict | None, b: dict | None, k: str = "clips_per_s") -> float | None:
    return a[k] / b[k] if a and b and a.get(k) and b.get(k) else None


# Fluxon rows against the best exact peer: (workload, fluxon cache, goal, target text).
VERSUS_BEST_PEER = [
    *((workload, cache, goal, f"random clip {what}per item: fluxon {{cache}} ÷ best exact peer")
      for workload, what in (("clips", ""), ("long", "of a long video "))
      for cache, goal in (("warm-kv", 3.0), ("warm-kv+shared", 3.0), ("warm-reader", 3.0),
                          ("cold", 2.5), ("cold+lookahead", 2.5))),
    *(("batched", cache, 5.0, "batched K clips of one video: fluxon read_many {cache} ÷ best "
                              "exact peer one by one") for cache in ("warm-kv", "cold"))]


def versus_best(run: Run, workload: str, latency: float | None = None) -> list[Target]:
    """Every VERSUS_BEST_PEER row of ``workload``: fluxon ÷ the best exact peer."""
    out = []
    lat = run.lt if latency is None else latency
    top = best(run.peers(workload, lat))
    for _, cache, goal, text in (t for t in VERSUS_BEST_PEER if t[0] == workload):
        flux = run.fluxon(workload, cache, lat)
        if workload in ("clips", "long") and not flux:
            continue
        r = ratio(flux, top)
        out.append(Target(target=text.format(cache=cache), goal=f"≥ {goal:g}×",
                          condition=run.cond if latency is None else (
                              f"L = {lat:g} ms, {run.bw:g} MB/s" if run.bw else f"L = {lat:g} ms"),
                          fluxon=rate(flux), other=named_rate(top),
                          ratio=times(r) + run.round_ratios(flux, top),
                          status=met(r, goal) if flux and flux["ok"] else "n/a (fluxon flagged)"))
    return out


def clip_context(run: Run, workload: str = "clips") -> list[Target]:
    """What bounds the clip figures: a flagged faster peer, and fluxon's decoder alone."""
    peers = run.peers(workload)
    top, fastest = best(peers), best(peers, exact=False)
    warm, local = run.fluxon(workload, "warm-kv"), run.fluxon(workload, "local file")
    where = "" if workload == "clips" else " (long videos)"
    out = []
    if fastest and warm and not fastest["ok"]:
        bad = {v for p in run.passes_of(fastest, workload) for v in p.get("flagged_videos", [])}

        def pooled(s: dict) -> tuple[float, int]:
            ms = [t for p in run.passes_of(s, workload)
                  for t, v in zip(p["item_ms"], p.get("item_videos", [])) if v not in bad]
            return (len(ms) / (sum(ms) / 1e3) if ms else 0.0), len(ms)
        (mine, _), (theirs, n) = pooled(warm), pooled(fastest)
        if mine and theirs:
            out.append(Target(
                target="context: fluxon warm-kv ÷ the fastest peer, on the videos where that "
                       f"peer's frames were right{where}", condition=run.cond,
                fluxon=f"{mine:.2f} clips/s",
                other=f"⚠ {fastest['label']} {theirs:.2f} clips/s ({n} items)",
                ratio=times(mine / theirs)))
    if local and local["clips_per_s"] and top:
        out.append(Target(
            target=f"context: fluxon's decoder on the local files ÷ best exact peer{where} (the "
                   "ceiling of the rows above if the store cost nothing)", condition=run.cond,
            fluxon=f"local file {local['clips_per_s']:.2f} clips/s", other=named_rate(top),
            ratio=times(ratio(local, top))))
    ahead = run.fluxon(workload, "cold+lookahead")
    if ahead and warm and ahead["clips_per_s"] and warm["clips_per_s"]:
        # Issue 38's goal: cold reads as fast as warm ones, the next item fetched ahead.
        out.append(Target(
            target=f"fluxon cold+lookahead ÷ fluxon warm-kv{where}", condition=run.cond,
            fluxon=rate(ahead), other=f"warm-kv {warm['clips_per_s']:.2f} clips/s",
            ratio=times(ratio(ahead, warm)) + run.round_ratios(ahead, warm), goal="≥ 0.9×",
            status=met(ratio(ahead, warm), 0.9)))
    for cache in ("warm-kv", "warm-kv+shared"):
        flux = run.fluxon(workload, cache)
        if not (local and local["clips_per_s"] and flux and flux["clips_per_s"]):
            continue
        # The short-clip goal: the store costs at most 10% of fluxon's own local decode.
        goal = dict(goal="≥ 0.9×", status=met(ratio(flux, local), 0.9)) if (
            workload == "clips") else dict(status="(context: 1 = the store costs nothing)")
        out.append(Target(
            target=f"fluxon {cache} ÷ fluxon's decoder on the local files{where}",
            condition=run.cond, fluxon=rate(flux),
            other=f"local file {local['clips_per_s']:.2f} clips/s", ratio=times(ratio(flux, local))
            + run.round_ratios(flux, local), **goal))
    return out


def cold_bytes(run: Run, cold: dict) -> tuple[str, str]:
    """fluxon cold remote bytes ÷ needed per container layout, and where they go: the
    piece-rounded GOP spans, plus what the cold scan reads (pooled over rounds)."""
    layout = {v["video"]: v["layout"] for v in run.results["videos"]}
    pairs = []
    for p in run.passes_of(cold, "clips"):
        plan = {i["video"]: i for i in run.results["plans"]["clips"][p["round"]]}
        pairs += [(x, plan[x["video"]]) for x in p["extra"].get("per_item", [])
                  if plan.get(x["video"], {}).get("needed_bytes")]
    got: dict[str, list[float]] = {}
    for x, item in pairs:
        pair = got.setdefault(layout.get(x["video"], "?"), [0.0, 0.0])
        pair[0], pair[1] = pair[0] + x["remote_bytes"], pair[1] + item["needed_bytes"]
    by_layout = ", ".join(f"{k} {a / b:.2f}×" for k, (a, b) in sorted(got.items()) if b)
    need = sum(i["needed_bytes"] for _, i in pairs)
    if not need:
        return by_layout, ""
    span, opened = (sum(i[k] for _, i in pairs) / need
                    for k in ("span_piece_bytes", "open_model_bytes"))
    measured = sum(x["remote_bytes"] for x, _ in pairs) / need
    return by_layout, (f"÷ needed: the GOP spans in whole pieces {span:.2f}×; plus the pieces "
                       "the cold scan reads (MP4: the container bytes before the first and "
                       "after the last packet; MKV/WebM/AVI: the whole file) "
                       f"{opened:.2f}×; measured {measured:.2f}× (the rest: pages past the spans)")


def byte_targets(run: Run) -> list[Target]:
    """Remote bytes of a cold clip pass against what decoding needs and against the peers."""
    flux, needed = run.fluxon("clips", "cold"), run.results.get("needed_bytes", {}).get("clips")
    if not (flux and needed and flux["clips"]):
        return []
    rounds = sorted({p["round"] for p in run.passes_of(flux)})
    need = sum(needed[r] for r in rounds) / flux["clips"] / MiB
    by_layout, model = cold_bytes(run, flux)
    cond, mine = f"clips, {run.cond}", f"{flux['mib_per_clip']:.2f} MiB/clip"
    out = [Target(target="remote bytes: fluxon cold ÷ needed (GOP spans touched + container "
                         "index)", condition=cond, goal="≤ 1.25×",
                  fluxon=mine + (f" (by layout: {by_layout})" if by_layout else ""),
                  other=f"needed {need:.2f} MiB/clip", ratio=times(flux["mib_per_clip"] / need),
                  status=met(flux["mib_per_clip"] / need, 1.25, lower=True))]
    if model:
        out.append(Target(target="context: where fluxon's cold bytes go (model from the "
                                 "ffprobe packet table, piece size)", condition=cond,
                          fluxon=model))
    fewest = best(run.peers("clips"), "mib_per_clip", lowest=True, exact=False)
    if fewest:
        r = flux["mib_per_clip"] / fewest["mib_per_clip"]
        out.append(Target(target="remote bytes: fluxon cold ÷ the peer fetching the fewest",
                          condition=cond, goal="< 1× (fewer than every peer)", fluxon=mine,
                          other=f"{fewest['label']} {fewest['mib_per_clip']:.2f} MiB/clip",
                          ratio=times(r), status="met" if r < 1 else "missed"))
    return out


def batched_targets(run: Run) -> list[Target]:
    """K clips of one video per item, at no latency and at the target latency."""
    out = []
    for lat in sorted({0.0, run.lt} & set(run.lats)):
        out += versus_best(run, "batched", lat)
        union, flux = best(run.peers("batched", lat, union=True)), run.fluxon("batched",
                                                                             "warm-kv", lat)
        if union and flux and flux["clips_per_s"]:
            out.append(Target(
                target="context: fluxon read_many warm-kv ÷ PyAV decoding the K clips' union "
                       "in one pass", condition=f"L = {lat:g} ms", fluxon=rate(flux),
                other=named_rate(union), ratio=times(ratio(flux, union)),
                status="(context: what batching alone gives a peer)"))
    return out


def metadata_targets(run: Run) -> list[Target]:
    """Time to frame count, fps and duration: the fastest exact peer's open ÷ fluxon's."""
    fastest = best((s for s in run.rows if s["workload"] == "metadata"
                    and s["latency_ms"] == run.lt and s["row"]["family"] != "fluxon"),
                   "item_ms_p50", lowest=True)
    out = []
    for cache in ("warm-kv", "warm-kv+shared", "cold"):
        flux = run.fluxon("metadata", cache)
        if not flux or not flux["item_ms_p50"]:
            continue
        r = fastest["item_ms_p50"] / flux["item_ms_p50"] if fastest else None
        # The library's count: the stat and the index read alongside are one round trip.
        trips = statistics.median(x["open_round_trips"] for x in flux["per_item"])
        warm = cache.startswith("warm")
        trips_status = "; 1 round trip: met" if trips <= 1.0 else f"; {trips:g} round trips, goal 1"
        out.append(Target(
            target=f"metadata only: fastest exact peer's open ÷ fluxon {cache} video_metadata "
                   "(p50 per video)", condition=run.cond, goal="≥ 10× (warm)" if warm else DASH,
            fluxon=f"{flux['item_ms_p50']:.1f} ms; {flux['requests_per_item']:.2f} agent req + "
                   f"{flux['fluxon']['kv_round_trips_per_item']:.2f} KV round trips per video; "
                   f"{trips:g} round trip(s) one after another (p50)",
            other=(f"{fastest['label']} {fastest['item_ms_p50']:.1f} ms, "
                   f"{fastest['requests_per_item']:.2f} req" if fastest else DASH),
            ratio=times(r), status=met(r, 10.0) + trips_status if warm else "(context)"))
    return out


def round_trip_targets(run: Run) -> list[Target]:
    """Round trips before the first frame, as the library counts them
    (FluxonFsVideoReadStats.open_round_trips + first_frame_waits), per layout."""
    layout = {v["video"]: v["layout"] for v in run.results["videos"]}
    out = []
    for cache in ("warm-kv", "warm-kv+shared", "cold"):
        flux = run.fluxon("clips", cache)
        if not flux or "fluxon" not in flux:
            continue
        by_layout = grouped(flux["per_item"], lambda x: layout.get(x["video"], "?"),
                            lambda x: x["open_round_trips"] + x["first_frame_waits"])
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
            other=f"{flux['fluxon']['stat_requests_per_item']:.1f} agent stats, "
                  f"{flux['requests_per_item']:.1f} agent req, "
                  f"{flux['fluxon']['kv_round_trips_per_item']:.1f} KV round trips per item in all",
            status="met" if ok else "missed"))
    return out


NOT_HERE = Target(target="local files ≥ 1.5× best exact peer, ≤ 0.8× decode floor; read_many "
                         "peak RSS", condition=DASH, fluxon=DASH,
                  status="not measured here: bench/run.py, bench/read_many_memory.py")


def targets(results: dict, rows: list[dict]) -> list[Target]:
    run = Run(results, rows)
    return [*versus_best(run, "clips"), *versus_best(run, "long"), *clip_context(run),
            *clip_context(run, "long"),
            *byte_targets(run),
            *batched_targets(run), *metadata_targets(run), *round_trip_targets(run), NOT_HERE]


# ---- the object-store report ----

def round_trips(s: dict) -> float | None:
    """Round trips per clip before its frames: fluxon's own count (open_round_trips +
    first_frame_waits); a peer's origin requests, which its one reader issues in turn."""
    if s["row"]["family"] != "fluxon":
        return s["requests_per_clip"]
    per_item = s.get("fluxon", {}).get("per_item") or []
    return (statistics.mean(x["open_round_trips"] + x["first_frame_waits"] for x in per_item)
            if per_item else None)


def best_exact_peer(rows: list[dict]) -> dict | None:
    return best(s for s in rows if s["row"]["family"] != "fluxon")


def s3_sections(rows: list[dict]) -> tuple[list[str], list[str]]:
    """The headline ratios and, per workload, its table against the best exact peer."""
    heads, sections = [], []
    for workload, what in S3_WORKLOADS.items():
        table_rows = []
        for lat in sorted({s["latency_ms"] for s in rows if s["workload"] == workload}):
            group = [s for s in ordered(rows, workload) if s["latency_ms"] == lat]
            top = best_exact_peer(group)
            table_rows += [[f"{lat:g}", name(s), f"{f(s['clips_per_s'])} ({f(s['clips_per_s_min'])}"
                            f"–{f(s['clips_per_s_max'])})", "best exact peer" if s is top else
                            f"{times(ratio(s, top))} clips/s, "
                            f"{times(ratio(s, top, 'mib_per_clip'))} bytes",
                            f(s["requests_per_clip"], 1), f(s["mib_per_clip"]),
                            f(round_trips(s), 1), f(s["connections_used"], 0), check_text(s)]
                           for s in group]
            if not top:
                continue
            cold = next((s for s in group if s["row"].get("cache") == "cold"), None)
            heads.append(f"- {workload}, L = {lat:g} ms: fluxon ÷ {top['label']} "
                         f"({f(top['clips_per_s'])} clips/s): " + ", ".join(
                             f"{s['row']['cache']} {times(ratio(s, top))}" for s in group
                             if s["row"]["family"] == "fluxon"
                             and s["row"]["cache"] != "local file")
                         + (f"; cold origin requests {f(cold['requests_per_clip'], 1)}/clip vs "
                            f"{f(top['requests_per_clip'], 1)}, bytes "
                            f"{times(ratio(cold, top, 'mib_per_clip'))}" if cold else ""))
        if table_rows:
            sections += [f"## {workload}: {what}", "", table(
                ["L ms", "row", "clips/s (median, range)", "÷ best exact peer", "origin req/clip",
                 "origin MiB/clip", "round trips/clip", "conns", "frames"], table_rows), "",
                "Detail:", "", clips_table(rows, workload), ""]
    return heads, sections


def write(results: dict, out: Path) -> list[Path]:
    import charts

    rows = summaries(results["passes"], results["conditions"]["workload"]["batched_clips"])
    kept = [{k: v for k, v in s.items() if k != "per_item"} for s in rows]
    if results["conditions"]["store"].get("origin") == "s3":
        heads, sections = s3_sections(rows)
        wl = results["conditions"]["workload"]
        md = fill("remote-s3", **conditions(results), blocks=wl.get("block_sizes", ""),
                  long_videos=wl.get("long_videos", 0), long_items=wl.get("long_items", 0),
                  headlines="\n".join(heads), sections="\n".join(sections))
        return write_outputs(out, "remote-s3", {**results, "summaries": kept}, md)
    target_rows = targets(results, rows)
    items = [i for plan in results.get("plans", {}).get("batched", []) for i in plan]
    distinct = (sum(len({x for c in i["clips"] for x in c}) for i in items) / len(items)
                if items else 0)
    md = fill("remote", **conditions(results), distinct=f"{distinct:.0f}",
              targets_table=table(["target", "condition", "fluxon", "best peer / bound", "ratio",
                                   "goal", "status"], [[t.target, t.condition, t.fluxon, t.other,
                                                        t.ratio, t.goal, t.status]
                                                       for t in target_rows]),
              clips_table=clips_table(rows), batched_table=batched_table(rows),
              long_section="\n".join([
                  "## Random clip of a long video per item", "",
                  f"{S3_WORKLOADS['long']}: each long video "
                  f"{results['conditions']['workload'].get('long_items', 0)} times per round, "
                  "shuffled; a new open per item.", "", clips_table(rows, "long"), ""])
              if any(s["workload"] == "long" for s in rows) else "",
              metadata_table=metadata_table(rows))
    results = {**results, "summaries": kept, "targets": [asdict(t) for t in target_rows]}
    return [*write_outputs(out, "remote", results, md),
            charts.remote([s for w in ("clips", "batched", "metadata")
                           for s in ordered(rows, w)], out)]
