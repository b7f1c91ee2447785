"""Lookahead: a read's bytes fetched ahead through the same piece path, never a byte more."""

from __future__ import annotations

import time

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.planning import decode_span_packets, page_runs
from tests.helpers import make_patcher

H, W = 36, 64
NAME = "long_640x360.mp4"  # GOP 24, 288 frames
CLIPS = [list(range(30, 46, 4)), list(range(200, 216, 4))]


def wait_for_pages(reader, pages: int) -> None:
    deadline = time.monotonic() + 60
    while reader._byte_source.stats()["pages_fetched"] < pages:
        assert time.monotonic() < deadline, "the prefetched pages never arrived"
        time.sleep(0.01)


def cold_read(media, indices, *, ahead: bool):
    """A new patcher (its own KV: cold) reads ``indices``; with ``ahead`` it
    first prefetches them and waits for the pages. Its frames, the read's
    stats, every remote byte the reader fetched, and the bytes queued."""
    with make_patcher(None, media.root, piece_size=16 << 10) as patcher:
        with patcher.open_video_reader("train", NAME, H, W) as reader:
            queued = 0
            if ahead:
                before = reader._byte_source.stats()["pages_fetched"]
                queued = reader.prefetch_frames(indices)
                wait_for_pages(reader, before + queued // reader._byte_source.page_size)
            frames = reader.read_frames_numpy(indices)
            read = reader.last_stats
            return frames, read, reader._byte_source.stats()["bytes_fetched"], queued


@pytest.mark.parametrize("indices", CLIPS + [CLIPS[0] + CLIPS[1]])
def test_prefetched_frames_cost_no_byte_more_and_the_read_waits_less(media, indices):
    ref = media.reference(NAME, H, W)
    plain, plain_read, plain_bytes, _ = cold_read(media, indices, ahead=False)
    ahead, ahead_read, ahead_bytes, queued = cold_read(media, indices, ahead=True)
    np.testing.assert_array_equal(plain, ref[indices])
    np.testing.assert_array_equal(ahead, ref[indices])
    assert queued > 0
    assert ahead_bytes == plain_bytes  # nothing the read would not have read
    # The pages came before the read asked: the read itself fetched that much less.
    assert ahead_read.bytes_fetched == plain_read.bytes_fetched - queued
    assert ahead_read.page_misses <= plain_read.page_misses
    # A read queues its plan's pages itself (the decoder's own prefetch): the
    # lookahead queued the same pages, only earlier, and none was dropped.
    assert ahead_read.ahead_pages == plain_read.ahead_pages > 0
    assert ahead_read.ahead_hits == plain_read.ahead_hits
    assert ahead_read.ahead_wasted == plain_read.ahead_wasted == 0


def test_the_pool_opens_and_fetches_the_next_batch_ahead(media):
    ref = media.reference(NAME, H, W)
    requests = [fv.FluxonFsVideoReadRequest("train", NAME, H, W, 1, tuple(c)) for c in CLIPS]
    with make_patcher(None, media.root, piece_size=16 << 10) as patcher, \
            patcher.open_video_reader_pool() as pool:
        assert pool.prefetch(requests) > 0
        assert pool.counters().readers_opened == 1 and len(pool.idle_readers()) == 1
        # one worker: a spare core would split the group over a second reader
        results = pool.read_many_numpy_with_stats(requests, max_workers=1)
        assert pool.counters().readers_opened == 1  # the read took the reader opened ahead
        for request, result in zip(requests, results):
            np.testing.assert_array_equal(result.frames, ref[list(request.indices)])
        with pytest.raises(TypeError, match="FluxonFsVideoReadRequest"):
            pool.prefetch([("train", NAME)])


def test_nothing_is_planned_without_a_trusted_index_or_for_bad_indices(media):
    with fv.open_video(media.path(NAME), H, W) as reader:
        assert reader.prefetch_frames([10**6]) == 0  # the read names the bad index
        assert reader.prefetch_frames([]) == 0


def test_the_span_and_page_helpers_cover_each_packet_and_page_once():
    assert decode_span_packets(np.array([5, 0, 3]), np.array([6, 1, 4])).tolist() == [
        0, 1, 3, 4, 5, 6]
    assert decode_span_packets(np.array([0, 2]), np.array([9, 4])).tolist() == list(range(10))
    assert page_runs(np.array([4, 0, 1, 9]), np.array([5, 0, 2, 9])) == [(0, 2), (4, 5), (9, 9)]
    assert page_runs(np.array([]), np.array([])) == []


def test_a_batch_read_opens_and_fetches_the_next_one_meanwhile(media):
    """read_many(..., ahead=next): the next batch's reader is opened on the side,
    and the next call reads with it; a bad request ahead is the next call's error."""
    other = "hevc.mp4"
    for name in (NAME, other):
        media.path(name)  # generated on first use
    now = [fv.FluxonFsVideoReadRequest("train", NAME, H, W, 1, tuple(CLIPS[0]))]
    coming = [fv.FluxonFsVideoReadRequest("train", other, H, W, 1, (0, 5)),
              fv.FluxonFsVideoReadRequest("train", NAME, H, W, 1, tuple(CLIPS[1]))]
    with make_patcher(None, media.root, piece_size=16 << 10) as patcher, \
            patcher.open_video_reader_pool() as pool:
        first = pool.read_many_numpy_with_stats(now, max_workers=1, ahead=coming)
        np.testing.assert_array_equal(first[0].frames, media.reference(NAME, H, W)[CLIPS[0]])
        assert pool.counters().readers_opened == 2  # this batch's, and the next one's
        assert sorted(k.relpath for k in pool.idle_readers()) == sorted([NAME, other])
        second = pool.read_many_numpy_with_stats(coming, max_workers=1)
        assert pool.counters().readers_opened == 2 and all(r.reader_reused for r in second)
        np.testing.assert_array_equal(second[0].frames, media.reference(other, H, W)[[0, 5]])
        np.testing.assert_array_equal(second[1].frames, media.reference(NAME, H, W)[CLIPS[1]])
        missing = [fv.FluxonFsVideoReadRequest("train", "gone.mp4", H, W, 1, (0,))]
        pool.read_many_numpy_with_stats(now, ahead=missing)  # not this call's error
        with pytest.raises(errors.FluxonFsNotFoundError, match="gone.mp4"):
            pool.read_many_numpy_with_stats(missing)
