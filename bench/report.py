"""Turn the benchmark's records into latest.json, latest.md and PNG charts.

Every figure is a median over the repeats; ratios are of medians. Nothing
here judges a timing: a slow contender is a finding, never a failure.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from contenders import PEERS
from scenario import write_outputs
from tables import fill, listing, mib, table, times

STAT_KEYS = ("open_ms", "container_open_ms", "decode_ms", "range_reads", "range_bytes",
             "seeks", "page_hits", "page_misses", "kv_hits", "kv_misses", "kv_errors",
             "remote_reads", "remote_bytes", "backfills_queued", "backfills_dropped",
             "frames_decoded", "pyav_fallbacks")
CACHE_ORDER = ("local", "cold", "warm-kv", "warm-reader")
CONTENDER_ORDER = (*PEERS, "fluxon-local", "fluxon", "fluxon read_many")


def _median(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def summarize(record: dict) -> dict:
    """Medians over the repeats of one record."""
    reps = record["repeats"]
    clips, per_clip = record["clips"], record["frames_per_clip"]
    pass_s = [r["pass_ms"] / 1e3 for r in reps if r["pass_ms"] > 0]
    out: dict[str, Any] = {
        "clips_per_s": _median(clips / s for s in pass_s),
        "frames_per_s": _median(clips * per_clip / s for s in pass_s),
        "pass_ms": _median(r["pass_ms"] for r in reps),
        "clip_ms": _median(c for r in reps for c in r["clip_ms"]),
        "handle_open_ms": _median(r["open_ms"] for r in reps),
    }
    for key in STAT_KEYS:
        values = [r["stats"][key] for r in reps if key in r["stats"]]
        if values:
            out[key] = statistics.median(values)
    for key in ("path", "fallback"):
        values = sorted({v for r in reps for v in r.get("labels", {}).get(key, [])})
        if values:
            out[key] = values
    check = record.get("check") or {}
    out["ok"] = not record.get("error") and check.get("ok", False)
    out["verdict"] = (f"FAILED: {record['error'][:100]}" if record.get("error")
                      else check.get("verdict", "not checked"))
    return out


def _sort_key(record: dict) -> tuple:
    return (CONTENDER_ORDER.index(record["contender"]) if record["contender"] in CONTENDER_ORDER
            else 99, CACHE_ORDER.index(record["cache"]))


def select(records: Sequence[dict], workload: str, sweep: bool = False,
           video: str | None = None) -> list[dict]:
    return sorted((r for r in records if r["workload"] == workload and r["sweep"] == sweep
                   and (video is None or r["video"] == video)), key=_sort_key)


def label(record: dict) -> str:
    name = record["contender"]
    if name == "fluxon":
        name = f"fluxon {record['cache']}"
    return name if record["summary"]["ok"] else f"⚠ {name}"


# ---- formatting ----

def fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def ratio(value: float | None) -> str:
    return times(value, missing="n/a")


def fluxon_only(record: dict, text: str) -> str:
    return text if record["contender"].startswith("fluxon") and record["contender"] != \
        "fluxon-local" else "–"


def open_ms(record: dict) -> float | None:
    """Peers: opening the handle. fluxon via FluxonFS: the reader's authorised stat plus
    every FFmpeg container open of the pass (the decoder opens the container per call)."""
    s = record["summary"]
    if "container_open_ms" in s and record["contender"] != "fluxon-local":
        return s.get("open_ms", 0) + s["container_open_ms"]
    return s["handle_open_ms"]


def per_floor(clip_ms: float | None, floor: float | None) -> float | None:
    return clip_ms / floor if clip_ms and floor else None


def floor_of(results: dict, record: dict) -> float | None:
    for floor in results["floors"]:
        if floor["workload"] == record["workload"] and floor["video"] == record["video"]:
            return _median(floor["floor_ms"]) if floor["floor_ms"] else None
    return None


def frames_cell(summary: dict) -> str:
    """The check's verdict, and for fluxon the read path(s) it took and any fallback."""
    text = summary["verdict"]
    if summary.get("path"):
        text += " · " + "+".join(summary["path"])
    if summary.get("fallback"):
        text += " (fallback: " + "; ".join(summary["fallback"]) + ")"
    return text


def in_video_order(results: dict, workload: str) -> list[dict]:
    """The workload's main (not sweep) records, videos in dataset order."""
    return [record for video in results["videos"]
            for record in select(results["records"], workload, video=video["video"])]


