"""What fluxon's children run (each pass in a new spawned process): reads through
FluxonFS cold or warm (per-video groups: one video's clips; round groups: a round's
items, optionally with the next item's requests as lookahead), read_many over a batch,
and video_metadata."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import Pass, peak_rss_mib, reset_peak_rss
from peer_passes import SIZE, reference, row_of, timed_repeats

# How long a shared stat lives in the shared rows: long enough to outlast the
# passes between the cold pass that writes it and the row that reads it (a
# static training set can afford minutes; the default TTL is 5 s).
SHARED_STAT_TTL_MS = 120_000
ITEM_STATS = ("open_ms", "index_ms", "kv_round_trips", "kv_hits", "kv_misses", "remote_reads",
              "remote_bytes", "frames_decoded", "decoder_seeks", "stat_requests",
              "open_round_trips", "first_frame_waits")
METADATA_STATS = ("kv_round_trips", "kv_hits", "kv_misses", "remote_reads", "remote_bytes",
                  "index_ms", "stat_requests", "open_round_trips")


# ---- per-video groups ----

def fluxon_task(task: dict) -> list[dict]:
    """fluxon through FluxonFS: "cold" (the file's KV pieces evicted and a new patcher each
    pass, then warm-reader passes through the last pool) or "warm-kv" (Redis warm from an
    earlier process, a new patcher each pass)."""
    from contenders import FluxonPoolHandle
    from stores import evict, make_patcher, settle

    fx, out = task["fluxon"], []
    for item in task["items"]:
        held: dict[str, Any] = {}

        def pool(r: int, fresh: bool = True, relpath: str = item["relpath"]) -> Any:
            if fresh:
                close(held)
                if task["cache"] == "cold":
                    evict(fx, relpath)
                held["patcher"] = make_patcher(fx)
                held["pool"] = held["patcher"].open_video_reader_pool()
            return FluxonPoolHandle(held["pool"], fx["export"], relpath, item["height"],
                                    item["width"], task["threads"])

        def after() -> None:
            settle(held["patcher"]) if task["cache"] == "cold" else close(held)
        out += timed_repeats(task, item, row_of(task, item, "fluxon", task["cache"]), pool,
                             True, after)
        if task["cache"] == "cold" and task.get("warm_reader", True) and held:
            out += timed_repeats(task, item, row_of(task, item, "fluxon", "warm-reader"),
                                 lambda r: pool(r, fresh=False), True, after)
        close(held)
    return out


def close(held: dict) -> None:
    if held.get("pool") is not None:
        held.pop("pool").close()
        held.pop("patcher").close()


def batched_task(task: dict) -> list[dict]:
    """Every clip of the long video in one read_many_numpy_with_stats call, warm KV, a new
    pool each pass (one item: the call)."""
    from fluxon_video import FluxonFsVideoReadRequest

    from frames import CheckResult, Reference
    from stores import make_patcher

    fx, item = task["fluxon"], task["items"][0]
    row = row_of(task, item, "fluxon read_many", "warm-kv")
    ref = Reference.load(Path(item["ref"]))
    requests = [FluxonFsVideoReadRequest(fx["export"], item["relpath"], item["height"],
                                         item["width"], task["threads"], tuple(clip))
                for clip in item["clips"]]
    out = []
    reset_peak_rss()
    for r in range(task["repeat"]):
        one = Pass(row, CheckResult(exact_required=True) if r == 0 else None,
                   extra={"clips": len(requests), "frames_per_clip": len(item["clips"][0])})
        with make_patcher(fx) as patcher, patcher.open_video_reader_pool() as pool:
            results = one.time(item["video"], lambda: pool.read_many_numpy_with_stats(requests))
        if results:
            one.add_stats(item["video"], {**results[0].stats.as_dict(),  # shared by the group
                                          "group_size": results[0].group_size})
            one.check_item(item["video"], item["clips"], [x.frames for x in results], ref) \
                if one.check else None
        out.append(one.result({}))
    for p in out:
        p["extra"]["peak_rss_mib"] = peak_rss_mib()
    return out



# ---- round groups ----

def fluxon_items(task: dict, pool: Any, patcher: Any, row: dict) -> Pass:
    """One fluxon pass over the task's items (a batched item in one read_many call; metadata:
    video_metadata), its read stats kept per item."""
    from fluxon_video import FluxonFsVideoReadRequest

    from frames import CheckResult

    export, threads, workload = task["fluxon"]["export"], task["threads"], task["workload"]
    one = Pass(row, None if workload == "metadata" else CheckResult(exact_required=True))

    def requests_of(item: dict) -> list:
        relpath = task["videos"][item["video"]]["relpath"]
        return [FluxonFsVideoReadRequest(export, relpath, SIZE, SIZE, threads, tuple(c))
                for c in item["clips"]]

    ahead = row["cache"] == "cold+lookahead" and workload != "metadata"
    coming = [requests_of(i) for i in task["items"][1:]] + [[]] if ahead else []
    for position, item in enumerate(task["items"]):
        video = task["videos"][item["video"]]
        if workload == "metadata":
            got = one.time(item["video"], lambda: patcher.video_metadata_with_stats(
                export, video["relpath"]))
            if got is not None:
                meta, s = got
                one.add_stats(item["video"], {**{k: getattr(s, k) for k in METADATA_STATS},
                                              "index_source": s.index_source})
                one.check_metadata(video, meta.num_frames, meta.average_fps, meta.duration_seconds)
            continue
        requests = requests_of(item)
        results = one.time(item["video"], lambda: (
            pool.read_many_numpy_with_stats(requests, ahead=coming[position]) if ahead else
            pool.read_many_numpy_with_stats(requests) if workload == "batched" else
            [pool.read_frames_numpy_with_stats(export_name=export, relpath=r.relpath,
                                               height=SIZE, width=SIZE, num_threads=threads,
                                               indices=r.indices) for r in requests]))
        if results is None:
            continue
        # A batched item is one decode for the group: its stats are the first result's.
        stats = results[:1] if workload == "batched" else results
        s = stats[0].stats
        one.add_stats(item["video"], {"path": s.path + (f" ({s.fallback})" if s.fallback else ""),
                                      **{k: sum(getattr(r.stats, k) for r in stats)
                                         for k in ITEM_STATS}})
        one.check_item(item["video"], item["clips"], [r.frames for r in results],
                       reference(video["ref"]))
    return one


def local_items(task: dict) -> dict:
    """fluxon's decoder on the local files, no store: what decoding alone costs (reference).
    A new open per item; each file's index built once, untimed (as in the per-video groups)."""
    from contenders import FluxonLocalHandle
    from frames import CheckResult

    videos = task["videos"]
    for item in task["items"]:
        FluxonLocalHandle.prepare(Path(videos[item["video"]]["path"]))
    one = Pass({"family": "fluxon", "cache": "local file"}, CheckResult(exact_required=True))

    def read(path: Path, clips: list[list[int]]) -> tuple[list, int]:
        handle = FluxonLocalHandle(path, SIZE, SIZE, task["threads"])
        outs = [handle.read(clip) for clip in clips]
        handle.close()
        return outs, handle.stats["frames_decoded"]  # one clip per item

    for item in task["items"]:
        video = videos[item["video"]]
        got = one.time(item["video"], lambda: read(Path(video["path"]), item["clips"]))
        if got is not None:
            one.add_stats(item["video"], {**{k: 0 for k in ITEM_STATS}, "frames_decoded": got[1]})
            one.check_item(item["video"], item["clips"], got[0], reference(video["ref"]))
    return one.result({})


