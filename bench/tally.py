"""Passes into records: the executors (bench/peer_passes.py, bench/fluxon_passes.py) return
one pass per contender and video (per-video groups) or per row and round (round groups);
these functions turn a group's passes into one ``Record`` per case (and video). The same
functions read the passes of the legacy bench/run.py and bench/remote.py JSONs."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, replace
from typing import Any

from cases import PEERS, PREROLL_AUDIO, Case
from harness import MiB, count, grouped, median, merge_checks, pct, verdict
from record import Record

# bench/run.py's workload names
CODECS_WORKLOADS = {"clips224": "clips", "sequential224": "sequential"}


def record_of(case: Case, group: list[dict], clips_per_item: float = 1.0,
              none: str = "–", **known: Any) -> Record:
    """One case's record over its passes: items/s per pass (a pass's time is its items'
    plus its ``open_ms``), item times over every pass, the origin's counters per item, the
    frame check merged, the row's own counters (median over passes of each pass's sum)."""
    timed = [p for p in group if p.get("item_ms")]
    pass_ms = [sum(p["item_ms"]) + p["extra"].get("open_ms", 0) for p in timed]
    rates = [len(p["item_ms"]) / (ms / 1e3) for p, ms in zip(timed, pass_ms)]
    item_ms = [t for p in group for t in p.get("item_ms") or []]
    items = len(item_ms)
    servers = [p["server"] for p in group if p.get("server")]
    check = merge_checks([p.get("check") for p in group])
    ok, text = verdict(group, check, none)
    per_item = [x for p in group for x in p["extra"].get("per_item", [])]
    per_pass = [count(p["extra"].get("per_item", [])) for p in timed]
    counts: dict[str, Any] = {k: median(p[k] for p in per_pass if k in p)
                              for k in dict.fromkeys(k for p in per_pass for k in p)
                              if all(not isinstance(p.get(k), dict) for p in per_pass)}
    counts.update({k: v for p in per_pass[:1] for k, v in p.items() if isinstance(v, dict)})
    fallbacks = sum(p["extra"].get("fallbacks", 0) for p in group)
    if fallbacks:
        counts["pyav_fallbacks"] = fallbacks
    # Round trips one after another before the first frame (metadata: before the answer).
    trips = [x["open_round_trips"] + x.get("first_frame_waits", 0) for x in per_item
             if "open_round_trips" in x]
    rss = [p["extra"]["peak_rss_mib"] for p in group if p["extra"].get("peak_rss_mib")]
    cpu = [t for p in timed for t in p.get("item_cpu_s") or []]

    def per_item_of(total: float) -> float | None:
        return total / items if items else None
    record = Record(
        case=case, rounds=len(group), items=items, clips_per_item=clips_per_item,
        items_per_s=median(rates), items_per_s_rounds=rates,
        item_ms_p50=pct(item_ms, 0.5), item_ms_p95=pct(item_ms, 0.95),
        item_ms_p99=pct(item_ms, 0.99),
        round_median_ms=[statistics.median(p["item_ms"]) for p in timed],
        open_ms=median(p["extra"]["open_ms"] for p in timed if "open_ms" in p["extra"]),
        connections=median(s.get("connections_used", 0) for s in servers),
        round_trips_p50=median(trips),
        kv_round_trips_per_item=(statistics.mean(x.get("kv_round_trips", 0) for x in per_item)
                                 if per_item and "kv_round_trips" in per_item[0] else None),
        cpu_s=per_item_of(sum(cpu)) if len(cpu) == items else None,
        peak_rss_mib=max(rss, default=None), ok=ok, verdict=text,
        frames_checked=check["frames"] if check else 0,
        frames_exact=check["bit_exact"] if check else 0,
        frames_wrong=len(check["wrong"]) + len(check["off"]) if check else 0,
        errors=[e for p in group for e in p.get("errors", [])][:5], counts=counts, **known)
    store_cpu = [p["servers_cpu_s"] for p in timed if "servers_cpu_s" in p]
    if store_cpu and len(store_cpu) == len(timed):
        record.counts["store_cpu_ms_per_item"] = 1e3 * sum(store_cpu) / items
    if servers:
        record.mib_per_item = per_item_of(sum(s.get("bytes", 0) for s in servers) / MiB)
        record.requests_per_item = per_item_of(sum(s.get("requests", 0) for s in servers))
    elif case.via_store and per_item:  # no server counters: fluxon's own (the agent's reads)
        record.mib_per_item = per_item_of(sum(x.get("remote_bytes", 0) for x in per_item) / MiB)
        record.requests_per_item = per_item_of(sum(x.get("remote_reads", 0) for x in per_item))
    return record


# ---- per-video groups (the codecs dataset; bench/run.py's passes) ----

def codecs_case(row: dict, export: dict) -> Case:
    """The case of a bench/run.py row."""
    workload = CODECS_WORKLOADS.get(row["workload"], row["workload"])
    contender = row["contender"]
    if contender in PEERS or contender == "fluxon-local":
        return Case(workload, "codecs", "local", "fluxon" if contender == "fluxon-local"
                    else contender)
    sweep = row.get("sweep", False)
    return Case(workload, "codecs", "agent", "fluxon", row["cache"],
                access="read_many" if contender == "fluxon read_many" else "",
                latency_ms=float(row["latency_ms"] if row.get("latency_ms") is not None else
                                 export["sweep_agent_latency_ms" if sweep
                                        else "agent_latency_ms"]),
                piece_size=row["piece_size"] if sweep else None)


def codecs_records(results: dict) -> list[Record]:
    """One record per (case, video) of a per-video group's results (bench/run.py's shape:
    ``passes``, ``floors``, ``ideal_bytes``, ``conditions.export``)."""
    export = results["conditions"]["export"]
    floors = {(CODECS_WORKLOADS.get(f["workload"], f["workload"]), f["video"]): f["floor_ms"]
              for f in results.get("floors", [])}
    out = []
    for group in grouped(results["passes"], lambda p: json.dumps(p["row"],
                                                                 sort_keys=True)).values():
        row, info = group[0]["row"], group[0]["extra"]
        case = codecs_case(row, export)
        clips = info.get("clips", 1)
        per_item = clips if case.access == "read_many" else 1  # one call reads them all
        need = results.get("ideal_bytes", {}).get(row["video"])
        record = record_of(case, group, per_item, video=row["video"],
                           frames_per_item=per_item * info.get("frames_per_clip", 1),
                           floor_ms=median(floors.get((case.workload, row["video"])) or []),
                           index_ms=info.get("index_ms"),
                           needed_mib_per_item=(sum(need.values()) / MiB / clips
                                                if need and case.workload == "clips" else None),
                           settings={"size": f"{info.get('width')}x{info.get('height')}",
                                     "threads": results["settings"].get("threads"),
                                     "repeat": results["settings"].get("repeat"),
                                     "piece_size": row.get("piece_size")})
        if case.via_store and record.counts.get("container_open_ms") is not None:
            record.open_ms = (record.open_ms or 0) + record.counts["container_open_ms"]
        out.append(record)
    return out


# ---- round groups (the remote dataset; bench/remote.py's passes) ----

def rounds_case(row: dict, workload: str, latency: float, store: str, bandwidth: float) -> Case:
    """The case of a bench/remote.py row."""
    base = Case(workload, "remote", store, row["family"], latency_ms=latency,
                bandwidth_mbps=bandwidth)
    if row["family"] == "fluxon":
        if row["cache"] == "local file":
            return Case(workload, "remote", "local", "fluxon", latency_ms=latency)
        return Case(workload, "remote", store, "fluxon", row["cache"],
                    access="read_many" if workload == "batched" else "", latency_ms=latency,
                    bandwidth_mbps=bandwidth)
    mode = row["mode"]
    access = ("download-union" if row.get("union") else
              "file-object" if row["family"] == "decord" else mode)
    return replace(base, access=access, block_size=row.get("block_size"),
                   seek_mode=row.get("seek_mode", "") if row["family"] == "torchcodec" else "")


def by_layout(group: list[dict], layouts: dict[str, str]) -> dict[str, dict[str, Any]]:
    """A round group's figures per container layout (mp4 faststart, mp4 moov-at-end,
    mkv, ...): items, p50 ms per item and, where fluxon counted them per item, MiB from
    the origin and round trips before the first frame."""
    times: dict[str, list[float]] = {}
    for p in group:
        for video, ms in zip(p.get("item_videos") or [], p.get("item_ms") or []):
            times.setdefault(layouts.get(video, "?"), []).append(ms)
    fetched: dict[str, list[float]] = {}
    trips: dict[str, list[float]] = {}
    for x in (x for p in group for x in p["extra"].get("per_item", [])):
        layout = layouts.get(x.get("video", ""), "?")
        if "remote_bytes" in x:
            fetched.setdefault(layout, []).append(x["remote_bytes"] / MiB)
        if "open_round_trips" in x:
            trips.setdefault(layout, []).append(x["open_round_trips"]
                                                + x.get("first_frame_waits", 0))
    return {layout: {"items": len(ms), "item_ms_p50": pct(ms, 0.5),
                     "mib_per_item": statistics.mean(fetched[layout]) if fetched.get(layout)
                     else None, "round_trips_p50": median(trips.get(layout) or [])}
            for layout, ms in sorted(times.items())}


def rounds_records(results: dict) -> list[Record]:
    """One record per case of a round group's results (bench/remote.py's shape)."""
    cond = results["conditions"]
    store = "s3" if cond["store"].get("origin") == "s3" else "agent"
    bandwidth = float(cond["store"]["bandwidth_mbps_per_connection"])
    k = cond["workload"]["batched_clips"]
    needed = results.get("needed_bytes", {})
    out = []
    for (workload, latency, _), group in grouped(
            results["passes"], lambda p: (p["workload"], p["latency_ms"],
                                          json.dumps(p["row"], sort_keys=True))).items():
        case = rounds_case(group[0]["row"], workload, latency, store, bandwidth)
        per_item = k if workload == "batched" else 1
        record = record_of(case, group, per_item, "right" if workload == "metadata" else "–",
                           frames_per_item=None if workload == "metadata" else per_item * 16,
                           settings={"size": "224x224", "threads": cond["workload"]["threads"],
                                     "piece_size": cond["store"].get("piece_size"),
                                     "rounds": len(group)})
        rounds = {p.get("round", 0) for p in group}
        if workload in needed and record.items:
            record.needed_mib_per_item = sum(needed[workload][r] for r in rounds
                                             if r < len(needed[workload])) / MiB / record.items
            # The piece model of what a cold read fetches (rounds_group.piece_model).
            plan = results.get("plans", {}).get(workload, [])
            items = [i for r in sorted(rounds) if r < len(plan) for i in plan[r]]
            for key in ("span_piece_bytes", "open_model_bytes"):
                if items and all(key in i for i in items):
                    record.counts[key.replace("_bytes", "_mib_per_item")] = (
                        sum(i[key] for i in items) / MiB / record.items)
        layouts = {v["video"]: v["layout"] for v in results.get("videos", [])}
        split = by_layout(group, layouts)
        if len(split) > 1:
            record.counts["by_layout"] = split
        if workload == "metadata":
            wrong = sum(p.get("metadata_wrong_count", 0) for p in group)
            record.frames_wrong = wrong  # here: videos whose metadata was wrong
        out.append(record)
    return out


# ---- the threads group (bench/threads_group.py's passes) ----

def threads_case(contender: str, threads: int) -> Case:
    return Case("clips", "threads", "local", contender,
                access="open_video" if contender == "fluxon" else "", threads=threads)


def threads_records(results: dict) -> list[Record]:
    """One record per (contender, threads, video) of the threads group's passes."""
    out = []
    for group in grouped(results["passes"], lambda p: json.dumps(p["row"],
                                                                 sort_keys=True)).values():
        row = group[0]["row"]
        out.append(record_of(threads_case(row["contender"], row["threads"]), group,
                             video=row["video"], frames_per_item=16,
                             settings={"size": "224x224", "threads": row["threads"] or "auto",
                                       "repeat": len(group)}))
    return out