def clip_row(results: dict, record: dict) -> list[str]:
    s = record["summary"]
    floor = floor_of(results, record)
    kv = fluxon_only(record, f"{fmt(s.get('kv_hits'), 0)}/{fmt(s.get('kv_misses'), 0)}")
    opened = fmt(open_ms(record))
    if record.get("index_ms"):
        opened += f" (+{fmt(record['index_ms'])} scan)"
    return [record["video"], label(record), fmt(s["clips_per_s"], 2), fmt(s["clip_ms"]),
            opened, fmt(floor), ratio(per_floor(s["clip_ms"], floor)),
            fluxon_only(record, fmt(s.get("range_reads"), 0)),
            fluxon_only(record, mib(s.get("range_bytes"))), kv,
            fluxon_only(record, mib(s.get("remote_bytes"))),
            fmt(record.get("peak_rss_mib"), 0), frames_cell(s)]


def sequential_row(results: dict, record: dict) -> list[str]:
    s = record["summary"]
    return [record["video"], label(record), fmt(s["frames_per_s"]), fmt(s["pass_ms"]),
            fluxon_only(record, mib(s.get("range_bytes"))),
            fluxon_only(record, mib(s.get("remote_bytes"))),
            fmt(record.get("peak_rss_mib"), 0), frames_cell(s)]


def batched_row(results: dict, record: dict) -> list[str]:
    s = record["summary"]
    how = "one call" if record["contender"] == "fluxon read_many" else "one by one"
    return [record["video"], label(record), how, str(record["clips"]), fmt(s["pass_ms"]),
            fmt(s["clips_per_s"], 2), fluxon_only(record, fmt(s.get("frames_decoded"), 0)),
            fluxon_only(record, mib(s.get("remote_bytes"))),
            fmt(record.get("peak_rss_mib"), 0), frames_cell(s)]


CLIP_HEADER = ["video", "contender", "clips/s", "clip ms", "open ms", "floor ms", "clip/floor",
               "range reads", "range MiB", "KV hit/miss", "remote MiB", "peak RSS MiB",
               "frames"]


def best_peer(records: Sequence[dict], workload: str, video: str, key: str,
              lowest: bool = False) -> dict | None:
    """The fastest peer whose frames passed the check."""
    valid = [r for r in select(records, workload, video=video)
             if r["contender"] in PEERS and r["summary"]["ok"] and r["summary"][key]]
    if not valid:
        return None
    pick = min if lowest else max
    return pick(valid, key=lambda r: r["summary"][key])


def find(records: Sequence[dict], workload: str, video: str, contender: str,
         cache: str) -> dict | None:
    return next((r for r in select(records, workload, video=video)
                 if r["contender"] == contender and r["cache"] == cache), None)


@dataclass(kw_only=True)
class Target:
    """One figure the bench aims at, as fluxon against the best peer or a bound."""

    target: str
    condition: str
    fluxon: str
    peer: str
    ratio: float | None
    meaning: str = "fluxon ÷ peer; > 1 is fluxon faster"


def _rate(record: dict | None, key: str = "clips_per_s") -> float | None:
    """A record's figure, or None when it is missing or its frames were flagged."""
    return record["summary"][key] if record and record["summary"]["ok"] else None


def _peer_cell(peer: dict | None, value: float | None, unit: str, digits: int) -> str:
    return f"{peer['contender']} {fmt(value, digits)} {unit}" if peer else "–"


def headline_targets(results: dict, video: str) -> list[Target]:
    """(a) warm-KV clips/s against the best peer, (c) clip time against the decode floor."""
    records = results["records"]
    warm = find(records, "clips224", video, "fluxon", "warm-kv")
    peer = best_peer(records, "clips224", video, "clips_per_s")
    mine, theirs = _rate(warm), peer["summary"]["clips_per_s"] if peer else None
    floor = floor_of(results, warm) if warm else None
    return [Target(target="(a) clips/s, warm KV vs best peer on local files",
                   condition=f"{video}, {results['workloads']['clips224']}",
                   fluxon=f"{fmt(mine, 2)} clips/s", peer=_peer_cell(peer, theirs, "clips/s", 2),
                   ratio=mine / theirs if mine and theirs else None),
            Target(target="(c) per-clip time ÷ decode floor",
                   condition=f"{video}, clips224, fluxon warm KV",
                   fluxon=f"{fmt(warm['summary']['clip_ms'])} ms/clip" if warm else "–",
                   peer=f"floor {fmt(floor)} ms" if floor else "floor n/a",
                   ratio=per_floor(warm["summary"]["clip_ms"], floor) if warm else None,
                   meaning="1: decode-bound; < 1: skipped non-reference frames or a decoder "
                           "kept from the previous clip beat the floor")]


