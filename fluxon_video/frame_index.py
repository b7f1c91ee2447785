"""The frame index of one video: what keyframe seeking needs to stay exact.

Built from a demux-only packet scan of the first video stream (never by
decoding): for MP4/MOV the scan reads only the sample table FFmpeg already
parsed (payload reads return zeros), elsewhere (MKV/WebM, AVI) it reads the
file once. From the packets in decode order it derives:

- the presentation order: frame ``i`` is the packet with the i-th smallest
  pts among packets the demuxer does not flag for discard (edit lists), which
  is the order the decoder outputs them in;
- for each frame, the keyframe to start decoding from: the last keyframe at
  or before it in decode order whose pts is not after the frame's (so an
  open-GOP leading picture starts from the previous keyframe);
- the timestamp to seek the demuxer with to land on that keyframe: its pts
  (demuxers seek by presentation time with AVSEEK_FLAG_BACKWARD; MP4's
  DTS-based sample times would land one GOP early), but its dts in AVI, whose
  index counts frames in decode order (a keyframe's inferred pts is the next
  I/P-frame's dts: with B-frames, seeking by it lands on the next keyframe
  when that one follows in decode order).

It also carries the container's bytes outside every packet at the head and
tail of the file (MP4's moov, Matroska's header and Cues), up to
``MAX_OPEN_EXTENT_BYTES``: the demuxer's header parsing reads exactly those,
so a reader that loads the index opens the container without fetching a
page (see ``open_extents``).

The index is stored in the KV as an opaque blob (index_blob.py lays it out)
under the file version, of the kind ``blob_kind(stream_index)`` names: it
carries the format version, so a reader never loads an index written in
another format, and the stream asked for (the default rule's stream has its
own kind).

An index is *trusted* only where that derivation is known to hold (for
MPEG-4 part 2 the scan checks the bitstream, see mpeg4.py, and passes its
verdict in); the decoder still checks every frame it lands on against it and
falls back to a sequential decode on any disagreement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from fluxon_video import index_blob

FORMAT_VERSION = 10
BLOB_KIND = f"frameindex-v{FORMAT_VERSION}"  # the default stream's index


def blob_kind(stream_index: int | None) -> str:
    """The blob kind of the index of ``stream_index`` (None: the default rule's stream)."""
    return BLOB_KIND if stream_index is None else f"{BLOB_KIND}-stream{stream_index}"

SEEKABLE_FORMATS = ("mov", "mp4", "matroska", "webm", "avi")
SEEK_BY_DTS_FORMATS = ("avi",)
AV_NOPTS_VALUE = -(1 << 63)
# Container bytes carried in the index (beyond that, the open fetches them):
# a few KiB for clips, about 1 MiB of moov for an hour at 30 fps.
MAX_OPEN_EXTENT_BYTES = 2 << 20
LAST_PACKET_KEPT = 256 << 10
# Frames a decoder may output after frames decoded later (H.264/HEVC: a
# 16-frame DPB; VP9, AV1: none).
MAX_REORDER = 16
# Packets past a cluster's last target fetched with it: what a decoder
# typically needs to output the next frame (its reorder delay).
CONFIRM_PACKETS = 4
# How the blob stores the per-packet columns: int64 ones as they are (narrowed
# or delta-coded by index_blob), the bool ones as the bits of one uint8 column
# (bit i: FLAG_COLUMNS[i]).
INT_COLUMNS = ("pkt_pts", "pkt_dts", "pkt_pos", "pkt_size", "pkt_duration")
FLAG_COLUMNS = ("pkt_key", "pkt_discard", "pkt_cut", "pkt_hidden", "pkt_several", "pkt_damaged")


@dataclass
class FrameIndex:
    format_name: str
    codec_name: str
    stream_index: int
    # Per packet of the stream, in decode order.
    pkt_pts: np.ndarray
    pkt_pos: np.ndarray
    pkt_size: np.ndarray
    pkt_key: np.ndarray  # bool
    pkt_discard: np.ndarray  # bool
    trusted: bool = True
    reason: str = ""
    pkt_duration: np.ndarray | None = None  # per packet, in time_base units (0: unknown)
    pkt_cut: np.ndarray | None = None  # bool: the demuxer returned fewer bytes than the packet has
    pkt_dts: np.ndarray | None = None  # what AVI seeks by (see pkt_seek_ts); None: the pts
    # bool: the decoder outputs no frame for the packet (a VP8 alternate
    # reference frame, a VP9 hidden frame; see _demux.shown_frames).
    pkt_hidden: np.ndarray | None = None
    pkt_several: np.ndarray | None = None  # bool: it outputs more than one (untrusted)
    # bool: decoding found the packet damaged (rejected, or its frame flagged
    # corrupt). Learnt by reads, not by the scan (see damage.py).
    pkt_damaged: np.ndarray | None = None
    # FFmpeg's words for each damaged packet: {decode position: message}.
    damage_notes: dict[int, str] = field(default_factory=dict)
    # What a one-threaded sequential decode of the whole file outputs: the pts
    # of every frame, in order (None until a tolerant reader surveyed it).
    decoded_pts: np.ndarray | None = None
    # What the container header says of the stream: time_base, sizes, pix_fmt,
    # colours, display matrix, file_size ... (see _demux.stream_header).
    header: dict[str, Any] = field(default_factory=dict)
    # (offset, bytes) of container_ranges() the scan had read: served to the
    # demuxer's open without fetching.
    open_extents: list[tuple[int, bytes]] = field(default_factory=list)
    # int64 (3, N): pts (the audio stream's time_base, header["audio"]), byte
    # offset and size of each packet of the audio stream, in decode order,
    # where the container lists them (MP4/MOV's sample table); (3, 0) elsewhere.
    audio_packets: np.ndarray | None = None
    # Derived.
    frame_pts: np.ndarray = field(init=False)  # presentation order, sorted
    frame_dec: np.ndarray = field(init=False)  # decode position of each frame's packet
    frame_key: np.ndarray = field(init=False)  # decode position of its start keyframe, -1: none
    pos_sorted: np.ndarray = field(init=False)
    pos_dec: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.pkt_pts = np.asarray(self.pkt_pts, np.int64)
        self.pkt_pos = np.asarray(self.pkt_pos, np.int64)
        self.pkt_size = np.asarray(self.pkt_size, np.int64)
        self.pkt_key = np.asarray(self.pkt_key, bool)
        self.pkt_discard = np.asarray(self.pkt_discard, bool)
        self.pkt_duration = (np.zeros_like(self.pkt_pts) if self.pkt_duration is None
                             else np.asarray(self.pkt_duration, np.int64))
        self.pkt_cut = (np.zeros(self.pkt_pts.shape, bool) if self.pkt_cut is None
                        else np.asarray(self.pkt_cut, bool))
        self.pkt_dts = (self.pkt_pts.copy() if self.pkt_dts is None
                        else np.asarray(self.pkt_dts, np.int64))
        self.pkt_hidden = self._flags(self.pkt_hidden)
        self.pkt_several = self._flags(self.pkt_several)
        self.pkt_damaged = self._flags(self.pkt_damaged)
        if self.decoded_pts is not None:
            self.decoded_pts = np.asarray(self.decoded_pts, np.int64)
        self.audio_packets = (np.empty((3, 0), np.int64) if self.audio_packets is None
                              else np.asarray(self.audio_packets, np.int64).reshape(3, -1))
        shown = np.flatnonzero(~self.pkt_discard & ~self.pkt_truncated & ~self.pkt_hidden)
        order = np.argsort(self.pkt_pts[shown], kind="stable")
        self.frame_dec = shown[order]
        self.frame_pts = self.pkt_pts[self.frame_dec]
        self.frame_key = self._start_keyframes()
        pos_order = np.argsort(self.pkt_pos, kind="stable")
        self.pos_sorted = self.pkt_pos[pos_order]
        self.pos_dec = pos_order.astype(np.int64, copy=False)
        self._check_trust()

    def _flags(self, values: np.ndarray | None) -> np.ndarray:
        return (np.zeros(self.pkt_pts.shape, bool) if values is None
                else np.asarray(values, bool))

    @property
    def confirm_packets(self) -> int:
        """Packets a read decodes past the last one its frames need (CONFIRM_PACKETS
        for a codec that reorders, else none): a read's plan fetches them too."""
        return CONFIRM_PACKETS if self.header.get("reorders", True) else 0

    @property
    def damaged_before(self) -> np.ndarray:
        """Known damaged packets before each decode position (n_packets + 1 entries)."""
        return np.concatenate([[0], np.cumsum(self.pkt_damaged)])

    @property
    def pkt_truncated(self) -> np.ndarray:
        """Packets the file ends inside of (a truncated file): cut short by the
        end of the data, they decode to no frame."""
        file_size = self.header.get("file_size")
        if file_size is None:
            return np.zeros(self.pkt_pos.shape, bool)
        return self.pkt_cut & (self.pkt_pos >= 0) & (self.pkt_pos + self.pkt_size >= file_size)

    def container_ranges(self, file_size: int) -> list[tuple[int, int]]:
        """(offset, length) of the bytes before the first packet and after the
        last: what opening the container reads (moov, Matroska header, Cues)."""
        if self.pkt_pos.size == 0 or (self.pkt_pos < 0).any():
            return []
        head = int(self.pkt_pos.min())
        tail = int((self.pkt_pos + self.pkt_size).max())
        ranges = [(0, head)] if head > 0 else []
        if tail < file_size:
            ranges.append((tail, file_size - tail))
        return ranges

    def record_open_extents(self, file_size: int, peek: Any) -> None:
        """Keep the container ranges ``peek(offset, length)`` still holds (bytes
        or None), if they fit in MAX_OPEN_EXTENT_BYTES."""
        ranges = self.container_ranges(file_size)
        if sum(n for _, n in ranges) > MAX_OPEN_EXTENT_BYTES:
            return
        extents = [(off, peek(off, n)) for off, n in ranges]
        self.open_extents = [(off, data) for off, data in extents if data]
        if self.pkt_pos.size == 0:
            return  # no packet: nothing follows the container's head
        # FFmpeg 5.1's MP4 demuxer reads the end of the last packet while it opens
        # a file whose moov follows it: keep that packet too, if it is small and
        # still cached.
        last = int(np.argmax(self.pkt_pos))
        start, end = int(self.pkt_pos[last]), int(self.pkt_pos[last] + self.pkt_size[last])
        if self.open_extents and self.open_extents[-1][0] == end > start and (
                self.pkt_size[last] <= LAST_PACKET_KEPT):
            before = peek(start, end - start)
            if before is not None:
                self.open_extents[-1] = (start, before + self.open_extents[-1][1])

    @property
    def pkt_seek_ts(self) -> np.ndarray:
        """Per packet, the timestamp that seeks the demuxer to it (see the module doc)."""
        by_dts = any(name in self.format_name.split(",") for name in SEEK_BY_DTS_FORMATS)
        return self.pkt_dts if by_dts else self.pkt_pts

    @property
    def frame_count(self) -> int:
        return int(self.frame_pts.shape[0])

    def _start_keyframes(self) -> np.ndarray:
        keys = np.flatnonzero(self.pkt_key)
        if keys.size == 0 or self.frame_dec.size == 0:
            return np.full(self.frame_dec.shape, -1, np.int64)
        # The last keyframe at or before each frame in decode order...
        j = np.searchsorted(keys, self.frame_dec, side="right") - 1
        # ...stepping back while that keyframe is shown after the frame
        # (leading pictures of an open GOP need the previous one).
        while True:
            bad = (j >= 0) & (self.pkt_pts[keys[np.maximum(j, 0)]] > self.frame_pts)
            if not bad.any():
                break
            j[bad] -= 1
        return np.where(j >= 0, keys[np.maximum(j, 0)], -1).astype(np.int64, copy=False)

    def _check_trust(self) -> None:
        if not self.trusted:
            return
        problems = []
        if not any(name in self.format_name.split(",") for name in SEEKABLE_FORMATS):
            problems.append(f"container {self.format_name} is not in the seekable set")
        if ("avi" in self.format_name.split(",") and self.header.get("reorders", True)
                and self.codec_name != "mpeg4"):
            # AVI stores no pts: the demuxer infers them from frame types,
            # which says the presentation order only for MPEG-4 part 2 (whose
            # packets the scan checks, see mpeg4.py), not for B-pyramids.
            problems.append(f"{self.codec_name} in AVI: no pts give the order of reordered frames")
        if self.frame_pts.size == 0:
            problems.append("no frames")
        elif self.time_problem:
            problems.append(self.time_problem)
        if self.pkt_several.any():
            problems.append("packets that decode to several frames")
        if (self.pkt_pos < 0).any():
            problems.append("packets without a byte position")
        elif (np.diff(self.pos_sorted) == 0).any():
            problems.append("duplicate packet positions")
        if (self.frame_key < 0).any():
            problems.append("frames before the first keyframe")
        elif (self.pkt_seek_ts[self.frame_key] == AV_NOPTS_VALUE).any():
            problems.append("keyframes without a timestamp to seek to")
        if problems:
            self.trusted = False
            self.reason = "; ".join(problems)

    @cached_property
    def time_problem(self) -> str:
        """Why the packets' pts do not say which frame the decoder outputs when
        ("" when they do): then the frames' times are not the sorted pts."""
        shown_pts = self.frame_pts
        if (shown_pts == AV_NOPTS_VALUE).any():
            return "packets without pts"
        if (np.diff(shown_pts) == 0).any():  # frame_pts is sorted
            return "duplicate pts"
        if (distance := self.reorder_distance) > (
                MAX_REORDER if self.header.get("reorders", True) else 0):
            # A decoder holds at most a DPB of frames back (none for a codec
            # that does not reorder): a frame shown farther from where it is
            # decoded has a damaged timestamp, and the decoder will not output
            # it where its pts says.
            return f"a frame's pts puts it {distance} frames from where it is decoded"
        return ""

    @cached_property
    def _by_decode_rank(self) -> np.ndarray:
        """Frames (presentation indices) in the order their packets are decoded."""
        return np.argsort(self.frame_dec, kind="stable")

    @cached_property
    def _decode_rank(self) -> np.ndarray:
        """Per frame, how many frames are decoded before it."""
        rank = np.empty(self.frame_dec.size, np.int64)
        rank[self._by_decode_rank] = np.arange(self.frame_dec.size)
        return rank

    @cached_property
    def _on_one_grid(self) -> bool:
        """Whether the frames' pts are one arithmetic progression (constant rate, no gap)."""
        if self.frame_pts.size < 2:
            return True
        steps = np.diff(self.frame_pts)
        return bool(steps[0] > 0 and (steps == steps[0]).all())

    @cached_property
    def reorder_distance(self) -> int:
        """The most frames any frame is shown before or after its decode rank."""
        if self.frame_dec.size == 0:
            return 0
        return int(np.abs(self._decode_rank - np.arange(self.frame_dec.size)).max())

    @cached_property
    def shown_last_by(self) -> np.ndarray:
        """Per packet (decode position), the last frame in presentation order
        whose packet is at or before it (-1: none yet)."""
        last = np.full(self.pkt_pts.shape[0], -1, np.int64)
        last[self.frame_dec] = np.arange(self.frame_count)
        return np.maximum.accumulate(last) if last.size else last

    def order_witnesses(self, targets: np.ndarray) -> np.ndarray:
        """Per frame, whether a decode of targets must output it (never skip it
        as a non-reference frame), so that the decoder's own order checks each
        target's place.

        The decoder outputs a frame within R (the reorder distance) of its
        decode rank, and R is at least how far any pts puts a frame from its
        decode rank. So a frame x whose pts puts it on the other side of a
        target t than the decoder shows it has a decode rank within R of t;
        and if t's own pts lies, its neighbours t-1 or t+1 are shown across
        it. Decoding both kinds turns either lie into a frame out of order or
        missing, which _decode_paths.pyx _take_frame sees.
        """
        n = self.frame_count
        keep = np.zeros(n, np.uint8)
        if n == 0 or targets.size == 0:
            return keep
        if self._on_one_grid:
            # Every frame on one constant step with no slot empty: a pts
            # cannot move without leaving a gap or landing on another frame's
            # (a duplicate, which distrusts the index), so no lie to witness,
            # and the non-reference frames skip as before (a third fewer
            # frames decoded on stride-4 clips of a GOP-250 H.264 file).
            keep[targets] = 1
            return keep
        def around(reach: int) -> np.ndarray:
            return np.clip((targets[:, None] + np.arange(-reach, reach + 1)).ravel(), 0, n - 1)

        keep[around(1)] = 1  # shown next to a target
        keep[self._by_decode_rank[around(self.reorder_distance)]] = 1  # decoded where one is shown
        return keep

    def untrust(self, reason: str) -> None:
        self.trusted = False
        self.reason = reason

    # ---- planning ----

    def plan(self, targets: np.ndarray) -> dict[str, np.ndarray]:
        """Clusters for sorted unique presentation indices: one seek and forward pass each.

        A target joins the current cluster unless its start keyframe lies
        beyond every packet the cluster decodes so far: then seeking to that
        keyframe skips packets, and decoding through the gap would not. Nor
        does it join when a known damaged packet lies between the cluster's
        keyframe and its own: seeking past the damage keeps it out.
        """
        key = self.frame_key[targets]
        dec = self.frame_dec[targets]
        # A cluster never decodes through a known damaged packet to reach a
        # target after it.
        damaged_before = self.damaged_before
        starts = [0]
        reach, first_key = dec[0], key[0]
        for j in range(1, targets.shape[0]):
            if key[j] > reach or damaged_before[key[j]] > damaged_before[first_key]:
                starts.append(j)
                reach, first_key = dec[j], key[j]
            else:
                reach = max(reach, dec[j])
                first_key = min(first_key, key[j])
        bounds = np.asarray(starts + [targets.shape[0]], np.int64)
        c_key = key[bounds[:-1]].copy()
        c_reach = np.maximum.reduceat(dec, bounds[:-1]) if targets.size else dec
        for c in range(c_key.shape[0]):  # the earliest start keyframe of the cluster
            c_key[c] = key[bounds[c]:bounds[c + 1]].min()
        end = self.pkt_pos + self.pkt_size
        # A reordering codec's cluster also decodes until one frame after its
        # targets comes out (_decode_paths.pyx confirm_order): fetch those packets with it.
        more = self.confirm_packets
        c_end = np.asarray([end[k:r + 1 + more].max() for k, r in zip(c_key, c_reach)], np.int64)
        return {
            "bounds": bounds,
            # The last frame shown of those decoded up to the cluster's last
            # target: the decode goes on until it is out, so that a picture
            # the decoder could not finish, decoded before a target but shown
            # after it (the anchor a B-frame references), is seen before the
            # target is returned (_decode_paths.pyx _decode_cluster).
            "settle_idx": self.shown_last_by[c_reach].astype(np.int64),
            "key_dec": c_key.astype(np.int64),
            "key_pos": self.pkt_pos[c_key],
            "seek_ts": self.pkt_seek_ts[c_key],
            "reach_dec": c_reach.astype(np.int64),
            "end_byte": c_end,
        }

    # ---- storage ----

    def to_bytes(self) -> bytes:
        """The blob stored in the KV (layout: index_blob.py)."""
        flags = np.zeros(self.pkt_pts.shape, np.uint8)
        for bit, name in enumerate(FLAG_COLUMNS):
            flags |= getattr(self, name).astype(np.uint8) << bit
        columns = {name: getattr(self, name) for name in INT_COLUMNS}
        columns["pkt_flags"] = flags
        columns["audio_packets"] = self.audio_packets
        if self.decoded_pts is not None:
            columns["decoded_pts"] = self.decoded_pts
        meta = {"format_name": self.format_name, "codec_name": self.codec_name,
                "stream_index": self.stream_index, "trusted": self.trusted,
                "reason": self.reason, "header": self.header,
                "damage_notes": {str(k): v for k, v in self.damage_notes.items()}}
        return index_blob.pack(FORMAT_VERSION, meta, columns, self.open_extents)

    @classmethod
    def from_bytes(cls, data: bytes) -> FrameIndex | None:
        """The index, or None if data is not a current-format index."""
        try:
            meta, columns, extents = index_blob.unpack(data, FORMAT_VERSION)
            flags = columns["pkt_flags"]
            packets = {name: columns[name] for name in INT_COLUMNS}
            audio = columns["audio_packets"]
            if (any(values.shape != flags.shape for values in packets.values())
                    or flags.ndim != 1 or audio.ndim != 2 or audio.shape[0] != 3):
                return None  # the constructor would broadcast or index out of range
            for bit, name in enumerate(FLAG_COLUMNS):
                packets[name] = (flags & (1 << bit)) != 0
            return cls(str(meta["format_name"]), str(meta["codec_name"]),
                       int(meta["stream_index"]), trusted=bool(meta["trusted"]),
                       reason=str(meta["reason"]), header=meta["header"],
                       damage_notes={int(k): str(v) for k, v in meta["damage_notes"].items()},
                       decoded_pts=columns.get("decoded_pts"), open_extents=extents,
                       audio_packets=audio, **packets)
        except Exception:  # noqa: BLE001 - a damaged blob is just a miss
            return None