# ---- the DataLoader group (bench/loader_group.py's rows; bench/dataloader.py's too) ----

def loader_case(row: dict, results: dict) -> Case:
    """The case of a DataLoader row: the row's own, or (a bench/dataloader.py JSON) made
    from its contender, read order and cache. That script's cold "batched" row planned
    ahead when a "batched-no-lookahead" row stands beside it; before, nothing did."""
    if "case" in row:
        return Case(**row["case"])
    export = results["conditions"]["export"]
    workload = "loader-clips" if row["order"] == "per-clip" else "loader-batched"
    lat = float(export.get("agent_latency_ms") or 0.0)
    if row["contender"] != "fluxon":
        return Case(workload, "loader", "local", row["contender"], latency_ms=lat)
    lookahead = any(r["order"] == "batched-no-lookahead" for r in results["rows"])
    cache = "warm-kv" if row["cache"] == "warm KV" else (
        "cold+lookahead" if row["order"] == "batched" and lookahead else "cold")
    return Case(workload, "loader", export.get("store", "agent"), "fluxon", cache,
                latency_ms=lat)


def loader_records(results: dict) -> list[Record]:
    """One record per DataLoader row: clips/s per epoch, CPU per clip, the first epoch's
    FluxonFS stats and frame check, the row's own timings as counts."""
    out = []
    for row in results["rows"]:
        case, epochs, check = loader_case(row, results), row["epochs"], row["check"]
        stats = row.get("fluxon_stats") or {}
        items = sum(e["items"] for e in epochs)
        cpu = [e["cpu_s"] for e in epochs if e.get("cpu_s") is not None]
        first_items = epochs[0]["items"] if epochs else 0
        failed = row["errors"] or (check and not check["ok"])
        counts = {k: row[k] for k in ("epoch_s", "workers_up_s", "first_batch_s",
                                      "other_cpu_cores", "redone", "machine_busy",
                                      "model_cores")
                  if row.get(k) is not None}
        if row.get("worker_cpu"):  # each worker's cores; their sum over the cores they had
            busy = row["worker_cpu"]
            cores = results["conditions"]["machine"].get("cores") or len(busy)
            counts.update(worker_cpu=busy, cores_busy=sum(busy) / min(len(busy), cores))
            if row.get("model_cores") is not None:  # what the other machines' stand-ins left
                left = min(len(busy), cores - row["model_cores"])
                counts["cores_busy_left"] = sum(busy) / left
        counts.update({k: stats[k] for k in ("reads", "kv_hits", "kv_misses", "index_scans",
                                             "index_from_kv", "ahead_pages", "ahead_hits",
                                             "ahead_wasted") if k in stats})
        if check and check.get("by_codec") and not check["ok"]:
            counts["by_codec"] = {c: v["verdict"] for c, v in check["by_codec"].items()}
        record = Record(
            case=case, settings={"workers": results["conditions"]["loader"]["workers"],
                                 "batch_size": results["conditions"]["loader"]["batch_size"]},
            rounds=len(epochs), items=items, frames_per_item=16,
            items_per_s=row["clips_per_s"], items_per_s_rounds=[e["clips_per_s"] for e in epochs],
            cpu_s=sum(cpu) / items if cpu and len(cpu) == len(epochs) and items else None,
            mib_per_item=(stats["remote_bytes"] / MiB / first_items
                          if "remote_bytes" in stats and first_items else None),
            requests_per_item=(stats["remote_reads"] / first_items
                               if "remote_reads" in stats and first_items else None),
            ok=not failed,
            verdict=(f"FAILED on {row['errors']} item(s): {row['first_error']}" if row["errors"]
                     else check["verdict"] if check else "–"),
            frames_checked=check["frames"] if check else 0,
            frames_exact=check["bit_exact"] if check else 0,
            frames_wrong=len(check["wrong"]) + len(check["off"]) if check else 0,
            errors=[row["first_error"]] if row.get("first_error") else [], counts=counts)
        out.append(record)
    return out


