"""What one benchmark child process does (``run.py --phase TASK.json``).

Every measurement runs in a child process of its own, so that its peak RSS
is its own and a "new process" really starts with nothing cached in it. A
task is a JSON document written by run.py; the child writes its records to
``TASK.json.out``.

A *pass* reads every clip of one video through one handle (see
contenders.py) and times the handle's opening and each read; frames are
checked right after each read, outside the timed part.
"""

from __future__ import annotations

import json
import resource
import statistics
import time
from dataclasses import asdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from contenders import FluxonPoolHandle, Handle, index_ms, open_local
from decode_floor import decode_floor_ms
from fluxon_access import evict, make_patcher, settle
from frames import CheckResult, Reference
from local_records import Record, Repeat
from machine import peer_versions
from passes import error_text


def reset_peak_rss() -> None:
    """Start a new high-water mark of this process's RSS (Linux >= 4.0; else a no-op)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss_mib() -> float:
    """This process's RSS high-water mark since the last reset_peak_rss(), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_pass(open_handle: Callable[[], Handle], clips: Sequence[Sequence[int]],
               check: CheckResult | None, ref: Reference | None) -> Repeat:
    """Open one handle, read every clip; the pass time is open + reads, checks excluded."""
    t0 = time.perf_counter()
    handle = open_handle()
    done = Repeat((time.perf_counter() - t0) * 1e3)
    try:
        for clip in clips:
            t0 = time.perf_counter()
            frames = handle.read(clip)
            done.clip_ms.append((time.perf_counter() - t0) * 1e3)
            done.add_stats(handle.stats)
            if check is not None and ref is not None:
                check.add(frames, clip, ref)
            del frames
    finally:
        handle.close()
    done.pass_ms = done.open_ms + sum(done.clip_ms)
    return done


def _run_repeats(record: Record, repeat: int,
                 one_pass: Callable[[int, CheckResult | None], Repeat], exact: bool) -> None:
    """``repeat`` passes (frames checked on the first); peak RSS is measured over them."""
    check = CheckResult(exact_required=exact)
    reset_peak_rss()
    try:
        for r in range(repeat):
            record.repeats.append(one_pass(r, check if r == 0 else None))
    except Exception as exc:  # noqa: BLE001 - a failing contender is a finding, not a crash
        record.error = error_text(exc)
    record.peak_rss_mib = peak_rss_mib()
    record.check = check.as_dict()


# ---- peers and fluxon on local files ----

def run_local(task: dict) -> list[Record]:
    contender, threads = task["contender"], task["threads"]

    def open_item(item: dict) -> Handle:
        return open_local(contender, Path(item["path"]), item["height"], item["width"],
                          item["native"], threads)

    # Load the library and let it initialise (torchcodec takes seconds on first
    # use), untimed: a training process pays that once, not per video.
    open_item(task["items"][0]).close()
    records = []
    for item in task["items"]:
        ref = Reference.load(Path(item["ref"]))
        record = Record.of(task, item, "local", contender)
        record.index_ms = index_ms(contender, Path(item["path"]))

        def one_pass(r: int, check: CheckResult | None, item: dict = item,
                     ref: Reference = ref) -> Repeat:
            return timed_pass(lambda: open_item(item), item["clips"], check, ref)

        _run_repeats(record, task["repeat"], one_pass, exact=contender.startswith("fluxon"))
        records.append(record)
    return records


# ---- fluxon through FluxonFS ----

def _fluxon_record(task: dict, item: dict, cache: str,
                   pool_for_repeat: Callable[[int], Any],
                   after_repeat: Callable[[], None]) -> Record:
    """Repeated passes over one item; pool_for_repeat(r) gives the pool of repeat r."""
    fx = task["fluxon"]
    record = Record.of(task, item, cache, "fluxon")
    ref = Reference.load(Path(item["ref"]))

    def one_pass(r: int, check: CheckResult | None) -> Repeat:
        pool = pool_for_repeat(r)
        result = timed_pass(lambda: FluxonPoolHandle(pool, fx["export"], item["relpath"],
                                                     item["height"], item["width"],
                                                     task["threads"]),
                            item["clips"], check, ref)
        after_repeat()
        return result

    _run_repeats(record, task["repeat"], one_pass, exact=True)
    return record


