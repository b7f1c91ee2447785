"""Fuzzing the native decoder with mutated MP4, MKV and WebM files: no crash, no
hang, no foreign exception, and a frame read alone equals the same frame in a batch.

A seeded run of mutants, each scanned and decoded through the real decoder.
The mutations: byte flips, overwritten runs, truncations, chunk duplications
and deletions (up to half the file); MP4 box fields and Matroska size vints and
values overwritten with large values (0x80000000, all ones, past the end of
the file); whole boxes and elements deleted, duplicated or cut off at their
edges; one to four of these combined. Each mutant is opened as a reader opens
it (the index built through indexing, with the open extents and metadata, and
its blob round trip), then decoded on the indexed path and the sequential path
(a few frame indices including negative and out-of-range ones; 1 and 2
threads), and one frame is read alone and inside a batch; the audio decoder
reads samples before and after a frames read on the demuxer it shares with
the frames (the MP4 base carries AAC; the others have no audio, which must
raise FluxonFsNoAudioStreamError). Worker subprocesses
each take a slice of the mutants, so a crash or a hang in one is caught and
named: it must not happen; every exception raised must be a FluxonFsError: a
FluxonFsDecodeError (or subclass) or a FluxonFsFrameIndexError, since the
bytes come from memory and never fail to arrive; and the lone read and the
batch must agree (a frame's identity must not depend on its neighbours in a
request): the same bytes, or a lone read that raises only
when the batch does.

Reproduce one mutant: ``python -m tests.test_fuzz <directory of the base
clips> <seed> <i>`` (from the repository root) decodes it in the foreground.
FLUXON_FUZZ_SEED and FLUXON_FUZZ_MUTANTS change the run.

The lone-vs-batch comparison runs on every mutant
(FLUXON_FUZZ_IDENTITY=0 turns it off). It passes on this seed's 1,800
mutants and on seeds 2-4; seeds 1, 5 and 6 have one mismatch each (1406:
damage inside a non-reference frame that a lone read skips and a batch
decodes, so only the batch raises; 238 and 1222: a decoder that, past damage,
outputs frames the index does not place, which a lone read starting at a
later keyframe cannot see). docs/frame-index.md says why no read short of a
decode from the start sees those. The mutants it once failed on are pinned
(PINNED_MUTANTS).
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
MUTANTS = int(os.environ.get("FLUXON_FUZZ_MUTANTS", "1800"))
# Moov first and moov last: a cut or a removed range loses the index in one,
# the media in the other.
BASES = ["h264_faststart.mp4", "h264_moov_end.mp4", "h264_bframes.mkv", "vp9.webm"]
WORKERS = min(4, max(2, os.cpu_count() or 2))
HANG_S = 20.0  # one mutant's decodes take well under a second
CHECK_IDENTITY = os.environ.get("FLUXON_FUZZ_IDENTITY", "1") == "1"
FRAMES = 72  # in each base clip: the lone/batch probe's range when a mutant has no index

# Frame index requests: in range, duplicates, negative (needing the index's
# count), past the end (72 frames in the base clips) and absurd.
INDEX_SETS = [[0], [0, 1, 2], [5, 30], [40, 3, 40], [-1], [-2, 0], [71], [72], [10**6],
              [-10**6], [70, 71, 72]]
HUGE = [0, 1, 7, 8, 9, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x18000000, 0x30000000,
        0x40000000, 0x10000]

# MP4 boxes that hold only boxes (walked into).
MP4_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"dinf", b"edts", b"udta",
                  b"mvex", b"moof", b"traf"}
# Matroska/WebM master elements (walked into), by EBML ID.
EBML_MASTERS = {bytes.fromhex(h) for h in (
    "1a45dfa3", "18538067", "114d9b74", "4dbb", "1549a966", "1654ae6b", "ae", "e0", "55b0",
    "1f43b675", "a0", "1c53bb6b", "bb", "b7", "1254c367", "7373", "67c8", "63c0", "6d80",
    "75a1")}
EBML_BLOCKS = {b"\xa3", b"\xa1"}  # SimpleBlock, Block: track vint, int16 timecode, flags


# ---- the containers' structure (of the bytes as mutated so far) ----

def mp4_boxes(data: bytes, limit: int = 400) -> list[tuple[int, int, bytes]]:
    """(offset, size, type) of the MP4 boxes, nested ones included."""
    boxes, stack = [], [(0, len(data))]
    while stack and len(boxes) < limit:
        pos, end = stack.pop()
        while pos + 8 <= end and len(boxes) < limit:
            size, kind = struct.unpack_from(">I4s", data, pos)
            if size < 8 or pos + size > end:
                break
            boxes.append((pos, size, kind))
            if kind in MP4_CONTAINERS:
                stack.append((pos + 8, pos + size))
            pos += size
    return boxes


def mp4_fields(data: bytes) -> list[int]:
    """Offsets of MP4 box size fields and of the 32-bit words in small boxes
    (counts, sizes, chunk offsets, durations, track dimensions)."""
    fields = []
    for pos, size, kind in mp4_boxes(data):
        fields.append(pos)
        if kind not in MP4_CONTAINERS and size <= 4096:
            fields.extend(range(pos + 8, pos + size - 3, 4))
    return fields


def read_vint(data: bytes, at: int, end: int, keep_marker: bool = False):
    """(value, length) of the EBML variable-length integer at ``at``, or None."""
    if at >= end or data[at] == 0:
        return None
    length = 9 - data[at].bit_length()
    if at + length > end:
        return None
    value = int.from_bytes(data[at:at + length], "big")
    return (value if keep_marker else value & ((1 << (7 * length)) - 1)), length


def ebml_elements(data: bytes, limit: int = 600) -> list[tuple[bytes, int, int, int, int]]:
    """(ID, offset, size field offset, data offset, data end) of the Matroska
    elements, nested ones included; an unknown size runs to its parent's end."""
    elements, stack = [], [(0, len(data))]
    while stack and len(elements) < limit:
        pos, end = stack.pop()
        while pos < end and len(elements) < limit:
            ident = read_vint(data, pos, end, keep_marker=True)
            if ident is None or ident[1] > 4:
                break
            size_at = pos + ident[1]
            size = read_vint(data, size_at, end)
            if size is None:
                break
            at = size_at + size[1]
            unknown = size[0] == (1 << (7 * size[1])) - 1
            stop = end if unknown else min(at + size[0], end)
            key = data[pos:size_at]
            elements.append((key, pos, size_at, at, stop))
            if key in EBML_MASTERS:
                stack.append((at, stop))
            if unknown and key in EBML_MASTERS:
                break  # its children run to the parent's end
            pos = stop
    return elements


