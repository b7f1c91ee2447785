"""What sealing KV entries costs warm reads (see --help or bench/README.md)."""

from __future__ import annotations

import random
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dataset import prepare, sample_clips, small_specs  # noqa: E402
from frames import cli_reference, digest, needed  # noqa: E402
from harness import (header, machine, machine_line, publish, say, scenario_parser,  # noqa: E402
                     table)
from stores import KV_KEY, TOKEN  # noqa: E402

SIZE = 224
PROTECTIONS = ("crc32 (d7a4d16)", "mac", "encrypt")


class Crc32Sealer:
    """d7a4d16's entry, for the baseline: bytes, their length and a CRC-32 bound to the
    key, which anyone can recompute (what sealing replaced). Bench only."""

    def seal(self, export: str, key: str, data: bytes, bytes_field: str,
             bound: str = "") -> dict[str, bytes]:
        crc = zlib.crc32(data, zlib.crc32(f"{key}{bound}".encode()))
        return {bytes_field: data, "len": str(len(data)).encode(), "crc32": str(crc).encode()}

    def identity_tag(self, export: str, token: str) -> str:
        import hashlib

        return hashlib.sha256(token.encode()).hexdigest()[:32]  # d7a4d16's stat key

    def open(self, export: str, key: str, fields: Any, bytes_field: str, bound: str = "",
             expected_len: int | None = None) -> Any:
        from fluxon_video.fs.kv_seal import Opened, Verdict

        if not fields:
            return Opened(None, Verdict.ABSENT)
        data = fields[bytes_field]
        crc = zlib.crc32(data, zlib.crc32(f"{key}{bound}".encode()))
        if (int(fields["len"]) != len(data) or expected_len not in (None, len(data))
                or int(fields["crc32"]) != crc):
            return Opened(None, Verdict.CORRUPT)
        return Opened(bytes(data), Verdict.OK)


def patcher(root: Path, redis_url: str, protection: str) -> Any:
    import fluxon_video as fv
    from fluxon_video.fs.config import ClientSettings, FluxonFsExport

    mode = "mac" if protection.startswith("crc32") else protection
    p = fv.FluxonFsPatcher(
        # A prefix per protection: the three sets of entries live side by side in Redis,
        # so that the rounds can interleave.
        exports=[FluxonFsExport("bench", str(root), allow=["bench"],
                                cache_kv_key_prefix=f"kvseal{PROTECTIONS.index(protection)}")],
        identities={"bench": TOKEN},
        client=ClientSettings(redis_url=redis_url, kv_keys=[KV_KEY], kv_protection=mode),
        identity="bench")
    if protection.startswith("crc32"):
        p.client._checkpid().seal = Crc32Sealer()  # type: ignore[assignment]
    return p


def read_clips(root: Path, redis_url: str, protection: str, clips: list[tuple[str, list[int]]]
               ) -> tuple[list[float], float, list[list[bytes]], dict[str, int]]:
    """Wall seconds per clip (a new reader each: no page cache carried over), this
    process's CPU seconds for all of them (every thread: less swayed by other work
    on the machine than wall time), digests of the frames, and the KV counters summed."""
    seconds, digests, kv = [], [], {"kv_hits": 0, "kv_misses": 0, "remote_reads": 0}
    with patcher(root, redis_url, protection) as p:
        cpu0 = time.process_time()
        for relpath, indices in clips:
            t0 = time.perf_counter()
            with p.open_video_reader("bench", relpath, SIZE, SIZE, num_threads=1) as reader:
                frames = reader.read_frames_numpy(indices)
                stats = reader.last_stats
            seconds.append(time.perf_counter() - t0)
            digests.append([digest(f) for f in frames])
            for name in kv:
                kv[name] += getattr(stats, name)
        cpu = time.process_time() - cpu0
        p.client.backfill.wait_idle()
    return seconds, cpu, digests, kv


def open_cost_us(protection: str, repeat: int = 300) -> float:
    """Median microseconds to open (verify, and decrypt) one full piece's entry."""
    import os

    from fluxon_video.defaults import PAGE_SIZE
    from fluxon_video.fs.kv_seal import EntrySealer, Protection

    sealer: Any = (Crc32Sealer() if protection.startswith("crc32") else
                   EntrySealer([KV_KEY.encode()], Protection(protection)))
    data = os.urandom(PAGE_SIZE)
    entry = sealer.seal("bench", "k", data, "bytes")
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sealer.open("bench", "k", entry, "bytes", expected_len=len(data))
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs) * 1e6