class Pools:
    """The patcher and reader pool of the current repeat."""

    def __init__(self, fx: dict) -> None:
        self.fx = fx
        self.patcher: Any = None
        self.pool: Any = None

    def new(self) -> Any:
        """Close the current patcher and pool, and return a new pool on a new patcher."""
        self.close()
        self.patcher = make_patcher(self.fx)
        self.pool = self.patcher.open_video_reader_pool()
        return self.pool

    def settle(self) -> None:
        """Wait for the backfill, so that every piece read so far is in the KV."""
        if self.patcher:
            settle(self.patcher)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.patcher.close()
        self.patcher = self.pool = None


def run_fluxon_cold(task: dict) -> list[Record]:
    """Per video: cold passes (its KV pieces evicted, a new patcher each), then
    warm-reader passes through the last cold pass's pool."""
    fx = task["fluxon"]
    records = []
    for item in task["items"]:
        pools = Pools(fx)

        def cold(r: int, relpath: str = item["relpath"], pools: Pools = pools) -> Any:
            evict(fx, relpath)
            return pools.new()

        records.append(_fluxon_record(task, item, "cold", cold, pools.settle))
        if task.get("warm_reader", True) and pools.pool is not None:
            records.append(_fluxon_record(task, item, "warm-reader",
                                          lambda r, pools=pools: pools.pool, pools.settle))
        pools.close()
    return records


def run_fluxon_warm_kv(task: dict) -> list[Record]:
    """Redis warm from an earlier process; a new patcher (and so new readers) each repeat."""
    records = []
    for item in task["items"]:
        pools = Pools(task["fluxon"])
        records.append(_fluxon_record(task, item, "warm-kv", lambda r, pools=pools: pools.new(),
                                      pools.close))
    return records


def run_batched(task: dict) -> list[Record]:
    """All clips of one video in one read_many_numpy_with_stats call, warm KV, new pool each."""
    from fluxon_video import FluxonFsVideoReadRequest

    fx = task["fluxon"]
    item = task["items"][0]
    record = Record.of(task, item, "warm-kv", "fluxon read_many")
    requests = [FluxonFsVideoReadRequest(fx["export"], item["relpath"], item["height"],
                                         item["width"], task["threads"], tuple(clip))
                for clip in item["clips"]]
    ref = Reference.load(Path(item["ref"]))

    def one_pass(r: int, check: CheckResult | None) -> Repeat:
        with make_patcher(fx) as patcher, patcher.open_video_reader_pool() as pool:
            t0 = time.perf_counter()
            results = pool.read_many_numpy_with_stats(requests)
            ms = (time.perf_counter() - t0) * 1e3
        if check is not None:
            for request, result in zip(requests, results):
                check.add(result.frames, request.indices, ref)
        done = Repeat(results[0].stats.open_ms, [ms], ms, group_size=results[0].group_size)
        done.add_stats(results[0].stats.as_dict())  # shared by the group
        return done

    _run_repeats(record, task["repeat"], one_pass, exact=True)
    return [record]


def run_floor(task: dict) -> list[dict]:
    """The decode floor of every clip (median of repeats)."""
    records = []
    for item in task["items"]:
        floors = []
        for clip in item["clips"]:
            runs = [decode_floor_ms(Path(item["path"]), clip, task["threads"])
                    for _ in range(task["repeat"])]
            floors.append(statistics.median(runs))
        records.append({"workload": item["workload"], "video": item["video"],
                        "floor_ms": floors})
    return records


TASKS: dict[str, Callable[[dict], list[Any]]] = {
    "local": run_local,
    "fluxon-cold": run_fluxon_cold,
    "fluxon-warm-kv": run_fluxon_warm_kv,
    "batched": run_batched,
    "floor": run_floor,
}


def versions(contender: str | None) -> dict[str, str]:
    """Library versions this child ran with."""
    if contender in ("decord", "pyav", "torchcodec", "spdl"):
        return peer_versions(contender)
    from fluxon_video.native import require_native

    return dict(require_native()[1].library_versions())


def main(task_path: str) -> None:
    task = json.loads(Path(task_path).read_text())
    records = TASKS[task["kind"]](task)
    out = {"records": [r if isinstance(r, dict) else asdict(r) for r in records],
           "versions": versions(task.get("contender"))}
    Path(task_path + ".out").write_text(json.dumps(out))