# ---- the LeRobot group (bench/lerobot_group.py's runs; bench/lerobot.py's too) ----

def lerobot_records(results: dict) -> list[Record]:
    """One record per run and contender: items/s over the passes, the main process's peak
    RSS (the largest worker's in counts), the client's and the servers' CPU-seconds, and
    the frame check (exact, right, wrong; wrong *_is_pad flags count as wrong)."""
    from lerobot_group import RUNS, case_of

    latency = float(results.get("latency_ms", results["settings"].get("latency_ms", 10.0)))
    out = []
    for run, by_name in results["runs"].items():
        for name, x in by_name.items():
            ran = [p for p in x.get("passes", []) if "items_per_s" in p]
            check = x.get("check") or {}
            wrong = check.get("wrong", 0) + check.get("pad_flags_wrong", 0)
            verdict = (f"FAILED: {x['error']}" if "error" in x else
                       f"{check['frames']} checked: {check['exact']} exact, {check['right']} "
                       f"right, {check['wrong']} wrong" + (
                           f", {check['pad_flags_wrong']} bad pad flags"
                           if check.get("pad_flags_wrong") else ""))
            counts = {k: x[v] for k, v in (("worker_rss_mib", "worker_mib"),
                                            ("client_cpu_s", "client_cpu_s"),
                                            ("servers_cpu_s", "servers_cpu_s"))
                      if x.get(v) is not None}
            out.append(Record(
                case=case_of(run, name, latency), settings={"workers": RUNS[run][1]},
                rounds=len(ran), items=sum(p.get("items", 0) for p in ran),
                items_per_s=x.get("items_per_s"),
                items_per_s_rounds=[p["items_per_s"] for p in ran],
                peak_rss_mib=x.get("main_mib"), ok="error" not in x and not wrong,
                verdict=verdict, frames_checked=check.get("frames", 0),
                frames_exact=check.get("exact", 0), frames_wrong=wrong,
                errors=[x["error"]] if "error" in x else [], counts=counts))
    return out


