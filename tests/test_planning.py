"""fluxon_video/planning.py's split rule, held to a brute-force search over every cut."""

from __future__ import annotations

import numpy as np
import pytest

from fluxon_video.planning import MIN_SPLIT_SHARE, split_in_two


def packets(starts, ends, chosen) -> set[int]:
    return {p for k in chosen for p in range(starts[k], ends[k] + 1)}


def best_split(starts, ends):
    """Every way to put the items, sorted by start, on two decoders: the
    smallest larger share among the splits whose decoders share no packet."""
    order = sorted(range(len(starts)), key=lambda k: starts[k])
    best = None
    for cut in range(1, len(order)):
        left, right = packets(starts, ends, order[:cut]), packets(starts, ends, order[cut:])
        if left & right:
            continue
        total = len(left) + len(right)
        if min(len(left), len(right)) < MIN_SPLIT_SHARE * total:
            continue
        if best is None or max(len(left), len(right)) < best:
            best = max(len(left), len(right))
    return best


def test_spans_that_share_a_packet_stay_on_one_decoder():
    # an open GOP's leading pictures (decoded after the next keyframe) join the two GOPs
    assert split_in_two(np.array([0, 0, 10]), np.array([4, 12, 15])) is None
    assert split_in_two(np.array([0]), np.array([9])) is None


def test_the_larger_set_comes_first_and_lopsided_splits_are_refused():
    left, right = split_in_two(np.array([20, 0, 21]), np.array([40, 9, 30]))
    assert sorted(left.tolist()) == [0, 2] and right.tolist() == [1]
    assert split_in_two(np.array([0, 10]), np.array([0, 30])) is None  # 1 packet of 22


@pytest.mark.parametrize("seed", range(200))
def test_the_split_is_the_brute_force_best(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 8))
    starts = rng.integers(0, 60, n)
    ends = starts + rng.integers(0, 15, n)
    halves = split_in_two(starts, ends)
    best = best_split(starts.tolist(), ends.tolist())
    if best is None:
        assert halves is None
        return
    assert halves is not None
    first, second = halves
    assert sorted([*first.tolist(), *second.tolist()]) == list(range(n))
    a, b = packets(starts, ends, first), packets(starts, ends, second)
    assert not a & b and len(a) >= len(b)
    assert len(a) == best