def batched_target(results: dict, video: str) -> Target:
    """(b) N clips of the long video in one read_many call against a peer one by one."""
    records = results["records"]
    many = find(records, "batched", video, "fluxon read_many", "warm-kv")
    peer = best_peer(records, "batched", video, "pass_ms", lowest=True)
    mine, theirs = _rate(many, "pass_ms"), peer["summary"]["pass_ms"] if peer else None
    return Target(target="(b) N clips of one video: read_many vs best peer one by one",
                  condition=f"{video}, {many['clips'] if many else '?'} clips, 224x224, warm KV",
                  fluxon=f"{fmt(mine)} ms", peer=_peer_cell(peer, theirs, "ms", 1),
                  ratio=theirs / mine if mine and theirs else None,
                  meaning="peer time ÷ fluxon time; > 1 is fluxon faster")


def local_target(results: dict, video: str) -> Target:
    """(e) fluxon's decoder on the local file against the best exact peer, every codec."""
    records = results["records"]
    local = find(records, "clips224", video, "fluxon-local", "local")
    peer = best_peer(records, "clips224", video, "clips_per_s")
    mine, theirs = _rate(local), peer["summary"]["clips_per_s"] if peer else None
    floor = floor_of(results, local) if local else None
    return Target(target="(e) local file, 1 thread: fluxon ÷ best exact peer (goal ≥ 1.5×; "
                         "clip ÷ floor ≤ 0.8×)", condition=f"{video}, clips224",
                  fluxon=(f"{fmt(mine, 2)} clips/s; clip/floor "
                          f"{ratio(per_floor(local['summary']['clip_ms'], floor))}"
                          if mine else "–"),
                  peer=_peer_cell(peer, theirs, "clips/s", 2),
                  ratio=mine / theirs if mine and theirs else None)


def bytes_target(results: dict, video: str) -> Target:
    """(d) what a cold pass fetched against the GOP spans its clips need plus the container."""
    cold = find(results["records"], "clips224", video, "fluxon", "cold")
    ideal = results["ideal_bytes"][video]
    need = ideal["gop_span_bytes"] + ideal["container_bytes"]
    remote = cold["summary"].get("remote_bytes") if cold else None
    return Target(target="(d) cold remote bytes ÷ (GOP spans touched + container)",
                  condition=f"{video}, clips224, piece "
                            f"{results['conditions']['export']['piece_size'] >> 10} KiB",
                  fluxon=f"{mib(remote)} MiB", peer=f"needed {mib(need)} MiB",
                  ratio=remote / need if remote is not None and need else None,
                  meaning="1 would fetch only what decoding needs")


def targets(results: dict) -> list[Target]:
    """The figures the bench aims at, each as fluxon vs the best peer or a bound."""
    records = results["records"]
    clip_names = {r["video"] for r in records if r["workload"] == "clips224"}
    clip_videos = [v["video"] for v in results["videos"]
                   if v["video"] in results["ideal_bytes"] and v["video"] in clip_names]
    long_name = next((v["video"] for v in results["videos"]
                      if any(r["workload"] == "batched" and r["video"] == v["video"]
                             for r in records)), None)
    return [*(headline_targets(results, clip_videos[0]) if clip_videos else []),
            *([batched_target(results, long_name)] if long_name else []),
            *(local_target(results, v) for v in clip_videos),
            *(bytes_target(results, v) for v in clip_videos)]


def _sweep_section(results: dict) -> str:
    if not results["sweep"]:
        return ""
    rows = [[str(p["piece_size"] >> 10), p["video"], mib(p["cold_remote_bytes"]),
             fmt(p["cold_remote_reads"], 0), fmt(p["cold_ms"]), fmt(p["warm_ms"]),
             fmt(p["warm_kv_hits"], 0), mib(p["needed_bytes"]), p["verdict"]]
            for p in results["sweep"]]
    return "\n".join(["", "## Piece-size sweep", "",
                      f"{results['workloads']['clips224']}; agent latency "
                      f"{results['conditions']['export']['sweep_agent_latency_ms']} ms. Cold: the "
                      "file evicted from Redis, a new process; warm KV: a new process after it.",
                      "", *table(["piece KiB", "video", "cold remote MiB", "cold remote reads",
                                  "cold ms", "warm KV ms", "KV hits (warm)", "needed MiB",
                                  "frames"], rows), ""])