def main() -> None:
    from fluxon_video.testing import RedisServer

    ap = scenario_parser("kv_seal.py", None, "2 videos, 24 clips, 2 rounds",
                         "kv_seal.{md,json}")
    ap.add_argument("--videos", type=int, help="H.264 360p videos of 8 s (default: 4)")
    ap.add_argument("--clips", type=int, help="random 16-frame clips a pass (default: 64)")
    ap.add_argument("--rounds", type=int, help="passes per protection, interleaved (default: 9)")
    args = ap.parse_args()
    if args.render:
        return publish(args, "kv_seal", render)
    quick = args.quick
    args.videos = args.videos or (2 if quick else 4)
    args.clips = args.clips or (24 if quick else 64)
    args.rounds = args.rounds or (2 if quick else 9)
    args.out = args.out or (args.data / "quick-results" if quick else Path(__file__).parent / "results")
    t_start = time.perf_counter()
    root = args.data / "kv_seal"
    videos = prepare(small_specs(args.videos, 0, 0, lambda k: 8.0), root)
    rng = np.random.default_rng(7)
    clips = [(v.name, clip) for v in videos
             for clip in sample_clips(v.frames, args.clips // len(videos), 16, 2, rng)]
    random.Random(7).shuffle(clips)
    say(f"{len(videos)} videos, {len(clips)} clips of 16 frames at {SIZE}x{SIZE}")
    refs = {v.name: cli_reference(v.path, SIZE, SIZE, needed(c for n, c in clips if n == v.name))
            for v in videos}
    expected = [[refs[name].digests[refs[name].position(i)] for i in indices]
                for name, indices in clips]
    per: dict[str, list[float]] = {p: [] for p in PROTECTIONS}
    cpu_per: dict[str, list[float]] = {p: [] for p in PROTECTIONS}
    wrong: dict[str, int] = {p: 0 for p in PROTECTIONS}
    kv_totals: dict[str, dict[str, int]] = {}
    with RedisServer(args.data / "kv_seal-redis") as redis_server:
        for protection in PROTECTIONS:  # fill: every clip's pieces, sealed each way
            read_clips(root, redis_server.url, protection, clips)
        for round_ in range(args.rounds):
            for protection in PROTECTIONS:
                seconds, cpu, digests, kv = read_clips(root, redis_server.url, protection,
                                                       clips)
                per[protection].append(sum(seconds) / len(seconds))
                cpu_per[protection].append(cpu / len(seconds))
                wrong[protection] += sum(d != e for got, want in zip(digests, expected)
                                         for d, e in zip(got, want))
                kv_totals[protection] = kv
                say(f"{protection} round {round_ + 1}: {per[protection][-1] * 1e3:.2f} ms a clip,"
                    f" {cpu_per[protection][-1] * 1e3:.2f} ms CPU"
                    f" ({kv['kv_hits']} KV hits, {kv['remote_reads']} origin reads)")
    results = {**header("kv_seal.py", None, time.perf_counter() - t_start, args),
               "machine": machine(), "clips": len(clips),
               "rows": [{"protection": p, "ms_per_clip": statistics.median(per[p]) * 1e3,
                         "cpu_ms_per_clip": statistics.median(cpu_per[p]) * 1e3,
                         "open_piece_us": open_cost_us(p),
                         "rounds_ms": [s * 1e3 for s in per[p]], "wrong_frames": wrong[p],
                         **kv_totals[p]} for p in PROTECTIONS]}
    publish(args, "kv_seal", render, results)


def render(results: dict) -> str:
    base = results["rows"][0]["ms_per_clip"]
    cpu_base = results["rows"][0]["cpu_ms_per_clip"]
    rows = [(r["protection"], f"{r['ms_per_clip']:.2f}", f"{r['ms_per_clip'] / base:.3f}",
             f"{r['cpu_ms_per_clip']:.2f}", f"{r['cpu_ms_per_clip'] / cpu_base:.3f}",
             f"{r['open_piece_us']:.0f}",
             str(r["kv_hits"]), str(r["remote_reads"]), str(r["wrong_frames"]))
            for r in results["rows"]]
    return "\n".join([
        "# Sealed KV entries: the cost on warm reads", "",
        f"`{results['command']}` — {machine_line(results['machine'])}", "",
        f"{results['clips']} random clips of 16 frames at {SIZE}x{SIZE}, every byte from a "
        "warm Redis on loopback (a new reader per clip, one decoder thread); the median over "
        "interleaved rounds of the mean time a clip, wall and CPU (this process, every "
        "thread; the steadier figure on a shared machine). The baseline is d7a4d16's entry "
        "(a CRC-32 anyone can recompute), re-enacted in the bench.", "",
        table(("entries", "ms a clip", "vs CRC-32", "CPU ms a clip", "vs CRC-32",
               "µs to open a 256 KiB piece",
               "KV hits (last round)", "origin reads",
               "wrong frames"), rows), ""])


if __name__ == "__main__":
    main()
