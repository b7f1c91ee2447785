"""Lookahead: a read's bytes fetched ahead through the same piece path, never a byte more."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from torch.utils.data import DataLoader, Dataset, get_worker_info

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


def test_the_next_clip_of_the_file_being_read_is_queued_beside_the_read(media, monkeypatch):
    """read_many(..., ahead=next) where the next clip is of the file being read:
    its pages are queued on the reader while the read still holds it (not once
    it is over), the read's frames are untouched, and the next read finds its
    pages there as it would after a prefetch on an idle reader."""
    from fluxon_video.reader import FluxonFsVideoReader

    queued_during_read, reading, queued = [], threading.Event(), threading.Event()
    prefetch, read = FluxonFsVideoReader.prefetch_frames, FluxonFsVideoReader.read_frames_numpy

    def watched_prefetch(self, indices):
        queued_during_read.append(reading.is_set())
        try:
            return prefetch(self, indices)
        finally:
            queued.set()

    def read_once_queued(self, indices, out=None):
        reading.set()
        try:
            queued.wait(30)  # the read lasts until the lookahead has queued (or 30 s)
            return read(self, indices, out)
        finally:
            reading.clear()

    monkeypatch.setattr(FluxonFsVideoReader, "prefetch_frames", watched_prefetch)
    monkeypatch.setattr(FluxonFsVideoReader, "read_frames_numpy", read_once_queued)
    now = [fv.FluxonFsVideoReadRequest("train", NAME, H, W, 1, tuple(CLIPS[0]))]
    coming = [fv.FluxonFsVideoReadRequest("train", NAME, H, W, 1, tuple(CLIPS[1]))]
    ref = media.reference(NAME, H, W)
    with make_patcher(None, media.root, piece_size=16 << 10) as patcher, \
            patcher.open_video_reader_pool() as pool:
        first = pool.read_many_numpy_with_stats(now, max_workers=1, ahead=coming)
        assert queued_during_read == [True]  # queued while the read held the reader
        np.testing.assert_array_equal(first[0].frames, ref[CLIPS[0]])
        (reader,) = [r for r in pool._local().idle]
        wait_for_pages(reader, reader._byte_source.stats()["ahead_pages"])
        second = pool.read_many_numpy_with_stats(coming, max_workers=1)
        np.testing.assert_array_equal(second[0].frames, ref[CLIPS[1]])
        assert second[0].reader_reused and pool.counters().readers_opened == 1
        # it fetched no more itself than after a prefetch on an idle reader
        _, alone, _, _ = cold_read(media, CLIPS[1], ahead=True)
        assert second[0].stats.ahead_hits > 0 and second[0].stats.ahead_wasted == 0
        assert second[0].stats.bytes_fetched <= alone.bytes_fetched


def test_a_prefetch_beside_reads_and_close_is_safe(media):
    """prefetch_frames from other threads while the reader reads and then
    closes: every read is right, and a prefetch after close says so."""
    ref = media.reference(NAME, H, W)
    with make_patcher(None, media.root, piece_size=16 << 10) as patcher:
        reader = patcher.open_video_reader("train", NAME, H, W)
        outcomes, stop = [], threading.Event()

        def keep_prefetching(clip):
            while not stop.is_set():
                try:
                    reader.prefetch_frames(clip)
                except errors.FluxonFsClosedError:
                    outcomes.append("closed")
                    return
            outcomes.append("stopped")

        threads = [threading.Thread(target=keep_prefetching, args=(c,)) for c in CLIPS]
        for t in threads:
            t.start()
        for clip in CLIPS * 3:
            np.testing.assert_array_equal(reader.read_frames_numpy(clip), ref[clip])
        reader.close()
        time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(30)
        assert outcomes == ["closed", "closed"]


# ---- the dataset: the sampler's next batch, fetched while this one decodes ----

DATASET_VIDEOS = [NAME, "hevc.mp4", "h264_moov_end.mp4", "vp9.webm"]


def dataset_epoch(media, lookahead: bool):
    """One epoch of SameVideoBatchSampler's batches (one video each), read as a
    DataLoader with no workers reads them, from a cold store. After each batch:
    the videos whose readers sit idle; the frames; the process's stats."""
    from fluxon_video.torch import SameVideoBatchSampler, VideoClipDataset

    with make_patcher(None, media.root, piece_size=16 << 10) as patcher:
        ds = VideoClipDataset(patcher, "train", DATASET_VIDEOS, clip_len=4, stride=3,
                              clips_per_video=2, height=H, width=W, seed=5)
        sampler = SameVideoBatchSampler(ds, 2, seed=11, lookahead=lookahead)
        sampler.set_epoch(1)
        batches = list(sampler)
        idle, frames = [], []
        for batch in batches:
            items = ds.__getitems__(batch)
            frames.append([(item["relpath"], item["indices"].tolist(), item["frames"].numpy())
                           for item in items])
            idle.append({key.relpath for key in ds.pool.idle_readers()})
        stats = ds.pool.stats()
        ds.pool.close()
        return batches, idle, frames, stats


