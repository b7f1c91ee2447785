"""Fuzzing the native decoder with mutated MP4, MKV and WebM files (issue 12).

A seeded run of mutants (byte flips, overwritten runs, truncations, chunk
duplications and deletions, corrupted size fields), each scanned and decoded
through the real decoder (the indexed path with the scan's index, and the
sequential path; a few frame indices including negative and out-of-range
ones; 1 and 2 threads). Worker subprocesses each take a slice of the mutants,
so a crash or a hang in one is caught and named: it must not happen, and
every exception raised must be a FluxonFsError: a FluxonFsDecodeError (or
subclass) or a FluxonFsFrameIndexError, since the bytes come from memory and
never fail to arrive.

Reproduce one mutant: ``python -m tests.test_fuzz <directory of the base
clips> <seed> <i>`` (from the repository root) decodes it in the foreground.
FLUXON_FUZZ_SEED and FLUXON_FUZZ_MUTANTS change the run.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fluxon_video._decode")
pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parent.parent
SEED = int(os.environ.get("FLUXON_FUZZ_SEED", "20260612"))
MUTANTS = int(os.environ.get("FLUXON_FUZZ_MUTANTS", "3000"))
BASES = ["h264_faststart.mp4", "h264_bframes.mkv", "vp9.webm"]
WORKERS = min(4, max(2, os.cpu_count() or 2))
HANG_S = 20.0  # one mutant's decodes take well under a second

# Frame index requests: in range, duplicates, negative (needing the index's
# count), past the end (72 frames in the base clips) and absurd.
INDEX_SETS = [[0], [0, 1, 2], [5, 30], [40, 3, 40], [-1], [-2, 0], [71], [72], [10**6],
              [-10**6], [70, 71, 72]]
HUGE = [0, 1, 7, 8, 9, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x18000000, 0x30000000, 0x10000]
# Matroska/WebM elements whose size fields are worth breaking (EBML IDs).
EBML_IDS = [bytes.fromhex(h) for h in (
    "1a45dfa3", "18538067", "1549a966", "1654ae6b", "ae", "63a2", "e0", "1f43b675", "a3",
    "a0", "a1", "1c53bb6b", "bb", "114d9b74", "4dbb", "b0", "ba", "e7", "9b")]


# ---- mutations ----

def mp4_fields(data: bytes, limit: int = 400):
    """Offsets of MP4 box size fields and of the 32-bit words in small boxes."""
    containers = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"dinf", b"edts", b"udta"}
    fields, stack = [], [(0, len(data))]
    while stack and len(fields) < limit:
        pos, end = stack.pop()
        while pos + 8 <= end and len(fields) < limit:
            size, kind = struct.unpack_from(">I4s", data, pos)
            if size < 8 or pos + size > end:
                break
            fields.append(pos)
            if kind in containers:
                stack.append((pos + 8, pos + size))
            elif size <= 4096:
                fields.extend(range(pos + 8, pos + size - 3, 4))
            pos += size
    return fields


def corrupt_size(out: bytearray, rng: random.Random, base: str) -> str:
    if base.endswith(".mp4"):
        fields = mp4_fields(bytes(out))
        if fields:
            at = rng.choice(fields)
            old = struct.unpack_from(">I", out, at)[0]
            value = rng.choice(HUGE + [old + 1, max(old - 1, 0), old * 2 & 0xFFFFFFFF,
                                       rng.getrandbits(32)])
            struct.pack_into(">I", out, at, value)
            return f"size@{at}={value:#x}"
    # Matroska: an element ID, then its size as an EBML variable-length integer.
    for _ in range(20):
        ident = rng.choice(EBML_IDS)
        hits = []
        start = out.find(ident)
        while start >= 0 and len(hits) < 64:
            hits.append(start)
            start = out.find(ident, start + 1)
        if not hits:
            continue
        at = rng.choice(hits) + len(ident)
        if at >= len(out) or out[at] == 0:
            continue
        length = 9 - out[at].bit_length()
        if at + length > len(out):
            continue
        top = (1 << (7 * length)) - 1
        value = rng.choice([0, 1, top, top - 1, rng.getrandbits(7 * length),
                            int.from_bytes(out[at:at + length], "big") & top ^ 1])
        out[at:at + length] = ((1 << (7 * length)) | value).to_bytes(length, "big")
        return f"vint@{at}={value:#x}"
    return "size:none"


def position(rng: random.Random, n: int) -> int:
    """A byte offset, half of the time in the first or last 4 KiB, where the
    headers and indexes (moov, EBML header, Tracks, Cues) are."""
    if rng.random() < 0.5:
        return rng.randrange(n)
    edge = rng.randrange(min(n, 4096))
    return edge if rng.random() < 0.7 else n - 1 - edge


def mutate(data: bytes, rng: random.Random, base: str) -> tuple[bytes, list[str]]:
    out = bytearray(data)
    ops = []
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        kind = rng.choice(["flip", "flip", "run", "truncate", "duplicate", "delete", "size",
                           "size"])
        n = len(out)
        if n < 16:
            break
        if kind == "flip":
            count = rng.randint(1, 32)
            for _ in range(count):
                out[position(rng, n)] ^= 1 << rng.randrange(8)
            ops.append(f"flip x{count}")
        elif kind == "run":
            at, length = position(rng, n), rng.randint(1, 512)
            fill = rng.choice(["random", "zero", "ff"])
            chunk = (rng.randbytes(length) if fill == "random"
                     else (b"\0" if fill == "zero" else b"\xff") * length)
            out[at:at + length] = chunk[:n - at]
            ops.append(f"run {fill} {at}+{length}")
        elif kind == "truncate":
            at = rng.randrange(n // 2, n) if rng.random() < 0.7 else rng.randrange(n)
            del out[at:]
            ops.append(f"truncate {at}")
        elif kind == "duplicate":
            src, length, dst = position(rng, n), rng.randint(1, 4096), position(rng, n)
            out[dst:dst] = out[src:src + length]
            ops.append(f"duplicate {src}+{length}@{dst}")
        elif kind == "delete":
            at, length = position(rng, n), rng.randint(1, 4096)
            del out[at:at + length]
            ops.append(f"delete {at}+{length}")
        else:
            ops.append(corrupt_size(out, rng, base))
    return bytes(out), ops


def make_mutant(bases: dict[str, bytes], seed: int, i: int):
    """(base name, mutant bytes, operations, decode plan) of mutant i of seed."""
    rng = random.Random(f"{seed}:{i}")
    base = BASES[i % len(BASES)]
    data, ops = mutate(bases[base], rng, base)
    plan = {"threads": rng.choice([1, 2]), "indexed": rng.choice(INDEX_SETS),
            "sequential": rng.choice(INDEX_SETS)}
    return base, data, ops, plan


# ---- one mutant through the decoder ----

def exercise(data: bytes, plan: dict, name: str) -> list[tuple[str, str, str]]:
    """(step, outcome, message) per step; outcome "ok" or the exception's class."""
    from fluxon_video import _avio, _decode, _demux, errors
    from fluxon_video.sources import BytesRangeSource

    EXPECTED = (errors.FluxonFsDecodeError, errors.FluxonFsFrameIndexError)

    steps = []

    def step(label, call):
        try:
            result = call()
        except Exception as exc:  # noqa: BLE001 - classified by the test
            if not isinstance(exc, errors.FluxonFsError):
                kind = f"NOT-FLUXON {type(exc).__module__}.{type(exc).__qualname__}"
            elif not isinstance(exc, EXPECTED):
                # The bytes are in memory and always arrive: an I/O, permission
                # or timeout class would misreport a bad file.
                kind = f"NOT-FLUXON-DECODE {type(exc).__name__}"
            else:
                kind = type(exc).__name__
            steps.append((label, kind, str(exc)[:300]))
            return None
        steps.append((label, "ok", ""))
        return result

    src = BytesRangeSource(data, name)
    with _avio.ByteSource(src, len(data), name=name, page_size=16384) as bs:
        index = step("scan", lambda: _demux.scan_packets(bs, name))
        if index is not None and index.trusted:
            step(f"indexed {plan['indexed']} t{plan['threads']}",
                 lambda: _decode.decode_frames(bs, plan["indexed"], 24, 32, plan["threads"],
                                               index=index))
        step(f"sequential {plan['sequential']} t{plan['threads']}",
             lambda: _decode.decode_frames(bs, plan["sequential"], 24, 32, plan["threads"]))
    return steps