# ---- the A-V group (bench/av_group.py's rows; bench/av_clips.py's passes too) ----

def av_note(videos: list[str], items_per_video: int) -> str:
    """The report's note of the videos the items came from (the group's, an old JSON's)."""
    return f"videos: {', '.join(videos)}; {items_per_video} random spans of each"


def av_case(contender: str, latency_ms: float | None) -> Case:
    """The case of a bench/av_clips.py row: on the local files (``latency_ms`` None), or
    through its remote-store model ("fluxon cold", "fluxon warm", the peers' downloads)."""
    family = contender.split(" ")[0]  # "decord AVReader", "fluxon (exact_audio=False)"
    if latency_ms is None:
        return Case("av-clips", "av", "local", family,
                    access=PREROLL_AUDIO if PREROLL_AUDIO in contender else "")
    cache = {"fluxon cold": "cold", "fluxon warm": "warm-kv"}.get(contender, "")
    return Case("av-clips-open", "av", "agent", family, cache,
                access="" if family == "fluxon" else "download", latency_ms=latency_ms,
                bandwidth_mbps=50.0)


def av_rows(results: dict) -> list[dict]:
    """The A-V group's rows; a bench/av_clips.py JSON's as rows of one pass each (it kept
    only each row's fastest pass), its local passes and its remote ones at --latency-ms."""
    if "rows" in results:
        return results["rows"]
    latency = float(results["settings"]["latency_ms"])
    return [{"case": asdict(av_case(p["contender"], latency if remote else None)),
             "row": p["contender"],
             "passes": [{**p, "check": p["frames"], "extra": {},
                         "error_count": len(p["errors"])}]}
            for remote, passes in ((False, results["passes"]), (True, results.get("remote", [])))
            for p in passes]


