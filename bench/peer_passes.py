"""What the peer children run (each in a spawned process): a peer library, or fluxon's
decoder alone, on the local files (per-video groups: every clip of a video through one
handle, ``repeat`` times; the decode floor), and the long-lived peer workers of the
round groups reading their items from the remote store model."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import Pass, error_text, failed_pass, peak_rss_mib, reset_peak_rss

SIZE = 224  # the round groups' output size (square)


# ---- per-video groups: the codecs dataset on the local files ----

def timed_repeats(task: dict, item: dict, row: dict, open_handle: Callable[[int], Any],
                  exact: bool, after: Callable[[], None] = lambda: None) -> list[dict]:
    """``repeat`` passes over one item's clips, each through a handle opened (and timed) for
    it; frames checked on the first; the peak RSS over all of them."""
    from frames import CheckResult, Reference

    ref = Reference.load(Path(item["ref"]))
    info = {k: item[k] for k in ("height", "width")}
    info.update(clips=len(item["clips"]), frames_per_clip=len(item["clips"][0]))
    passes: list[dict] = []
    reset_peak_rss()
    for r in range(task["repeat"]):
        one = Pass(row, CheckResult(exact_required=exact) if r == 0 else None, extra=dict(info))
        try:
            t0 = time.perf_counter()
            handle = open_handle(r)
            one.extra["open_ms"] = (time.perf_counter() - t0) * 1e3
            try:
                for clip in item["clips"]:
                    started = one.clock()
                    frames = handle.read(clip)
                    one.took(started)
                    one.add_stats(item["video"], handle.stats)
                    if one.check is not None:
                        one.check.add(frames, clip, ref)
            finally:
                handle.close()
            after()
            passes.append(one.result({}))
        except Exception as exc:  # noqa: BLE001 - a failing contender is a finding
            passes.append({**failed_pass(row, error_text(exc)[:100]), "extra": info})
            break
    for p in passes:
        p["extra"]["peak_rss_mib"] = peak_rss_mib()
    return passes


def row_of(task: dict, item: dict, contender: str, cache: str) -> dict:
    return {"contender": contender, "cache": cache, "workload": item["workload"],
            "video": item["video"], "sweep": task.get("sweep", False),
            "piece_size": task.get("fluxon", {}).get("piece_size"),
            "latency_ms": task.get("fluxon", {}).get("agent_latency_ms")}


def local_task(task: dict) -> list[dict]:
    """A peer (or fluxon's decoder) on the local files."""
    from contenders import index_ms, open_handle

    contender, threads = task["contender"], task["threads"]

    def opener(item: dict) -> Callable[[int], Any]:
        return lambda r: open_handle(contender, Path(item["path"]), item["height"],
                                     item["width"], threads, native=item["native"])

    opener(task["items"][0])(0).close()  # load and initialise the library, untimed
    out = []
    for item in task["items"]:
        scan = index_ms(contender, Path(item["path"]))
        passes = timed_repeats(task, item, row_of(task, item, contender, "local"),
                               opener(item), contender.startswith("fluxon"))
        out += [{**p, "extra": {**p["extra"], "index_ms": scan}} for p in passes]
    return out


def floor_task(task: dict) -> list[dict]:
    """The decode floor of every clip (median of repeats)."""
    from contenders import decode_floor_ms

    return [{"floor": True, "workload": item["workload"], "video": item["video"],
             "floor_ms": [statistics.median(decode_floor_ms(Path(item["path"]), clip,
                                                            task["threads"])
                                            for _ in range(task["repeat"]))
                          for clip in item["clips"]]} for item in task["items"]]


# ---- round groups: items from the remote store model ----

@functools.cache
def reference(path: str) -> Any:
    """The reference frames of a video, loaded once per process."""
    from frames import Reference

    return Reference.load(Path(path))


def peer_hello(family: str, path: str, threads: int) -> dict:
    """Load the library and its codecs, untimed (torchcodec's first use takes seconds), and
    say which versions this worker runs. A worker lives for the whole run, like a DataLoader
    worker with persistent_workers=True: the filesystem objects and codecs stay loaded."""
    import aiohttp
    import fsspec
    import fsspec.implementations.http  # noqa: F401

    from contenders import open_handle, peer_versions

    handle = open_handle(family, Path(path), SIZE, SIZE, threads)
    handle.read([0])
    handle.close()
    from harness import module_versions

    found = {"fsspec": fsspec.__version__, "aiohttp": aiohttp.__version__,
             **module_versions("s3fs", "obstore")}  # the S3 scenario's, where installed
    return {**found, **peer_versions(family, ("libavcodec", "libavformat", "libswscale"))}


def peer_pass(task: dict) -> dict:
    """A row's items: each opened anew (PyAV gets the dataset's frame -> pts table, untimed:
    "PyAV users keep their timestamps in the manifest"), read clip by clip (or, for the
    union row, in one pass per cluster), checked; timed from open to frames, close included."""
    from contenders import KeyframeIndex, PeerSource, open_handle, peer_metadata
    from frames import CheckResult
    from stores import Counters

    row, videos = task["row"], task["videos"]
    source, counters = PeerSource(row, task.get("s3")), Counters(task["store"], "peer")
    metadata = task["workload"] == "metadata"
    one = Pass(row, None if metadata else CheckResult(exact_required=False),
               extra={"fallbacks": 0})

    def clips(f: Any, video: dict, item: dict) -> list:
        handle = open_handle(row["family"], f, SIZE, SIZE, task["threads"],
                             seek_mode=row.get("seek_mode", "exact"),
                             index=KeyframeIndex(video["pts"], video["keys"]))
        outs = (handle.read_union(item["clips"]) if row.get("union")
                else [handle.read(c) for c in item["clips"]])
        handle.close()
        one.extra["fallbacks"] += getattr(handle, "fallbacks", 0)
        return outs

    before = counters.start()
    for item in task["items"]:
        video = videos[item["video"]]
        use = (lambda f: peer_metadata(row, f)) if metadata else \
            (lambda f, video=video, item=item: clips(f, video, item))
        got = one.time(item["video"], lambda: source.read(video, use))
        if got is not None and metadata:
            one.check_metadata(video, *got)
        elif got is not None:
            one.check_item(item["video"], item["clips"], got, reference(video["ref"]))
    return one.result(counters.since(before))