def worker_main(media_dir: str, seed: int, first: int, stop: int) -> None:
    """Decode mutants [first, stop), one JSON line per event on stdout."""
    bases = {name: (Path(media_dir) / name).read_bytes() for name in BASES}
    out = sys.stdout
    for i in range(first, stop):
        base, data, ops, plan = make_mutant(bases, seed, i)
        out.write(json.dumps({"start": i, "base": base, "ops": ops, "plan": plan}) + "\n")
        out.flush()
        steps = exercise(data, plan, f"mutant-{i}-{base}")
        out.write(json.dumps({"done": i, "steps": steps}) + "\n")
        out.flush()


# ---- the test ----

class Worker:
    def __init__(self, media_dir: Path, seed: int, first: int, stop: int, log: Path) -> None:
        self.media_dir, self.seed, self.stop = media_dir, seed, stop
        self.next, self.log = first, log
        self.proc = None
        self.current = None
        self.last_change = time.monotonic()
        self.consumed = 0
        self.lines = []

    def launch(self) -> None:
        code = ("import sys; from tests.test_fuzz import worker_main; "
                "worker_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))")
        self.out = open(self.log, "w")
        self.err = open(self.log.with_suffix(".stderr"), "a")
        self.consumed = 0
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, str(self.media_dir), str(self.seed), str(self.next),
             str(self.stop)], cwd=ROOT, stdout=self.out, stderr=self.err,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.last_change = time.monotonic()

    def poll_lines(self) -> None:
        with open(self.log) as f:
            f.seek(self.consumed)
            text = f.read()
        complete = text[:text.rfind("\n") + 1]
        self.consumed += len(complete.encode())
        for line in complete.splitlines():
            event = json.loads(line)
            self.last_change = time.monotonic()
            if "start" in event:
                self.current = event
            else:
                self.lines.append((self.current, event))
                self.next = event["done"] + 1
                self.current = None