# ---- mutations ----

def overwrite_mp4_field(out: bytearray, rng: random.Random) -> str:
    fields = mp4_fields(bytes(out))
    if not fields:
        return "field:none"
    at = rng.choice(fields)
    old = struct.unpack_from(">I", out, at)[0]
    value = rng.choice(HUGE + [old + 1, max(old - 1, 0), old * 2 & 0xFFFFFFFF,
                               old | 0x80000000, len(out), len(out) - at, rng.getrandbits(32)])
    struct.pack_into(">I", out, at, value)
    return f"field@{at}={value:#x}"


def pick_element(rng: random.Random, elements: list):
    # Half of the picks among the elements that are not frames: the header,
    # track, cue and cluster elements would otherwise be a fifth of them.
    if rng.random() < 0.5:
        others = [e for e in elements if e[0] not in EBML_BLOCKS]
        if others:
            return rng.choice(others)
    return rng.choice(elements)


def overwrite_ebml_field(out: bytearray, rng: random.Random) -> str:
    elements = ebml_elements(bytes(out))
    for _ in range(10):  # a master or a string has no integer value to break
        if elements:
            done = overwrite_ebml_element(out, rng, pick_element(rng, elements))
            if done:
                return done
    return "vint:none"


def overwrite_ebml_element(out: bytearray, rng: random.Random, element) -> str | None:
    """A size vint, an integer element's value, or a block's header field."""
    key, _, size_at, at, stop = element
    what = rng.random()
    if what < 0.5:
        length = at - size_at
        top = (1 << (7 * length)) - 1
        old = int.from_bytes(out[size_at:at], "big") & top
        value = rng.choice([0, 1, top, top - 1, old + 1, max(old - 1, 0), old * 2, old ^ 1,
                            0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, len(out) - at,
                            len(out) - at + 1, rng.getrandbits(7 * length)])
        if value >= top or rng.random() < 0.2:
            # Too large for the field (or at random): an 8-byte vint in its place.
            length, top = 8, (1 << 56) - 1
            value = min(value, top)
        out[size_at:at] = ((1 << (7 * length)) | value).to_bytes(length, "big")
        return f"vint {key.hex()}@{size_at}={value:#x}/{length}"
    if key in EBML_BLOCKS and stop - at >= 4:
        part = rng.choice(["track", "timecode", "flags"])
        if part == "track":
            out[at] = rng.choice([0x80, 0x82, 0xFF, 0x40, 0x01, rng.randrange(256)])
        elif part == "timecode":
            struct.pack_into(">H", out, at + 1, rng.choice([0x7FFF, 0x8000, 0xFFFF, 0,
                                                              rng.getrandbits(16)]))
        else:
            out[at + 3] = rng.choice([0x00, 0x80, 0x06, 0x02, 0x04, 0xFF, rng.randrange(256)])
        return f"block {part}@{at}"
    length = stop - at
    if key in EBML_MASTERS or not 1 <= length <= 8:
        return None
    old = int.from_bytes(out[at:stop], "big")
    full = (1 << (8 * length)) - 1
    value = rng.choice([0, 1, full, full >> 1, (full >> 1) + 1, 0x80000000 & full,
                        0xFFFFFFFF & full, old + 1 & full, old * 2 & full,
                        rng.getrandbits(8 * length)])
    out[at:stop] = value.to_bytes(length, "big")
    return f"value {key.hex()}@{at}={value:#x}"


