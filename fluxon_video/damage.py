"""Damaged streams: which frames depend on damage, and what each policy shows.

Damage is a packet the decoder rejects, or one whose frame it flags corrupt
(error concealment). The demux-only scan cannot see it; decoding finds it.
A read that meets damage it did not know of stops, a one-threaded decode of
the same stretch names the packet (frame threads report an error packets
later), and the frame index records it (``FrameIndex.pkt_damaged``) and goes
back to the shared KV, so every reader of the file version knows it.

Two policies (``on_damage``):

- ``"error"`` (default): frames keep the index's numbering (one per shown
  packet). A frame depends on a damaged packet ``d`` when its start keyframe
  is at or before ``d`` and its own packet at or after it, in decode order:
  decoding it from its keyframe passes through ``d``. Reads of such frames
  raise :class:`FluxonFsDamagedStreamError`; every other frame reads as on an
  undamaged file, and no decode ever feeds a known damaged packet.
- ``"conceal"``: frames are what a one-threaded sequential decode outputs
  (a rejected packet gives no frame; concealed frames are kept). Opening
  surveys the whole file once with such a decode (stored with the index);
  frames that depend on no damage are read by seeking, the others by that
  sequential decode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fluxon_video.errors import FluxonFsConfigError, FluxonFsDamagedStreamError
from fluxon_video.frame_index import FrameIndex

POLICIES = ("error", "conceal")


def check_policy(on_damage: Any) -> str:
    if on_damage not in POLICIES:
        raise FluxonFsConfigError(f"on_damage must be one of {POLICIES}, got {on_damage!r}")
    return str(on_damage)


def affected_frames(index: FrameIndex) -> np.ndarray:
    """Per frame (index numbering): whether decoding it passes a damaged packet."""
    if not index.pkt_damaged.any():
        return np.zeros(index.frame_count, bool)
    before = index.damaged_before
    key, own = index.frame_key, index.frame_dec
    return (key >= 0) & (before[own + 1] - before[np.maximum(key, 0)] > 0)


def first_damage(index: FrameIndex, frame: int) -> int:
    """The first damaged packet (decode position) frame ``frame`` depends on."""
    key, own = int(index.frame_key[frame]), int(index.frame_dec[frame])
    return key + int(np.flatnonzero(index.pkt_damaged[key:own + 1])[0])


def describe_packet(index: FrameIndex, dec: int) -> str:
    num, den = index.header.get("time_base", (1, 1))
    return (f"packet {dec} in decode order (pts {index.pkt_pts[dec] * num / den:.3f} s, "
            f"byte {index.pkt_pos[dec]})")


def check_targets(index: FrameIndex, targets: np.ndarray, name: str) -> None:
    """Raise FluxonFsDamagedStreamError if a target (index numbering) depends on damage."""
    if not index.pkt_damaged.any() or targets.size == 0:
        return
    hit = targets[affected_frames(index)[targets]]
    if hit.size:
        frame = int(hit[0])
        dec = first_damage(index, frame)
        note = index.damage_notes.get(dec) or "the decoder rejected it or flagged its frame corrupt"
        raise FluxonFsDamagedStreamError(
            f"{name}: frame {frame} depends on damaged data: {describe_packet(index, dec)}: "
            f"{note} ({hit.size} of the requested frames depend on damage; "
            "on_damage='conceal' returns what a one-threaded decode shows)")


def learn(index: FrameIndex, damaged: np.ndarray, notes: dict[int, str]) -> bool:
    """Add damaged packets to the index; whether anything was new."""
    new = damaged.astype(bool) & ~index.pkt_damaged
    if not new.any():
        return False
    index.pkt_damaged = index.pkt_damaged | new
    for dec, message in notes.items():
        index.damage_notes.setdefault(int(dec), message)
    return True


def survey_agrees(index: FrameIndex) -> bool:
    """Whether the one-threaded survey found exactly the index's frames and no damage."""
    return (index.decoded_pts is not None and not index.pkt_damaged.any()
            and np.array_equal(index.decoded_pts, index.frame_pts))


def _index_frames(index: FrameIndex, pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each pts (the survey's), the index frame with that pts: (frame
    numbers, whether one exists; the numbers are meaningless where not)."""
    j = np.searchsorted(index.frame_pts, pts)
    found = j < index.frame_count
    found[found] = index.frame_pts[j[found]] == pts[found]
    return j, found


def numbered_frames(index: FrameIndex,
                    on_damage: str = "error") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The frames a reader with this policy numbers: (pts, keyframe mask, decode
    position of each frame's packet, -1 where the survey's frame has no packet
    with its pts)."""
    if on_damage != "conceal" or index.decoded_pts is None:
        return index.frame_pts, index.pkt_key[index.frame_dec], index.frame_dec
    pts = index.decoded_pts
    j, found = _index_frames(index, pts)
    packets = np.where(found, index.frame_dec[np.minimum(j, index.frame_count - 1)], -1)
    is_key = found & index.pkt_key[np.maximum(packets, 0)] & ~index.pkt_damaged[
        np.maximum(packets, 0)]
    return pts, is_key, packets.astype(np.int64)


def concealed_plan(index: FrameIndex, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For sorted unique targets in the survey's numbering: (mask of those read
    by seeking, their frame numbers in the index). The rest decode sequentially."""
    if not index.trusted or index.decoded_pts is None:
        return np.zeros(targets.shape, bool), np.empty(0, np.int64)
    j, found = _index_frames(index, index.decoded_pts[targets])
    by_index = found.copy()
    by_index[found] = ~affected_frames(index)[j[found]]
    mapped = j[by_index].astype(np.int64)
    if mapped.size > 1 and (np.diff(mapped) <= 0).any():
        # The survey's times are not the index's order: decode all sequentially.
        return np.zeros(targets.shape, bool), np.empty(0, np.int64)
    return by_index, mapped


def merge_stored(index: FrameIndex, stored: Any) -> None:
    """Fold what another reader stored (a FrameIndex of the same file version)
    into index before writing it back, so neither reader's findings are lost."""
    if not isinstance(stored, FrameIndex) or stored.pkt_damaged.shape != index.pkt_damaged.shape:
        return
    learn(index, stored.pkt_damaged, stored.damage_notes)
    if index.decoded_pts is None and stored.decoded_pts is not None:
        index.decoded_pts = stored.decoded_pts