def test_fuzzed_files_never_crash_hang_or_raise_foreign_errors(media, tmp_path):
    for name in BASES:
        media.path(name)
    chunk = -(-MUTANTS // WORKERS)
    workers = [Worker(media.root, SEED, k * chunk, min(MUTANTS, (k + 1) * chunk),
                      tmp_path / f"worker{k}.jsonl") for k in range(WORKERS)]
    crashes, hangs = [], []
    t0 = time.monotonic()
    for w in workers:
        w.launch()
    running = list(workers)
    try:
        while running:
            time.sleep(0.05)
            for w in list(running):
                w.poll_lines()
                code = w.proc.poll()
                if code is None:
                    if w.current is not None and time.monotonic() - w.last_change > HANG_S:
                        w.proc.kill()
                        w.proc.wait()
                        hangs.append(w.current)
                        w.next = w.current["start"] + 1
                    else:
                        continue
                else:
                    w.poll_lines()
                    if w.current is not None:  # died inside a mutant
                        crashes.append({**w.current, "exit": code})
                        w.next = w.current["start"] + 1
                    elif code != 0:
                        crashes.append({"start": None, "exit": code, "worker": w.log.name})
                        w.next = w.stop
                w.out.close()
                w.err.close()
                w.current = None
                if w.next < w.stop:
                    w.launch()
                else:
                    running.remove(w)
    finally:
        for w in running:  # the test itself failed or timed out: leave no worker behind
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
    elapsed = time.monotonic() - t0

    foreign, outcomes = [], {}
    done = 0
    for w in workers:
        for start, event in w.lines:
            done += 1
            for label, kind, message in event["steps"]:
                outcomes[kind] = outcomes.get(kind, 0) + 1
                if kind.startswith("NOT-FLUXON"):
                    foreign.append((start, label, kind, message))

    def who(event):
        return (f"seed {SEED} mutant {event['start']} of {event.get('base')} "
                f"{event.get('ops')} plan {event.get('plan')}")

    print(f"\nfuzz: {done} mutants in {elapsed:.1f} s on {WORKERS} workers; outcomes {outcomes}")
    problems = [f"CRASH {who(c)}: exit {c['exit']} (negative: signal)" if c["start"] is not None
                else f"CRASH outside a mutant: {c} (see its .stderr in {tmp_path})"
                for c in crashes]
    problems += [f"HANG (> {HANG_S:.0f} s) {who(h)}" for h in hangs]
    problems += [f"EXCEPTION {who(s)}: {label}: {kind}: {message}"
                 for s, label, kind, message in foreign]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)
    assert done == MUTANTS


if __name__ == "__main__":
    # python -m tests.test_fuzz <dir with the base clips> <seed> <mutant>
    directory, seed_arg, mutant_arg = sys.argv[1:4]
    clips = {name: (Path(directory) / name).read_bytes() for name in BASES}
    base_name, mutant, operations, decode_plan = make_mutant(clips, int(seed_arg), int(mutant_arg))
    print(base_name, operations, decode_plan)
    for result in exercise(mutant, decode_plan, f"mutant-{mutant_arg}-{base_name}"):
        print(result)