def test_a_dataset_opens_and_fetches_its_next_batch_while_one_decodes(media):
    for name in DATASET_VIDEOS:
        media.path(name)
    batches, idle, frames, stats = dataset_epoch(media, lookahead=True)
    _, idle_off, frames_off, stats_off = dataset_epoch(media, lookahead=False)
    videos = [DATASET_VIDEOS[b[0] // 2] for b in batches]
    assert len(set(videos)) == len(videos) == 4  # a video per batch
    for k, video in enumerate(videos[1:], start=1):
        assert video in idle[k - 1]  # its reader opened during the batch before
        assert video not in idle_off[k - 1]
    for got, plain in zip(frames, frames_off):  # the same clips, the CLI's frames
        for (relpath, indices, pixels), (relpath2, indices2, pixels2) in zip(got, plain):
            assert (relpath, indices) == (relpath2, indices2)
            np.testing.assert_array_equal(pixels, media.reference(relpath, H, W)[indices])
            np.testing.assert_array_equal(pixels, pixels2)
    # Nothing fetched that the epoch did not read, each file's index built once:
    # a second reader of a file (a batch split over two readers, the reader after
    # the dataset's metadata call) takes the index and the pieces the first one
    # is still writing to the KV from this process, not from a scan and a refetch.
    assert 0 < stats.remote_bytes <= stats_off.remote_bytes
    assert stats.metadata_calls == stats_off.metadata_calls
    assert stats.index_scans == stats_off.index_scans == len(DATASET_VIDEOS)
    assert stats.ahead_wasted == 0


class _Recorder(Dataset):
    """Items that say which worker got which batch, and what its plan says comes next."""

    def __init__(self, sampler) -> None:
        from fluxon_video.batch_plan import BatchPlan

        self.plan = BatchPlan(sampler)

    def __len__(self) -> int:
        return 64

    def __getitems__(self, batch):
        info = get_worker_info()
        return [(info.id if info else -1, tuple(batch), self.plan.after(batch))]


class _Batches:
    """A planned batch sampler over a fixed order (what SameVideoBatchSampler gives)."""

    def __init__(self, order) -> None:
        self.order = order

    def __iter__(self):
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)

    def planned_batches(self):
        return [list(b) for b in self.order]

    def plan_version(self):
        return 0


@pytest.mark.parametrize("workers", [0, 2])
def test_the_plan_names_the_batch_each_process_reads_next(workers):
    """The DataLoader deals batches round robin: each process's plan names
    the batch that process is then given; the last ones plan nothing, and a
    batch the sampler never made plans nothing."""
    order = [[i, i + 1] for i in range(0, 20, 2)] + [[0, 1]]  # one batch comes twice
    sampler = _Batches(order)
    loader = DataLoader(_Recorder(sampler), batch_sampler=sampler, num_workers=workers,
                        collate_fn=lambda items: items[0],
                        multiprocessing_context="fork" if workers else None)
    got: dict[int, list[tuple]] = {}
    nexts: dict[int, list] = {}
    for worker, batch, after in loader:
        got.setdefault(worker, []).append(batch)
        nexts.setdefault(worker, []).append(after)
    assert sum(map(len, got.values())) == len(order)
    for worker, seen in got.items():
        assert [list(b) for b in seen[1:]] == nexts[worker][:-1]  # each plan came true
        assert nexts[worker][-1] is None  # the epoch's end plans nothing
    assert _Recorder(sampler).plan.after([5, 6]) is None


def test_a_batch_other_than_the_planned_one_marks_the_plan_changed():
    from fluxon_video.batch_plan import BatchPlan

    plan = BatchPlan(_Batches([[0, 1], [2, 3], [4, 5], [6, 7]]))
    assert plan.after([0, 1]) == [2, 3] and not plan.changed
    assert plan.after([2, 3]) == [4, 5] and not plan.changed
    assert plan.after([6, 7]) is None and plan.changed  # [4, 5] was planned
    assert plan.after([9]) is None and not plan.changed  # nothing was planned


def test_a_changed_plan_drops_the_pages_queued_for_it(media, tmp_path):
    """The dataset fetched ahead for the planned batch; another batch comes: the
    pages no fetch worker has started are dropped (counted as wasted), not fetched."""
    from fluxon_video.testing import AgentProcess
    from fluxon_video.torch import VideoClipDataset
    from tests.helpers import agent_config_text

    class FixedClips(VideoClipDataset):
        """Items 0-1: two clips of a short video; 2-3: two clips far apart in the long one."""

        def clip_with_times(self, i):
            return [("hevc.mp4", [0, 4]), ("hevc.mp4", [8, 12]),
                    (NAME, CLIPS[0]), (NAME, CLIPS[1])][i] + (None,)

    for name in ("hevc.mp4", NAME):
        media.path(name)
    config = tmp_path / "agent.toml"
    config.write_text(agent_config_text(media.root))
    config.chmod(0o600)
    # Each answer 800 ms late and one fetch worker: the first page job of the
    # long video is in flight while the others still wait in the queue.
    with AgentProcess(config, ["--inject-latency-ms", "800"]) as agent, \
            make_patcher(agent.url, media.root, piece_size=16 << 10,
                         client={"fetch_workers": 1}) as patcher:
        ds = VideoClipDataset(patcher, "train", ["hevc.mp4", NAME], clip_len=2,
                              clips_per_video=2, height=H, width=W)
        ds.__class__ = FixedClips
        ds.__getitems__([0, 1])  # the short video's reader and pages, before any plan
        ds.plan_batches(_Batches([[0, 1], [2, 3]]))
        ds.__getitems__([0, 1])  # opens the long video and queues its clips' pages
        long_reader = next(r for r, key in ds.pool._local().idle.items() if key.relpath == NAME)
        assert long_reader._byte_source.stats()["ahead_wasted"] == 0
        again = ds.__getitems__([0, 1])  # not the planned [2, 3]
        np.testing.assert_array_equal(again[1]["frames"].numpy(),
                                      media.reference("hevc.mp4", H, W)[[8, 12]])
        stats = long_reader._byte_source.stats()
        assert stats["ahead_wasted"] > 0 and stats["readahead_cancelled"] > 0
        ds.pool.close()


def test_a_read_elsewhere_keeps_the_pages_planned_for_the_next_one(media, tmp_path):
    """Pages queued for a planned read survive another read's seeks (they are
    the plan's, not that decoder's speculation); only a cancel drops them."""
    from fluxon_video.testing import AgentProcess
    from tests.helpers import agent_config_text

    media.path(NAME)
    config = tmp_path / "agent.toml"
    config.write_text(agent_config_text(media.root))
    config.chmod(0o600)
    ref = media.reference(NAME, H, W)
    # Each answer 300 ms late and one fetch worker: CLIPS[0]'s pages in flight,
    # CLIPS[1]'s queued behind them while CLIPS[0] is read (and its decoder seeks).
    with AgentProcess(config, ["--inject-latency-ms", "300"]) as agent, \
            make_patcher(agent.url, media.root, piece_size=16 << 10,
                         client={"fetch_workers": 1}) as patcher, \
            patcher.open_video_reader("train", NAME, H, W) as reader:
        assert reader.prefetch_frames(CLIPS[0]) > 0 and reader.prefetch_frames(CLIPS[1]) > 0
        np.testing.assert_array_equal(reader.read_frames_numpy(CLIPS[0]), ref[CLIPS[0]])
        np.testing.assert_array_equal(reader.read_frames_numpy(CLIPS[1]), ref[CLIPS[1]])
        stats = reader._byte_source.stats()
        assert stats["ahead_wasted"] == 0 and stats["readahead_cancelled"] == 0
        assert stats["ahead_hits"] > 0
