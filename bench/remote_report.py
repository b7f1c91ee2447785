"""Summaries, the targets table, remote.md, remote.json and remote.png of bench/remote.py."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

KiB, MiB = 1 << 10, 1 << 20
WORKLOADS = {
    "clips": "random 16-frame clip (stride 4, 224x224) per item, one item per video, "
             "shuffled; a new open per item",
    "batched": "K clips of one video per item: fluxon read_many_numpy_with_stats (one call) vs "
               "a peer reading them one by one (one open per item)",
    "metadata": "time until frame count, fps and duration are known, per video",
}


def label(row: dict) -> str:
    fam = row["family"]
    if fam == "fluxon":
        if row["cache"] == "local file":
            return "fluxon local file (reference: decode only, no store)"
        return f"fluxon {row['cache']}"
    if row["mode"] == "download":
        if row.get("union"):
            return f"{fam} · download (1 GET), K clips in one pass (union)"
        return f"{fam} · download (1 GET)"
    block = row.get("block_size")
    where = f"fsspec {block // KiB} KiB" if block else "fsspec 5 MiB (default)"
    if fam == "decord":
        return "decord · file object (reads it whole)"
    if fam == "torchcodec" and row.get("seek_mode") == "approximate":
        return f"torchcodec approximate · {where}"
    if fam == "torchcodec" and row.get("seek_mode") == "exact":
        return f"torchcodec exact · {where}"
    return f"{fam} · {where}"


def _key(row: dict) -> str:
    return json.dumps(row, sort_keys=True)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _merge_checks(checks: list[dict]) -> dict | None:
    checks = [c for c in checks if c]
    if not checks:
        return None
    return {"exact_required": checks[0]["exact_required"],
            "frames": sum(c["frames"] for c in checks),
            "bit_exact": sum(c["bit_exact"] for c in checks),
            "worst_mean_abs_diff": max(c["worst_mean_abs_diff"] for c in checks),
            "wrong": [w for c in checks for w in c["wrong"]],
            "off": [o for c in checks for o in c["off"]]}


def _verdict(passes: list[dict], check: dict | None, workload: str) -> tuple[bool, str]:
    for p in passes:
        if p.get("fatal"):
            return False, f"FAILED: {p['fatal']}"
    errors = [e for p in passes for e in p.get("errors", [])]
    count = sum(p.get("error_count", 0) for p in passes)
    if count:
        return False, f"FAILED on {count} item(s): {errors[0]}"
    wrong_meta = [w for p in passes for w in p.get("metadata_wrong", [])]
    if wrong_meta:
        n = sum(p.get("metadata_wrong_count", 0) for p in passes)
        return False, f"WRONG on {n} item(s): {wrong_meta[0]}"
    if check is not None:
        if check["wrong"]:
            return False, f"WRONG ({len(check['wrong'])}+): {check['wrong'][0]}"
        if check["off"]:
            return False, f"OFF ({len(check['off'])}+): {check['off'][0]}"
        if check["exact_required"] or check["bit_exact"] == check["frames"]:
            return True, "bit-exact"
        return True, f"ok (mad<={check['worst_mean_abs_diff']:.2f})"
    return True, "right" if workload == "metadata" else "–"


def summarise(passes: list[dict], batched_clips: int) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for p in passes:
        groups.setdefault((p["workload"], p["latency_ms"], _key(p["row"])), []).append(p)
    out = []
    for (workload, latency, _), group in groups.items():
        row = group[0]["row"]
        per_clip = batched_clips if workload == "batched" else 1
        rates, pass_medians, item_ms = [], [], []
        clips = requests = nbytes = 0.0
        conns, opened = [], []
        for p in group:
            ms = p.get("item_ms") or []
            item_ms += ms
            if ms:
                rates.append(len(ms) * per_clip / (sum(ms) / 1e3))
                pass_medians.append(statistics.median(ms))
            clips += len(ms) * per_clip
            s = p.get("server") or {}
            requests += s.get("requests", 0)
            nbytes += s.get("bytes", 0)
            if s:
                conns.append(s.get("connections_used", 0))
                opened.append(s.get("relay_opened", 0))
        check = _merge_checks([p.get("check") for p in group])
        ok, verdict = _verdict(group, check, workload)
        items = len(item_ms)
        summary = {
            "workload": workload, "latency_ms": latency, "row": row, "label": label(row),
            "passes": len(group), "items": items, "clips": clips,
            "clips_per_s": statistics.median(rates) if rates else None,
            "clips_per_s_min": min(rates) if rates else None,
            "clips_per_s_max": max(rates) if rates else None,
            "rates": rates,
            "item_ms_p50": _pct(item_ms, 0.5), "item_ms_p99": _pct(item_ms, 0.99),
            "pass_median_ms_min": min(pass_medians) if pass_medians else None,
            "pass_median_ms_max": max(pass_medians) if pass_medians else None,
            "mib_per_clip": nbytes / clips / MiB if clips else None,
            "requests_per_clip": requests / clips if clips else None,
            "mib_per_item": nbytes / items / MiB if items else None,
            "requests_per_item": requests / items if items else None,
            "bytes_total": nbytes, "requests_total": requests,
            "connections_used": statistics.median(conns) if conns else None,
            "connections_used_max": max(conns) if conns else None,
            "connections_opened": sum(opened),
            "ok": ok, "verdict": verdict, "check": check,
            "fallbacks": sum(p.get("extra", {}).get("fallbacks", 0) for p in group),
        }
        per_item = [x for p in group for x in p.get("extra", {}).get("per_item", [])]
        if per_item:
            summary["fluxon"] = {
                "open_index_ms_p50": _pct([x.get("open_ms", 0) + x.get("index_ms", 0)
                                           for x in per_item], 0.5),
                "kv_round_trips_per_item": sum(x["kv_round_trips"] for x in per_item) / len(per_item),
                "stat_requests_per_item": (sum(x.get("stat_requests", 0) for x in per_item)
                                           / len(per_item)),
                "remote_reads_per_item": sum(x["remote_reads"] for x in per_item) / len(per_item),
                "frames_decoded_per_item": (sum(x.get("frames_decoded", 0) for x in per_item)
                                            / len(per_item)),
                "paths": _sum_dicts([p.get("extra", {}).get("paths", {}) for p in group]),
                "per_item": per_item,
            }
        out.append(summary)
    return out


def _sum_dicts(dicts: list[dict]) -> dict:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


# ---- targets ----

def _find(summaries: list[dict], workload: str, latency: float, family: str,
          cache: str | None = None) -> list[dict]:
    return [s for s in summaries if s["workload"] == workload and s["latency_ms"] == latency
            and s["row"]["family"] == family and (cache is None or s["row"].get("cache") == cache)]


def _peers(summaries: list[dict], workload: str, latency: float,
           union: bool = False) -> list[dict]:
    """Peer rows with a rate; the union (batching) row only when asked for."""
    return [s for s in summaries if s["workload"] == workload and s["latency_ms"] == latency
            and s["row"]["family"] != "fluxon" and s["clips_per_s"]
            and bool(s["row"].get("union")) == union]


def _best(rows: list[dict], exact: bool = True) -> dict | None:
    rows = [s for s in rows if s["ok"]] if exact else rows
    return max(rows, key=lambda s: s["clips_per_s"]) if rows else None


def _round_ratios(flux: dict, peer: dict, passes: list[dict]) -> tuple[float, float] | None:
    """min and max over rounds of fluxon's clips/s ÷ the peer's, same round."""
    def by_round(s: dict) -> dict[int, float]:
        out = {}
        for p in passes:
            if (p["workload"] == s["workload"] and p["latency_ms"] == s["latency_ms"]
                    and _key(p["row"]) == _key(s["row"]) and p.get("item_ms")):
                out[p["round"]] = len(p["item_ms"]) / sum(p["item_ms"])
        return out
    f, q = by_round(flux), by_round(peer)
    ratios = [f[r] / q[r] for r in f if r in q]
    return (min(ratios), max(ratios)) if ratios else None


def _subset_rates(passes: list[dict], flux: dict, peer: dict,
                  latency: float) -> tuple[float, float, int] | None:
    """clips/s of fluxon and of a flagged peer over the items of the videos the peer got
    right (pooled over rounds)."""
    def rows(s: dict) -> list[dict]:
        return [p for p in passes if p["workload"] == "clips" and p["latency_ms"] == latency
                and _key(p["row"]) == _key(s["row"])]
    bad = {v for p in rows(peer) for v in p.get("flagged_videos", [])}
    def rate(s: dict) -> tuple[float, int]:
        ms = [t for p in rows(s) for t, v in zip(p["item_ms"], p.get("item_videos", []))
              if v not in bad]
        return (len(ms) / (sum(ms) / 1e3) if ms else 0.0), len(ms)
    (f, _), (q, n) = rate(flux), rate(peer)
    return (f, q, n) if f and q else None


def _cold_items(results: dict, cold: dict, latency: float) -> list[tuple[dict, dict]]:
    """(fluxon cold per-item stats, the plan's item) pairs of the clips workload."""
    out = []
    for p in results["passes"]:
        if (p["workload"] != "clips" or p["latency_ms"] != latency
                or _key(p["row"]) != _key(cold["row"])):
            continue
        plan = {i["video"]: i for i in results["plans"]["clips"][p["round"]]}
        out += [(x, plan[x["video"]]) for x in p.get("extra", {}).get("per_item", [])
                if plan.get(x["video"], {}).get("needed_bytes")]
    return out


def _bytes_by_layout(results: dict, cold: dict, latency: float) -> str:
    """fluxon cold remote bytes ÷ needed bytes, per container layout (pooled over rounds)."""
    layout = {v["video"]: v["layout"] for v in results["videos"]}
    got: dict[str, list[float]] = {}
    for x, item in _cold_items(results, cold, latency):
        pair = got.setdefault(layout.get(x["video"], "?"), [0.0, 0.0])
        pair[0] += x["remote_bytes"]
        pair[1] += item["needed_bytes"]
    return ", ".join(f"{k} {a / b:.2f}×" for k, (a, b) in sorted(got.items()) if b)


def _bytes_model(results: dict, cold: dict, latency: float) -> str:
    """Where fluxon's cold bytes go: the piece-rounded spans, plus what the scan reads."""
    pairs = [(x, i) for x, i in _cold_items(results, cold, latency) if "span_piece_bytes" in i]
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


def _fmt_ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def _met(x: float | None, goal: float, lower: bool = False) -> str:
    if x is None:
        return "n/a"
    return "met" if (x <= goal if lower else x >= goal) else "missed"


def targets(results: dict, summaries: list[dict]) -> list[dict]:
    store = results["conditions"]["store"]
    lats = store["latencies_ms"]
    bw = store["bandwidth_mbps_per_connection"]
    lt = 10.0 if 10.0 in lats else max(lats)
    passes = results["passes"]
    cond = f"L = {lt:g} ms, {bw:g} MB/s per connection" if bw else f"L = {lt:g} ms, no cap"
    if lt != 10.0 or bw != 50:
        cond += " (the issue's condition: L = 10 ms, 50 MB/s)"
    out: list[dict] = []

    # (1) random clip per item
    peers = _peers(summaries, "clips", lt)
    best = _best(peers)
    for cache, goal in (("warm-kv", 3.0), ("warm-kv+shared", 3.0), ("warm-reader", 3.0),
                        ("cold", 2.5)):
        flux = _find(summaries, "clips", lt, "fluxon", cache)
        if not flux:
            continue
        f = flux[0]
        ratio = f["clips_per_s"] / best["clips_per_s"] if best and f["clips_per_s"] else None
        rr = _round_ratios(f, best, passes) if best else None
        out.append({
            "target": f"random clip per item: fluxon {cache} ÷ best exact peer",
            "condition": cond, "goal": f"≥ {goal:g}×",
            "fluxon": f"{f['clips_per_s']:.2f} clips/s" if f["clips_per_s"] else "–",
            "other": f"{best['label']} {best['clips_per_s']:.2f} clips/s" if best else "no exact peer",
            "ratio": _fmt_ratio(ratio) + (f" (rounds {rr[0]:.2f}–{rr[1]:.2f})" if rr else ""),
            "status": _met(ratio, goal) if f["ok"] else "n/a (fluxon flagged)"})

    fastest = _best(peers, exact=False)
    warm = _find(summaries, "clips", lt, "fluxon", "warm-kv")
    if fastest and warm and not fastest["ok"]:
        sub = _subset_rates(passes, warm[0], fastest, lt)
        if sub:
            f_rate, p_rate, n = sub
            out.append({
                "target": "context: fluxon warm-kv ÷ the fastest peer, on the videos where that "
                          "peer's frames were right", "condition": cond, "goal": "–",
                "fluxon": f"{f_rate:.2f} clips/s", "other": f"⚠ {fastest['label']} "
                                                           f"{p_rate:.2f} clips/s ({n} items)",
                "ratio": _fmt_ratio(f_rate / p_rate), "status": "(context)"})
    local = _find(summaries, "clips", lt, "fluxon", "local file")
    if local and best and local[0]["clips_per_s"]:
        out.append({
            "target": "context: fluxon's decoder on the local files ÷ best exact peer (the "
                      "ceiling of the rows above if the store cost nothing)",
            "condition": cond, "goal": "–", "fluxon": f"local file {local[0]['clips_per_s']:.2f} clips/s",
            "other": f"{best['label']} {best['clips_per_s']:.2f} clips/s",
            "ratio": _fmt_ratio(local[0]["clips_per_s"] / best["clips_per_s"]),
            "status": "(context)"})
    if local and warm and local[0]["clips_per_s"] and warm[0]["clips_per_s"]:
        out.append({
            "target": "context: fluxon warm-kv ÷ fluxon's decoder on the local files",
            "condition": cond, "goal": "–", "fluxon": f"{warm[0]['clips_per_s']:.2f} clips/s",
            "other": f"local file {local[0]['clips_per_s']:.2f} clips/s",
            "ratio": _fmt_ratio(warm[0]["clips_per_s"] / local[0]["clips_per_s"]),
            "status": "(context: 1 = the store costs nothing; decode bound)"})

    # (2) remote bytes
    flux = _find(summaries, "clips", lt, "fluxon", "cold")
    needed = results.get("needed_bytes", {}).get("clips")
    if flux and needed and flux[0]["clips"]:
        f = flux[0]
        rounds = sorted({p["round"] for p in passes if p["workload"] == "clips"
                         and p["latency_ms"] == lt and p["row"].get("cache") == "cold"})
        need_per_clip = sum(needed[r] for r in rounds) / f["clips"] / MiB
        ratio = f["mib_per_clip"] / need_per_clip
        layouts = _bytes_by_layout(results, f, lt)
        out.append({"target": "remote bytes: fluxon cold ÷ needed (GOP spans touched + "
                              "container index)", "condition": f"clips, {cond}",
                    "goal": "≤ 1.25×", "fluxon": f"{f['mib_per_clip']:.2f} MiB/clip"
                    + (f" (by layout: {layouts})" if layouts else ""),
                    "other": f"needed {need_per_clip:.2f} MiB/clip",
                    "ratio": _fmt_ratio(ratio), "status": _met(ratio, 1.25, lower=True)})
        model = _bytes_model(results, f, lt)
        if model:
            out.append({"target": "context: where fluxon's cold bytes go (model from the "
                                  "ffprobe packet table, piece size)",
                        "condition": f"clips, {cond}", "goal": "–", "fluxon": model,
                        "other": "–", "ratio": "–", "status": "(context)"})
        fewest = min((s for s in peers if s["mib_per_clip"] is not None),
                     key=lambda s: s["mib_per_clip"], default=None)
        if fewest:
            ratio = f["mib_per_clip"] / fewest["mib_per_clip"]
            out.append({"target": "remote bytes: fluxon cold ÷ the peer fetching the fewest",
                        "condition": f"clips, {cond}", "goal": "< 1× (fewer than every peer)",
                        "fluxon": f"{f['mib_per_clip']:.2f} MiB/clip",
                        "other": f"{fewest['label']} {fewest['mib_per_clip']:.2f} MiB/clip",
                        "ratio": _fmt_ratio(ratio),
                        "status": "met" if ratio < 1 else "missed"})

    # (3) batched
    for lat in sorted({0.0, lt} & set(lats)):
        peers_b = _peers(summaries, "batched", lat)
        best_b = _best(peers_b)
        for cache in ("warm-kv", "cold"):
            flux = _find(summaries, "batched", lat, "fluxon", cache)
            f = flux[0] if flux else None
            ratio = (f["clips_per_s"] / best_b["clips_per_s"]
                     if f and best_b and f["clips_per_s"] else None)
            rr = _round_ratios(f, best_b, passes) if f and best_b else None
            out.append({
                "target": f"batched K clips of one video: fluxon read_many {cache} ÷ best exact "
                          "peer one by one",
                "condition": f"L = {lat:g} ms, {bw:g} MB/s" if bw else f"L = {lat:g} ms",
                "goal": "≥ 5×",
                "fluxon": f"{f['clips_per_s']:.2f} clips/s" if f and f["clips_per_s"] else "–",
                "other": (f"{best_b['label']} {best_b['clips_per_s']:.2f} clips/s" if best_b
                          else "no exact peer"),
                "ratio": _fmt_ratio(ratio) + (f" (rounds {rr[0]:.2f}–{rr[1]:.2f})" if rr else ""),
                "status": _met(ratio, 5.0) if f and f["ok"] else "n/a (fluxon flagged)"})
        union = _best(_peers(summaries, "batched", lat, union=True))
        flux = _find(summaries, "batched", lat, "fluxon", "warm-kv")
        if union and flux and flux[0]["clips_per_s"]:
            out.append({
                "target": "context: fluxon read_many warm-kv ÷ PyAV decoding the K clips' union "
                          "in one pass", "condition": f"L = {lat:g} ms", "goal": "–",
                "fluxon": f"{flux[0]['clips_per_s']:.2f} clips/s",
                "other": f"{union['label']} {union['clips_per_s']:.2f} clips/s",
                "ratio": _fmt_ratio(flux[0]["clips_per_s"] / union["clips_per_s"]),
                "status": "(context: what batching alone gives a peer)"})

    # (4) metadata
    peers_m = [s for s in summaries if s["workload"] == "metadata" and s["latency_ms"] == lt
               and s["row"]["family"] != "fluxon" and s["item_ms_p50"]]
    fastest = min((s for s in peers_m if s["ok"]), key=lambda s: s["item_ms_p50"], default=None)
    for cache in ("warm-kv", "warm-kv+shared", "cold"):
        flux = _find(summaries, "metadata", lt, "fluxon", cache)
        if not flux or not flux[0]["item_ms_p50"]:
            continue
        f = flux[0]
        ratio = fastest["item_ms_p50"] / f["item_ms_p50"] if fastest else None
        rt = f.get("fluxon", {})
        # The library's count: the stat and the index read alongside are one round trip.
        trips = statistics.median(x["open_round_trips"] for x in rt["per_item"])
        warm = cache.startswith("warm")
        out.append({"target": f"metadata only: fastest exact peer's open ÷ fluxon {cache} "
                              "video_metadata (p50 per video)",
                    "condition": cond, "goal": "≥ 10× (warm)" if warm else "–",
                    "fluxon": f"{f['item_ms_p50']:.1f} ms; {f['requests_per_item']:.2f} agent "
                              f"req + {rt.get('kv_round_trips_per_item', 0):.2f} KV round trips "
                              f"per video; {trips:g} round trip(s) one after another (p50)",
                    "other": (f"{fastest['label']} {fastest['item_ms_p50']:.1f} ms, "
                              f"{fastest['requests_per_item']:.2f} req" if fastest else "–"),
                    "ratio": _fmt_ratio(ratio),
                    "status": (_met(ratio, 10.0) + ("; 1 round trip: met" if trips <= 1.0 else
                                                   f"; {trips:g} round trips, goal 1")
                               if warm else "(context)")})

    # (5) round trips before the first frame, as the library counts them
    # (FluxonFsVideoReadStats.open_round_trips + first_frame_waits)
    layout = {v["video"]: v["layout"] for v in results["videos"]}
    for cache in ("warm-kv", "warm-kv+shared", "cold"):
        flux = _find(summaries, "clips", lt, "fluxon", cache)
        if not flux or "fluxon" not in flux[0]:
            continue
        by_layout: dict[str, list[float]] = {}
        for x in flux[0]["fluxon"]["per_item"]:
            by_layout.setdefault(layout.get(x["video"], "?"), []).append(
                x["open_round_trips"] + x["first_frame_waits"])
        text = "; ".join(f"{k} {statistics.median(v):g} (max {max(v):g})"
                         for k, v in sorted(by_layout.items()))
        goals = {"mkv": 3, "mp4 faststart": 2, "mp4 moov-at-end": 3}
        met = all(statistics.median(v) <= (1 if cache.startswith("warm") else goals.get(k, 3))
                  for k, v in by_layout.items())
        goal = "1" if cache.startswith("warm") else "≤ 2 faststart, ≤ 3 moov-at-end / MKV"
        out.append({"target": f"round trips before the first frame, fluxon {cache} "
                              "(counted by the library: open_round_trips + first_frame_waits, "
                              "p50 per layout)",
                    "condition": f"clips, {cond}", "goal": goal, "fluxon": text,
                    "other": f"{flux[0]['fluxon']['stat_requests_per_item']:.1f} agent stats, "
                             f"{flux[0]['requests_per_item']:.1f} agent req, "
                             f"{flux[0]['fluxon']['kv_round_trips_per_item']:.1f} KV round "
                             "trips per item in all",
                    "ratio": "–", "status": "met" if met else "missed"})
    out.append({"target": "local files ≥ 1.5× best exact peer, ≤ 0.8× decode floor; read_many "
                          "peak RSS", "condition": "–", "goal": "–", "fluxon": "–", "other": "–",
                "ratio": "–", "status": "not measured here: bench/run.py, "
                                        "bench/read_many_memory.py"})
    return out


# ---- markdown ----

def _f(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def _row_name(s: dict) -> str:
    name = s["label"]
    if s["row"]["family"] == "fluxon" and s["workload"] != "clips":
        how = "read_many" if s["workload"] == "batched" else "video_metadata"
        name = name.replace("fluxon ", f"fluxon {how} ", 1)
    return ("" if s["ok"] else "⚠ ") + name


def _check_text(s: dict) -> str:
    text = s["verdict"]
    if s["row"]["family"] == "fluxon" and s.get("fluxon", {}).get("paths"):
        paths = s["fluxon"]["paths"]
        text += " · " + ", ".join(f"{k} {v}" for k, v in paths.items())
    if s.get("fallbacks"):
        text += f" · {s['fallbacks']} re-decode(s) from the first keyframe"
    return text.replace("|", "/")


def _order(summaries: list[dict], workload: str) -> list[dict]:
    rank = {"cold": 0, "warm-kv": 1, "warm-kv+shared": 2, "warm-reader": 3}
    rows = [s for s in summaries if s["workload"] == workload]
    return sorted(rows, key=lambda s: (s["latency_ms"], s["row"]["family"] == "fluxon",
                                       rank.get(s["row"].get("cache", ""), 0), s["label"]))


def clips_table(summaries: list[dict]) -> list[str]:
    lines = ["| L ms | row | clips/s (median, range) | p50 ms | p99 ms | MiB/clip | req/clip | "
             "conns | open+index p50 ms | KV RT/clip | frames |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in _order(summaries, "clips"):
        fx = s.get("fluxon", {})
        lines.append(
            f"| {s['latency_ms']:g} | {_row_name(s)} | {_f(s['clips_per_s'])} "
            f"({_f(s['clips_per_s_min'])}–{_f(s['clips_per_s_max'])}) | {_f(s['item_ms_p50'], 0)} | "
            f"{_f(s['item_ms_p99'], 0)} | {_f(s['mib_per_clip'])} | {_f(s['requests_per_clip'], 1)} | "
            f"{_f(s['connections_used'], 0)} | {_f(fx.get('open_index_ms_p50'), 1)} | "
            f"{_f(fx.get('kv_round_trips_per_item'), 1) if fx else '–'} | {_check_text(s)} |")
    return lines


def batched_table(summaries: list[dict]) -> list[str]:
    lines = ["| L ms | row | clips/s (median, range) | ms/item p50 | p99 | MiB/item | req/item | "
             "conns | frames decoded/item | frames |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in _order(summaries, "batched"):
        fx = s.get("fluxon", {})
        lines.append(
            f"| {s['latency_ms']:g} | {_row_name(s)} | {_f(s['clips_per_s'])} "
            f"({_f(s['clips_per_s_min'])}–{_f(s['clips_per_s_max'])}) | {_f(s['item_ms_p50'], 0)} | "
            f"{_f(s['item_ms_p99'], 0)} | {_f(s['mib_per_item'])} | {_f(s['requests_per_item'], 1)} | "
            f"{_f(s['connections_used'], 0)} | {_f(fx.get('frames_decoded_per_item'), 0)} | "
            f"{_check_text(s)} |")
    return lines


def metadata_table(summaries: list[dict]) -> list[str]:
    lines = ["| L ms | row | ms/video p50 (range of round medians) | p99 | req/video | "
             "KiB/video | KV RT/video | conns | frame count, fps, duration |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in _order(summaries, "metadata"):
        fx = s.get("fluxon", {})
        lines.append(
            f"| {s['latency_ms']:g} | {_row_name(s)} | {_f(s['item_ms_p50'], 1)} "
            f"({_f(s['pass_median_ms_min'], 1)}–{_f(s['pass_median_ms_max'], 1)}) | "
            f"{_f(s['item_ms_p99'], 1)} | {_f(s['requests_per_item'], 2)} | "
            f"{_f((s['mib_per_item'] or 0) * 1024, 0)} | "
            f"{_f(fx.get('kv_round_trips_per_item'), 2) if fx else '–'} | "
            f"{_f(s['connections_used'], 0)} | {_check_text(s)} |")
    return lines


def targets_table(rows: list[dict]) -> list[str]:
    lines = ["| target | condition | fluxon | best peer / bound | ratio | goal | status |",
             "|---|---|---|---|---|---|---|"]
    for t in rows:
        lines.append(f"| {t['target']} | {t['condition']} | {t['fluxon']} | {t['other']} | "
                     f"{t['ratio']} | {t['goal']} | {t['status']} |")
    return lines


def markdown(results: dict, summaries: list[dict], target_rows: list[dict]) -> str:
    c = results["conditions"]
    m, store, wl = c["machine"], c["store"], c["workload"]
    versions = ", ".join(f"{k} {v}" for k, v in c["versions"].items())
    lat = ", ".join(f"{x:g}" for x in store["latencies_ms"])
    bw = store["bandwidth_mbps_per_connection"]
    lines = [
        "# Remote-store benchmark (issue 15)", "",
        f"`{results['command']}` — {results['generated']}, {results['duration_s']:.0f} s, "
        f"git {m['git']}.", "",
        "## Conditions", "",
        f"- **Store model** (the same for every contender): per-request latency L = {lat} ms "
        f"({store['latency']}); "
        + (f"**{bw:g} MB/s per connection** (10^6 B/s, server -> client)"
           if bw else "no bandwidth cap") + f", applied by the {store['relay']}.",
        f"- Peers: {store['peers']}. fluxon: {store['fluxon']}; piece size "
        f"{(store.get('piece_size') or 0) // KiB} KiB.",
        "- The agent has no bandwidth cap of its own: the same relay shapes its connections "
        "(an agent flag `--inject-bandwidth-mbps` would make this native).",
        "- fluxon rows: cold (Redis flushed, a new process), warm-kv (a new process, Redis as "
        "the cold pass left it, default settings), warm-kv+shared (the same with the export's "
        "`metadata_cache_shared = true` and `metadata_cache_ttl_ms = 120000`: the stats another "
        "process had just had authorised (an untimed process before the pass) come with the "
        "frame index in one Redis pipeline, so no agent request), "
        "warm-reader (the cold process's pool again). Redis has no injected latency: it is "
        "the cache next to the training nodes, the agent is the remote store.",
        "- Workload: " + wl["clip"] + "; interleaved rounds per workload (row order rotates each "
        "round): " + ", ".join(f"{v} at {k} ms" for k, v in wl["rounds"].items())
        + f"; {wl['threads']} decoder thread(s) per contender; batched K = {wl['batched_clips']}.",
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}; shared "
        "with other runs (load average "
        + ", ".join(f"{k}: {v[0]:.2f}" for k, v in m["load_average"]) + ").",
        f"- Versions: {versions}.",
        "- Timed per item: open (fsspec.open's HEAD, the GET, or the pool call) to frames as "
        "numpy, close included; not timed: process start, library initialisation, frame checks. "
        "clips/s per round = clips ÷ sum of item times; the table gives the median over rounds "
        "and the range; p50/p99 are over every item of every round. MiB and requests are the "
        "origin servers' counters (agent `/metrics`; range server), `conns` the connections that "
        "carried requests during a pass (the relay's count, median over passes).",
        "",
    ]
    kinds: dict[str, list[dict]] = {}
    for v in results["videos"]:
        kinds.setdefault(f"{v['codec']} {v['width']}x{v['height']} {v['layout']}", []).append(v)
    lines += ["Dataset (testsrc2, 30 fps; bench/.data/remote-videos):", "",
              "| kind | videos | frames | GOP | file MiB | container KiB |", "|---|---|---|---|---|---|"]
    for kind, vs in kinds.items():
        lines.append(f"| {kind} | {len(vs)} | {min(v['frames'] for v in vs)}–"
                     f"{max(v['frames'] for v in vs)} | "
                     f"{'/'.join(sorted({str(v['gop']) for v in vs}))} | "
                     f"{min(v['file_bytes'] for v in vs) / MiB:.2f}–"
                     f"{max(v['file_bytes'] for v in vs) / MiB:.2f} | "
                     f"{min(v['container_bytes'] for v in vs) / KiB:.0f}–"
                     f"{max(v['container_bytes'] for v in vs) / KiB:.0f} |")
    lines += ["", "## Targets", "",
              "Ratios in this run, frames checked; \"best exact peer\" is the fastest peer row "
              "whose frames passed the check (⚠ rows never count).", ""]
    lines += targets_table(target_rows)
    lines += ["", f"## Random clip per item", "", WORKLOADS["clips"] + ".", ""]
    lines += clips_table(summaries)
    plans = results.get("plans", {}).get("batched", [])
    items = [i for plan in plans for i in plan]
    distinct = (sum(len({f for c in i["clips"] for f in c}) for i in items) / len(items)
                if items else 0)
    lines += ["", "## K clips of one video per item", "",
              WORKLOADS["batched"] + f" (K = {wl['batched_clips']}; "
              f"{wl['batched_clips'] * 16} frames asked per item, {distinct:.0f} distinct on "
              "average: the videos are 4–7.5 s, so the clips overlap). Peer rows: the best exact "
              "peer and the fastest peer of the clips workload at the same latency, PyAV "
              "download, and, as context (not \"one by one\"), PyAV download decoding the "
              "union of the K clips with one seek per cluster.", ""]
    lines += batched_table(summaries)
    lines += ["", "## Metadata only", "",
              WORKLOADS["metadata"] + ". fluxon: `patcher.video_metadata` in a new process, "
              "cold (Redis flushed: a scan of remote bytes builds the frame index), warm-kv "
              "(the index in Redis; the agent answers the stat meanwhile) and warm-kv+shared "
              "(stat and index in one Redis pipeline). PyAV: the stream header (`frames`; Matroska has none, so its "
              "packets are counted by demuxing); torchcodec approximate: the header; torchcodec "
              "exact: a scan of every packet; decord: reads the whole file and indexes it.", ""]
    lines += metadata_table(summaries)
    lines += ["", "![remote benchmark](remote.png)", "", "## Notes", ""]
    lines += [
        "- decord's `VideoReader` accepts a file object, but only to call `read()` once and "
        "decode from memory: its row is decord's download pipeline (fsspec: HEAD + one GET).",
        "- PyAV gets each video's frame -> pts table from the dataset's ffprobe scan, untimed "
        "(as if kept in the dataset's manifest); it seeks to the keyframe before the clip and "
        "decodes forward; a seek that lands past a target is redone from the first keyframe.",
        "- torchcodec's exact mode scans every packet when it opens: over an fsspec file that "
        "reads the whole file. Its decoder-side Resize (bilinear with antialiasing) differs from "
        "the ffmpeg CLI's bilinear scale by more than the tolerance, so its 224x224 rows are "
        "flagged OFF whenever that shows (see bench/run.py's tables).",
    ]
    lines += [f"- {n}" for n in results.get("notes", [])]
    for family, why in results.get("skipped", {}).items():
        lines.append(f"- {family} skipped: {why}")
    return "\n".join(lines) + "\n"


# ---- chart ----

def chart(summaries: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 8))
    cmap = plt.get_cmap("tab20")
    every = list(dict.fromkeys(s["label"] for w in ("clips", "batched", "metadata")
                               for s in _order(summaries, w)))
    colour = {name: cmap(i % 20) for i, name in enumerate(every)}
    panels = (("clips", "clips_per_s", "random clip per item: clips/s"),
              ("batched", "clips_per_s", "K clips of one video per item: clips/s"),
              ("metadata", "item_ms_p50", "metadata only: ms per video (p50, log)"))
    for ax, (workload, field, title) in zip(axes, panels):
        rows = _order(summaries, workload)
        lats = sorted({s["latency_ms"] for s in rows})
        names = list(dict.fromkeys(s["label"] for s in rows))
        width = 0.8 / max(len(names), 1)
        for n, name in enumerate(names):
            xs, ys, lo, hi, flags = [], [], [], [], []
            for x, lat in enumerate(lats):
                for s in (s for s in rows if s["latency_ms"] == lat and s["label"] == name):
                    y = s[field] or 0
                    xs.append(x + (n - (len(names) - 1) / 2) * width)
                    ys.append(y)
                    if field == "clips_per_s" and s["clips_per_s"]:
                        lo.append(y - s["clips_per_s_min"])
                        hi.append(s["clips_per_s_max"] - y)
                    elif s["pass_median_ms_min"] is not None:
                        lo.append(max(y - s["pass_median_ms_min"], 0))
                        hi.append(max(s["pass_median_ms_max"] - y, 0))
                    else:
                        lo.append(0)
                        hi.append(0)
                    flags.append(not s["ok"])
            bars = ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=colour[name],
                          label=("⚠ " if any(flags) else "") + name)
            for bar, flag in zip(bars, flags):
                if flag:
                    bar.set_hatch("xx")
        ax.set_xticks(range(len(lats)), [f"L = {x:g} ms" for x in lats])
        if workload == "metadata":
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=1,
                  frameon=False)
    fig.suptitle("fluxon through FluxonFS vs peers over HTTP (hatched: frames flagged); "
                 "bars: median over rounds, whiskers: range", fontsize=10)
    fig.tight_layout()
    path = out / "remote.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def write(results: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    summaries = summarise(results["passes"], results["conditions"]["workload"]["batched_clips"])
    target_rows = targets(results, summaries)
    results = {**results, "summaries": summaries, "targets": target_rows}
    paths = [out / "remote.json", out / "remote.md"]
    paths[0].write_text(json.dumps(results, indent=1, default=str))
    paths[1].write_text(markdown(results, summaries, target_rows))
    paths.append(chart(summaries, out))
    return paths
