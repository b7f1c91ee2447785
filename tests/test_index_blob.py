"""The frame index blob (FrameIndex.to_bytes, index_blob.py): every field comes
back exactly, and a damaged or foreign blob is a miss, never another index."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from fluxon_video import index_blob
from fluxon_video.frame_index import AV_NOPTS_VALUE, FORMAT_VERSION, FrameIndex
from fluxon_video.sources import LocalFileRangeSource

pytestmark = pytest.mark.timeout(60)

I64 = np.iinfo(np.int64)


def scanned(media, name="h264_faststart.mp4") -> FrameIndex:
    """The index a reader builds (open extents and audio packets included)."""
    avio = pytest.importorskip("fluxon_video._avio")
    from fluxon_video.indexing import load_or_build_index

    with LocalFileRangeSource(media.path(name)) as src:
        with avio.ByteSource(src, src.size, name=src.name) as bs:
            index, where, _ = load_or_build_index(bs, src.name)
    assert where == "scan" and index.open_extents and index.audio_packets.size
    return index


def populated(index: FrameIndex) -> FrameIndex:
    """``index`` with every optional column set: damage, survey, hidden and several flags."""
    n = index.pkt_pts.size
    rng = np.random.default_rng(7)
    return dataclasses.replace(
        index, pkt_damaged=rng.random(n) < 0.2, pkt_hidden=rng.random(n) < 0.1,
        pkt_several=rng.random(n) < 0.1, pkt_cut=rng.random(n) < 0.1,
        damage_notes={3: "Invalid NAL unit size", 11: "concealing 40 DC, 40 AC errors — é"},
        decoded_pts=np.sort(index.pkt_pts)[::2].copy(), trusted=True, reason="")


def extreme() -> FrameIndex:
    """Values no delta or narrow dtype may lose: int64's ends, AV_NOPTS_VALUE, no
    position (-1), sizes past int32, steps of every width."""
    pts = np.array([0, 1, -1, 127, -128, 32768, -(1 << 40), I64.max, I64.min, AV_NOPTS_VALUE,
                    5, 4, 3 << 33, 2, 1], np.int64)
    n = pts.size
    return FrameIndex(
        "matroska,webm", "vp9", 3, pts, np.r_[np.arange(n - 2) * (1 << 31), -1, I64.max],
        np.r_[np.full(n - 1, 7), 1 << 33], np.arange(n) % 3 == 0, np.arange(n) % 5 == 0,
        trusted=False, reason="packets without pts", pkt_duration=np.full(n, 1 << 20),
        pkt_dts=pts[::-1].copy(), pkt_hidden=np.arange(n) % 4 == 1,
        pkt_several=np.arange(n) % 7 == 2, pkt_damaged=np.arange(n) % 6 == 5,
        damage_notes={0: "x", 14: "y"}, decoded_pts=(3 << 40) + np.arange(-5, 300) * (1 << 30),
        header={"time_base": (1, 1000), "file_size": 1 << 40, "audio": {"rate": 48000}},
        open_extents=[(0, b"\x1aE\xdf\xa3" * 50), (10 << 30, b""), (I64.max - 9, b"tail")],
        audio_packets=np.array([[I64.min, 1024, I64.max, I64.min],
                                [-1, 0, 1 << 40, 3], [1, 2, 3, 4]]))


def fields(index: FrameIndex) -> dict:
    """Every field of the dataclass (given and derived), the header as the JSON it is
    stored as (tuples read back as lists)."""
    out = {f.name: getattr(index, f.name) for f in dataclasses.fields(index)}
    out["header"] = json.loads(json.dumps(out["header"]))
    return out


def assert_same_index(got: FrameIndex | None, want: FrameIndex) -> None:
    assert got is not None
    got_fields, want_fields = fields(got), fields(want)
    assert got_fields.keys() == want_fields.keys()
    for name, value in want_fields.items():
        if isinstance(value, np.ndarray):
            other = got_fields[name]
            assert (other.dtype, other.shape) == (value.dtype, value.shape), name
            assert np.array_equal(other, value), name
            assert other.flags.writeable, name  # damage.learn sets packets in place
        else:
            assert got_fields[name] == value and type(got_fields[name]) is type(value), name


def minimal() -> FrameIndex:
    """Only what a scan always gives: no audio packets, open extents nor survey."""
    return FrameIndex("avi", "mpeg4", 0, [0, 2, 1], [10, 20, 30], [5, 6, 7], [1, 0, 0],
                      [0, 0, 0])


@pytest.mark.parametrize("case", ["minimal", "scanned", "populated", "extreme"])
def test_every_field_round_trips(media, case):
    index = {"extreme": extreme, "minimal": minimal}.get(case, lambda: scanned(media))()
    if case == "populated":
        index = populated(index)
        assert index.pkt_damaged.any() and index.pkt_several.any() and not index.trusted
    assert (index.decoded_pts is None) == (case in ("scanned", "minimal"))
    blob = index.to_bytes()
    assert blob.startswith(index_blob.MAGIC)
    assert_same_index(FrameIndex.from_bytes(blob), index)


@pytest.mark.parametrize("values, coding, stored", [
    (np.arange(1000, dtype=np.int64) * 512, "delta", "<i2"),  # timestamps: a constant step
    ((1 << 40) + np.arange(1000, dtype=np.int64), "delta", "|i1"),  # wherever they start
    ((1 << 40) + np.arange(6, dtype=np.int64).reshape(2, 3), "delta", "|i1"),  # per row
    (np.random.default_rng(0).integers(0, 3000, 1000), "raw", "<i2"),  # sizes: steps no narrower
    (np.array([0, I64.max, I64.min], np.int64), "raw", "<i8"),
    (np.zeros((3, 0), np.int64), "raw", "|i1"),
    (np.arange(9, dtype=np.uint8), "raw", "|u1"),  # not int64: as it is
])
def test_a_column_is_stored_in_its_narrowest_coding(values, coding, stored):
    got_coding, got, first = index_blob._encode(values)
    assert (got_coding, got.dtype.str) == (coding, stored)
    back = index_blob._decode(got, got_coding, values.dtype, first)
    assert back.dtype == values.dtype and np.array_equal(back, values)


def test_a_damaged_or_foreign_blob_is_a_miss(media):
    blob = populated(scanned(media)).to_bytes()
    assert FrameIndex.from_bytes(blob) is not None
    cuts = {0, 1, 4, index_blob.PREFIX.size - 1, index_blob.PREFIX.size, len(blob) // 2,
            len(blob) - 1}
    for cut in cuts:
        assert FrameIndex.from_bytes(blob[:cut]) is None, cut
    assert FrameIndex.from_bytes(blob + b"\0") is None
    step = max(1, len(blob) // 400)
    for at in [*range(index_blob.PREFIX.size), *range(index_blob.PREFIX.size, len(blob), step)]:
        damaged = bytearray(blob)
        damaged[at] ^= 0x10
        assert FrameIndex.from_bytes(bytes(damaged)) is None, at  # the CRC's job
    for foreign in (b"", b"garbage", np.random.default_rng(1).bytes(5000),
                    blob.replace(index_blob.MAGIC, b"FXIY", 1)):
        assert FrameIndex.from_bytes(foreign) is None


def test_a_blob_of_another_version_or_shape_is_a_miss():
    index = extreme()
    meta = {"format_name": "matroska,webm", "codec_name": "vp9", "stream_index": 0,
            "trusted": False, "reason": "", "header": {}, "damage_notes": {}}
    columns = {name: getattr(index, name) for name in
               ("pkt_pts", "pkt_dts", "pkt_pos", "pkt_size", "pkt_duration", "audio_packets")}
    columns["pkt_flags"] = np.zeros(index.pkt_pts.size, np.uint8)
    assert FrameIndex.from_bytes(index_blob.pack(FORMAT_VERSION, meta, columns, [])) is not None
    assert FrameIndex.from_bytes(index_blob.pack(FORMAT_VERSION - 1, meta, columns, [])) is None
    short = dict(columns, pkt_size=index.pkt_size[:-1])  # one size fewer than packets
    assert FrameIndex.from_bytes(index_blob.pack(FORMAT_VERSION, meta, short, [])) is None
    flat = dict(columns, audio_packets=index.audio_packets.ravel())
    assert FrameIndex.from_bytes(index_blob.pack(FORMAT_VERSION, meta, flat, [])) is None