def fluxon_pass(task: dict) -> dict:
    """One new process: a cold or warm-kv pass (cold clips: then warm-reader, the same pool
    again); or, to prime the shared stats, only what another process of the same identity
    leaves behind (metadata_cache_shared); or (local_only) fluxon's decoder on the local
    files, in a process of its own as the warm pass has, so neither row inherits the
    other's warmed-up process."""
    import fluxon_video as fv

    from harness import fluxon_versions
    from stores import Counters, cpu_s, make_patcher, settle

    fv.decode_local_frames(task["warm_path"], [0], SIZE, SIZE, task["threads"])  # untimed
    if task.get("local_only"):
        return {"passes": [local_items(task)], "versions": fluxon_versions()}
    counters, patcher = Counters(task["store"], "fluxon"), make_patcher(task["fluxon"])
    if task.get("prime_shared_stats"):
        with patcher:
            for item in task["items"]:
                patcher.file_version(task["fluxon"]["export"],
                                     task["videos"][item["video"]]["relpath"])
        return {"passes": []}
    out, pool = [], patcher.open_video_reader_pool()
    try:
        for cache in [task["cache"]] + ["warm-reader"] * bool(task.get("warm_reader")):
            before, store_cpu = counters.start(), cpu_s(task["store_pids"])
            one = fluxon_items(task, pool, patcher, {"family": "fluxon", "cache": cache})
            out.append(one.result(counters.since(before)))
            settle(patcher)  # the backfills' writes are the store's work for this pass too
            out[-1]["servers_cpu_s"] = cpu_s(task["store_pids"]) - store_cpu
    finally:
        pool.close()
        patcher.close()
    return {"passes": out, "versions": fluxon_versions()}