def _tables(results: dict) -> dict[str, str]:
    """Every table of latest.md, by its name in the template."""
    def rows_of(workload: str, make_row: Callable[[dict, dict], list[str]]) -> list[list[str]]:
        return [make_row(results, r) for r in in_video_order(results, workload)]
    tables = {
        "targets_table": table(["target", "condition", "fluxon", "best peer / bound", "ratio",
                                "reading"],
                               [[t["target"], t["condition"], t["fluxon"], t["peer"],
                                 ratio(t["ratio"]), t["meaning"]] for t in results["targets"]]),
        "dataset_table": table(["video", "codec", "resolution", "fps", "frames", "GOP", "layout",
                                "MiB", "container KiB"],
                               [[v["video"], v["codec"], f"{v['width']}x{v['height']}",
                                 str(v["fps"]), str(v["frames"]), str(v["gop"]), v["layout"],
                                 mib(v["file_bytes"]), f"{v['container_bytes'] / 1024:.1f}"]
                                for v in results["videos"]]),
        "clips224_table": table(CLIP_HEADER, rows_of("clips224", clip_row)),
        "native_table": table(CLIP_HEADER, rows_of("clips-native", clip_row)),
        "sequential_table": table(["video", "contender", "frames/s", "ms", "range MiB",
                                   "remote MiB", "peak RSS MiB", "frames"],
                                  rows_of("sequential224", sequential_row)),
        "batched_table": table(["video", "contender", "how", "clips", "ms for all", "clips/s",
                                "frames decoded", "remote MiB", "peak RSS MiB", "frames"],
                               rows_of("batched", batched_row)),
    }
    return {name: "\n".join(lines) for name, lines in tables.items()}


def markdown(results: dict) -> str:
    c, s, w = results["conditions"], results["settings"], results["workloads"]
    m, export = c["machine"], c["export"]
    skipped = "; ".join(f"**{k}** ({v})" for k, v in results["skipped"].items())
    return fill(
        "latest", **_tables(results), generated=results["generated"],
        command=results["command"], duration=f"{results['duration_s']:.0f}",
        machine=f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['os']}; "
                f"git {m['git']}",
        export=f"{export['where']}, root on {export['filesystem']}, injected agent latency "
               f"{export['agent_latency_ms']} ms; KV: {export['kv']}; piece size "
               f"{export['piece_size'] >> 10} KiB, {export['miss_policy']}",
        repeat=s["repeat"], clips=s["clips"], seed=s["seed"], threads=s["threads"],
        versions=listing(c["versions"].items()),
        skipped=f"Skipped: {skipped}.\n\n" if skipped else "",
        notes="".join(f"Note: {n}\n" for n in results["notes"]),
        clips224_title=w["clips224"], native_title=w["clips-native"],
        sequential_title=w["sequential224"], batched_title=w["batched"],
        sweep=_sweep_section(results))


def sweep_rows(results: dict) -> list[dict]:
    rows = []
    sizes = sorted({r["piece_size"] for r in results["records"] if r["sweep"]})
    for size in sizes:
        for video in results["videos"]:
            by_cache = {r["cache"]: r for r in results["records"]
                        if r["sweep"] and r["piece_size"] == size and r["video"] == video["video"]}
            if not by_cache:
                continue
            cold, warm = by_cache.get("cold"), by_cache.get("warm-kv")
            ideal = results["ideal_bytes"][video["video"]]
            verdicts = {r["summary"]["verdict"] for r in by_cache.values()}
            rows.append({
                "piece_size": size, "video": video["video"],
                "cold_remote_bytes": cold["summary"].get("remote_bytes") if cold else None,
                "cold_remote_reads": cold["summary"].get("remote_reads") if cold else None,
                "cold_ms": cold["summary"]["pass_ms"] if cold else None,
                "warm_ms": warm["summary"]["pass_ms"] if warm else None,
                "warm_kv_hits": warm["summary"].get("kv_hits") if warm else None,
                "needed_bytes": ideal["gop_span_bytes"] + ideal["container_bytes"],
                "verdict": " / ".join(sorted(verdicts))})
    return rows


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def compact_json(results: dict) -> str:
    """Floats to 2 decimals, one record per line: small, and diffs stay readable."""
    body = {k: v for k, v in _rounded(results).items() if k != "records"}
    text = json.dumps(body, indent=1, default=str)[:-2]
    records = ",\n  ".join(json.dumps(r, default=str, separators=(",", ":"))
                           for r in _rounded(results["records"]))
    return f'{text},\n "records": [\n  {records}\n ]\n}}\n'


def write(results: dict, out: Path) -> list[Path]:
    for record in results["records"]:
        record["summary"] = summarize(record)
    results["targets"] = [asdict(t) for t in targets(results)]
    results["sweep"] = sweep_rows(results)
    paths = write_outputs(out, "latest", compact_json(results), markdown(results))
    import charts

    paths += charts.draw(results, out)
    return paths