def restructure(out: bytearray, rng: random.Random, base: str) -> str:
    """Delete, duplicate or cut the file at a whole box or element."""
    if base.endswith(".mp4"):
        units = [(pos, pos + size, kind.decode("latin-1")) for pos, size, kind in
                 mp4_boxes(bytes(out))]
    else:
        elements = ebml_elements(bytes(out))
        units = [pick_element(rng, elements)] if elements else []
        units = [(start, stop, key.hex()) for key, start, _, _, stop in units]
    if not units:
        return "unit:none"
    start, stop, name = rng.choice(units)
    kind = rng.choice(["delete", "delete", "duplicate", "cut", "cut"])
    if kind == "delete":
        del out[start:stop]
    elif kind == "duplicate":
        out[stop:stop] = out[start:stop]
    else:
        # At the unit's start, its end, inside its header, or a few bytes past
        # its start: the demuxer has found it and its media or index is gone.
        at = rng.choice([start, stop, start + rng.randint(1, 16), rng.randrange(start, stop)])
        del out[min(at, len(out)):]
    return f"{kind} {name} {start}:{stop}"


def position(rng: random.Random, n: int) -> int:
    """A byte offset, half of the time in the first or last 4 KiB, where the
    headers and indexes (moov, EBML header, Tracks, Cues) are."""
    if rng.random() < 0.5:
        return rng.randrange(n)
    edge = rng.randrange(min(n, 4096))
    return edge if rng.random() < 0.7 else n - 1 - edge


KINDS = ["flip", "flip", "run", "truncate", "duplicate", "delete", "delete", "field", "field",
         "field", "unit", "unit"]