def audio_counts(audio: list[dict]) -> dict[str, Any]:
    """A row's audio verdicts (bench/av_group.audio_verdict's, one per item): the items
    exact, overall and per video; where not, the shifts at which they match, how many match
    nowhere, the largest difference; and every item's verdict (its max diff None where the
    samples were not all numbers)."""
    off = [a for a in audio if not a["exact"]]
    diffs = [a["max_diff"] for a in off if not math.isnan(a["max_diff"])]
    out: dict[str, Any] = {
        "audio_per_item": [{**a, "max_diff": None if math.isnan(a["max_diff"])
                            else a["max_diff"]} for a in audio],
        "audio_items": len(audio), "audio_exact": len(audio) - len(off),
        "audio_by_video": {video: [sum(a["exact"] for a in mine), len(mine)]
                           for video, mine in grouped(audio, lambda a: a["video"]).items()},
        "audio_shifts": sorted({a["shift"] for a in off if a["shift"] is not None}),
        "audio_no_match": sum(a["shift"] is None for a in off)}
    if audio:
        out["audio_exact_share"] = out["audio_exact"] / len(audio)
    if diffs:
        out["audio_max_diff"] = max(diffs)
    return out


def av_records(results: dict) -> list[Record]:
    """One record per A-V case over its passes (items/s, CPU and the origin's bytes and
    requests per item as record_of counts them), the audio verdicts in counts."""
    out = []
    for row in av_rows(results):
        passes = row["passes"]
        record = record_of(Case(**row["case"]), passes, frames_per_item=16,
                           settings={"size": "224x224", "threads": 1, "passes": len(passes)})
        record.counts.update(audio_counts([a for p in passes for a in p["audio"]]))
        out.append(record)
    return out


def meta_of(results: dict, suite: str, argv: Iterable[str] | None = None) -> dict[str, Any]:
    """The results file's meta from a group's results."""
    c = results["conditions"]
    return {"suite": suite, "command": results.get("command"),
            "argv": list(argv) if argv is not None else None,
            "generated": results.get("generated"), "duration_s": results.get("duration_s"),
            "settings": results.get("settings", {}), "machine": c["machine"],
            "versions": c["versions"], "videos": results.get("videos", []),
            "notes": results.get("notes", []), "skipped": results.get("skipped", {}),
            "store": c.get("store") or c.get("export")}
