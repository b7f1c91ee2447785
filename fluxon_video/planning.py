"""Read planning: which frames go to which decoder, and where their rows land.

One rule for both places that split a read over two decoders: the reader
(a read of several GOPs, with ``num_threads >= 2``, on its own decoder and a
second one) and the pool (a batch group on two readers). An *item* is what
must stay on one decoder: a frame for the reader, a request for the pool.
Its decode span is the packets a decoder goes through for it, from the
keyframe the decode starts at to its last frame, in decode order (the frame
index's ``frame_key`` and ``frame_dec``). Two sets may go to two decoders only
when their spans share no packet, so nothing is decoded twice: an open GOP's
leading pictures, decoded after the next keyframe, keep the two GOPs together.
"""

from __future__ import annotations

import numpy as np

# A read splits only when the smaller set has at least this share of the
# decode work: below it, the second decoder buys little for its thread.
MIN_SPLIT_SHARE = 0.2


def split_in_two(starts: np.ndarray, ends: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """Item positions in two sets whose decode spans share no packet, with
    the work (packets decoded) as even as the spans allow, the larger set
    first; None when no such split gives the smaller set MIN_SPLIT_SHARE.

    ``starts[k]``/``ends[k]``: item k's decode span, inclusive.
    """
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if starts.size < 2:
        return None
    order = np.argsort(starts, kind="stable")
    first, last = starts[order], ends[order]
    reach = np.maximum.accumulate(last)
    # Overlapping spans merge into blocks; a cut may fall only between blocks.
    new_block = np.concatenate([[True], first[1:] > reach[:-1]])
    block_starts = np.flatnonzero(new_block)
    if block_starts.size < 2:
        return None
    block_of = np.cumsum(new_block) - 1
    work = np.zeros(block_starts.size, np.int64)
    np.maximum.at(work, block_of, last - first[block_starts[block_of]] + 1)
    total = int(work.sum())
    before = np.cumsum(work)[:-1]  # the work left of each cut
    cut = int(np.argmin(np.maximum(before, total - before)))
    left_work = int(before[cut])
    if min(left_work, total - left_work) < MIN_SPLIT_SHARE * total:
        return None
    left, right = order[:block_starts[cut + 1]], order[block_starts[cut + 1]:]
    return (left, right) if left_work >= total - left_work else (right, left)


def place_rows(frames: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Move row k of ``frames`` to row ``positions[k]`` in place, following the
    permutation's cycles: one row of scratch instead of a second array."""
    source = np.empty_like(positions)
    source[positions] = np.arange(positions.size)
    done = np.zeros(positions.size, bool)
    for start in range(positions.size):
        if done[start] or source[start] == start:
            continue
        held, j = frames[start].copy(), start
        while True:
            done[j] = True
            if source[j] == start:
                frames[j] = held
                break
            frames[j] = frames[source[j]]
            j = source[j]
    return frames


def decode_span_packets(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The decode positions a read goes through for items whose decode spans
    are ``[starts[k], ends[k]]``: their union, sorted (each packet once)."""
    runs = page_runs(starts, ends)
    if not runs:
        return np.zeros(0, np.int64)
    return np.concatenate([np.arange(a, b + 1, dtype=np.int64) for a, b in runs])


def page_runs(first_pages: np.ndarray, last_pages: np.ndarray) -> list[tuple[int, int]]:
    """Runs ``(first, last)`` of consecutive pages covering every ``[first_pages[k],
    last_pages[k]]``, in file order: the ranges to fetch, each page once. (Any
    inclusive integer intervals: overlapping or touching ones merge.)"""
    if len(first_pages) == 0:
        return []
    order = np.argsort(first_pages, kind="stable")
    first = np.asarray(first_pages, np.int64)[order]
    last = np.maximum.accumulate(np.asarray(last_pages, np.int64)[order])
    new_run = np.concatenate([[True], first[1:] > last[:-1] + 1])
    ends = np.concatenate([np.flatnonzero(new_run)[1:] - 1, [first.size - 1]])
    return [(int(a), int(b)) for a, b in zip(first[new_run], last[ends])]