def mutate(data: bytes, rng: random.Random, base: str) -> tuple[bytes, list[str]]:
    out = bytearray(data)
    ops = []
    for _ in range(rng.choice([1, 1, 2, 2, 3, 4])):
        kind = rng.choice(KINDS)
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
            at = rng.randrange(n // 2, n) if rng.random() < 0.5 else rng.randrange(n)
            del out[at:]
            ops.append(f"truncate {at}")
        elif kind == "duplicate":
            src, length, dst = position(rng, n), rng.randint(1, 4096), position(rng, n)
            out[dst:dst] = out[src:src + length]
            ops.append(f"duplicate {src}+{length}@{dst}")
        elif kind == "delete":
            # Mostly a short range; now and then a large part of the media.
            at = position(rng, n)
            length = rng.randint(1, 4096 if rng.random() < 0.7 else max(4096, n // 2))
            del out[at:at + length]
            ops.append(f"delete {at}+{length}")
        elif kind == "field":
            ops.append(overwrite_mp4_field(out, rng) if base.endswith(".mp4")
                       else overwrite_ebml_field(out, rng))
        else:
            ops.append(restructure(out, rng, base))
    return bytes(out), ops


def make_mutant(bases: dict[str, bytes], seed: int, i: int):
    """(base name, mutant bytes, operations, decode plan) of mutant i of seed."""
    rng = random.Random(f"{seed}:{i}")
    base = BASES[i % len(BASES)]
    data, ops = mutate(bases[base], rng, base)
    # probe: where the lone/batch check looks, once the frame count is known.
    plan = {"threads": rng.choice([1, 2]), "indexed": rng.choice(INDEX_SETS),
            "sequential": rng.choice(INDEX_SETS), "probe": rng.getrandbits(32),
            "audio": rng.getrandbits(32)}
    return base, data, ops, plan


def probe_requests(probe: int, count: int) -> tuple[int, list[int]]:
    """A frame in [0, count) and a batch that holds it: its neighbours, a few
    frames in any order (it maybe twice), or every frame."""
    rng = random.Random(probe)
    count = min(count, 2 * FRAMES)  # a damaged count can be huge: keep the batch small
    k = rng.randrange(count)
    shape = rng.choice(["window", "window", "scatter", "scatter", "all"])
    if shape == "window":
        return k, list(range(max(0, k - 3), min(count, k + 4)))
    if shape == "all":
        return k, list(range(count))
    batch = rng.sample(range(count), min(count, rng.randint(1, 5))) + [k] * rng.randint(1, 2)
    rng.shuffle(batch)
    return k, batch


# ---- one mutant through the decoder ----

def exercise_audio(bs, index, plan: dict, name: str, step) -> None:
    """The audio decoder taking turns with the frames on one demuxer (its own,
    where the container's is not shared): samples, frames, samples again."""
    from fluxon_video import _audio, _decode

    rng = random.Random(plan["audio"])
    video = _decode.VideoDecoder(bs, plan["threads"], name)
    video.index = index
    try:
        audio, _ = step("audio open", lambda: _audio.AudioDecoder(bs, name, -1, video))
        if audio is None:
            return
        for k in range(3):
            start = rng.randrange(200_000)
            stop, exact = start + rng.randrange(1, 20_000), rng.random() < 0.5
            step(f"audio [{start}, {stop}) exact={exact}",
                 lambda: audio.samples(start, stop, exact))
            if k == 0:
                step(f"frames {plan['indexed']} between audio reads",
                     lambda: video.decode(plan["indexed"], 24, 32))
        audio.close()
    finally:
        video.close()


def exercise(data: bytes, plan: dict, name: str,
             check_identity: bool = CHECK_IDENTITY) -> list[tuple[str, str, str]]:
    """(step, outcome, message) per step; outcome "ok", the exception's class,
    "no index", or MISMATCH (a lone read and a batch disagree)."""
    from fluxon_video import _avio, _decode, errors
    from fluxon_video.frame_index import FrameIndex
    from fluxon_video.indexing import load_or_build_index
    from fluxon_video.metadata import build_metadata
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
            return None, exc
        steps.append((label, "ok", ""))
        return result, None

    def copy(index):
        # Each read as a fresh reader would make it, from the shared blob: a
        # read that learns about the file (damage) then cannot change another.
        return None if index is None else FrameIndex.from_bytes(index.to_bytes())

    src = BytesRangeSource(data, name)
    threads = plan["threads"]
    with _avio.ByteSource(src, len(data), name=name, page_size=16384) as bs:
        # As a reader opens a file: the scan through indexing, which keeps the
        # open extents (a bare _demux.scan_packets skips that, and with it the
        # outside run's ValueError from record_open_extents); a file the scan
        # cannot read gets no index and is read sequentially.
        opened, _ = step("open", lambda: load_or_build_index(bs, name))
        index = opened[0] if opened is not None else None
        if opened is not None and index is None:
            steps[-1] = ("open", "no index", "")
        if index is not None:
            bs.set_extents(index.open_extents)
            step("metadata", lambda: build_metadata(index, len(data), 0, name))
            kv, _ = step("blob", lambda: FrameIndex.from_bytes(index.to_bytes()))
            if kv is None:  # from_bytes reads a blob it cannot parse as a miss
                steps[-1] = ("blob", "NOT-ROUND-TRIP the index's blob does not load", "")
            elif kv.trusted:
                step(f"indexed {plan['indexed']} t{threads}",
                     lambda: _decode.decode_frames(bs, plan["indexed"], 24, 32, threads,
                                                   index=kv))
        step(f"sequential {plan['sequential']} t{threads}",
             lambda: _decode.decode_frames(bs, plan["sequential"], 24, 32, threads))
        exercise_audio(bs, copy(index), plan, name, step)

        # Frame k's bytes must not depend on what else a read asks for.
        count = index.frame_count if index is not None and index.frame_count else FRAMES
        k, batch = probe_requests(plan["probe"], count)

        def read(indices):
            return _decode.decode_frames(bs, indices, 24, 32, threads, index=copy(index))

        alone, alone_exc = step(f"lone [{k}] t{threads}", lambda: read([k]))
        together, together_exc = step(f"batch {batch} t{threads}", lambda: read(batch))
        label = f"lone-vs-batch {k} in {batch}"
        if not check_identity:
            return steps
        if alone is not None and together is not None:
            frame = alone[0][0]
            if any(not (together[0][j] == frame).all()
                   for j, i in enumerate(batch) if i == k):
                steps.append((label, "MISMATCH", "frame bytes differ"))
        elif alone is None and together is not None:
            steps.append((label, "MISMATCH", f"the batch returned frame {k}; alone it raised "
                          f"{type(alone_exc).__name__}: {str(alone_exc)[:200]}"))
        elif alone is not None and len(batch) <= 8:
            # The batch raised: fair if one of its other frames raises alone.
            others = sorted(set(batch) - {k})
            if all(step(f"lone [{i}] t{threads}", lambda i=i: read([i]))[0] is not None
                   for i in others):
                steps.append((label, "MISMATCH", "each frame reads alone; the batch raised "
                              f"{type(together_exc).__name__}: {str(together_exc)[:200]}"))
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

# Mutants of the base clips this suite makes (x264 and libvpx of Debian 12)
# whose lone read and batch once disagreed: a pts the decoder contradicts,
# hidden by the non-reference frames a batch skipped (seed 3, 1165); damage
# flagged only by a decode carried on from the cluster before (seed 1, 1346).
PINNED_MUTANTS = [(3, 1165), (1, 1346)]


@pytest.mark.parametrize("seed,i", PINNED_MUTANTS)
def test_pinned_mutants_read_the_same_alone_and_in_a_batch(media, seed, i):
    bases = {name: media.path(name).read_bytes() for name in BASES}
    base, data, _, plan = make_mutant(bases, seed, i)
    steps = exercise(data, plan, f"mutant-{i}-{base}", check_identity=True)
    assert [s for s in steps if s[1].startswith(("MISMATCH", "NOT-"))] == [], steps


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
                if kind.startswith(("NOT-", "MISMATCH")):
                    foreign.append((start, label, kind, message))

    def who(event):
        return (f"seed {SEED} mutant {event['start']} of {event.get('base')} "
                f"{event.get('ops')} plan {event.get('plan')}")

    print(f"\nfuzz: {done} mutants in {elapsed:.1f} s on {WORKERS} workers; outcomes {outcomes}")
    problems = [f"CRASH {who(c)}: exit {c['exit']} (negative: signal)" if c["start"] is not None
                else f"CRASH outside a mutant: {c} (see its .stderr in {tmp_path})"
                for c in crashes]
    problems += [f"HANG (> {HANG_S:.0f} s) {who(h)}" for h in hangs]
    problems += [f"{'MISMATCH' if kind == 'MISMATCH' else 'EXCEPTION'} {who(s)}: {label}: "
                 f"{kind}: {message}" for s, label, kind, message in foreign]
    # The clips of this session (the Matroska muxer writes a random segment UID).
    assert not problems, (f"{len(problems)} problems (reproduce one: python -m tests.test_fuzz "
                          f"{media.root} {SEED} <mutant>):\n" + "\n".join(problems))
    assert done == MUTANTS


if __name__ == "__main__":
    # python -m tests.test_fuzz <dir with the base clips> <seed> <mutant>
    directory, seed_arg, mutant_arg = sys.argv[1:4]
    clips = {name: (Path(directory) / name).read_bytes() for name in BASES}
    base_name, mutant, operations, decode_plan = make_mutant(clips, int(seed_arg), int(mutant_arg))
    print(base_name, operations, decode_plan)
    for result in exercise(mutant, decode_plan, f"mutant-{mutant_arg}-{base_name}"):
        print(result)
