"""The reader pool: LRU, leases, batched reads, thread and fork safety."""

from __future__ import annotations

import multiprocessing
import os
import threading

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.video import FluxonFsVideoReadRequest
from tests.helpers import make_patcher, run_in_threads

pytest.importorskip("fluxon_video._decode")
pytestmark = pytest.mark.timeout(120)

H264 = "bucket/videos/h264_faststart.mp4"
HEVC = "bucket/videos/hevc.mp4"
VP9 = "bucket/videos/vp9.webm"
MOOV_END = "bucket/videos/h264_moov_end.mp4"
REFS = {H264: "h264_faststart.mp4", HEVC: "hevc.mp4", VP9: "vp9.webm", MOOV_END: "h264_moov_end.mp4"}


def args(relpath, indices, size=32, threads=1, export="train"):
    return dict(export_name=export, relpath=relpath, height=size, width=size,
                num_threads=threads, indices=indices)


@pytest.fixture
def patcher(export_root):
    with make_patcher(None, export_root) as p:
        yield p


def test_lru_order_and_bound(patcher):
    with patcher.open_video_reader_pool(max_readers=2) as pool:
        pool.read_frames_numpy(**args(H264, [0]))
        pool.read_frames_numpy(**args(HEVC, [0]))
        assert [k.relpath for k in pool.idle_readers()] == [H264, HEVC]
        pool.read_frames_numpy(**args(H264, [1]))  # H264 becomes most recent
        assert [k.relpath for k in pool.idle_readers()] == [HEVC, H264]
        pool.read_frames_numpy(**args(VP9, [0]))  # evicts HEVC, the least recent
        assert [k.relpath for k in pool.idle_readers()] == [H264, VP9]
        c = pool.counters()
        assert (c.readers_opened, c.leases_reused, c.readers_evicted) == (3, 1, 1)


def test_key_includes_size_threads_and_identity(patcher):
    with patcher.open_video_reader_pool(max_readers=8) as pool:
        pool.read_frames_numpy(**args(H264, [0], export="shared"))
        pool.read_frames_numpy(**args(H264, [0], size=48, export="shared"))
        pool.read_frames_numpy(**args(H264, [0], threads=2, export="shared"))
        with patcher.using_identity("bob"):
            result = pool.read_frames_numpy_with_stats(**args(H264, [0], export="shared"))
            assert not result.reader_reused
        assert pool.read_frames_numpy_with_stats(**args(H264, [0], export="shared")).reader_reused
        assert pool.counters().readers_opened == 4
        assert {k.identity.name for k in pool.idle_readers()} == {"alice", "bob"}


def test_results_and_stats(media, patcher):
    ref = media.reference("hevc.mp4", 32, 32)
    with patcher.open_video_reader_pool() as pool:
        first = pool.read_frames_numpy_with_stats(**args(HEVC, [4, 9]))
        second = pool.read_frames_numpy_with_stats(**args(HEVC, [30]))
    np.testing.assert_array_equal(first.frames, ref[[4, 9]])
    np.testing.assert_array_equal(second.frames, ref[[30]])
    assert not first.reader_reused and second.reader_reused
    assert first.stats.open_ms > 0 and second.stats.open_ms == 0
    assert first.stats.remote_bytes > 0 and second.stats.remote_bytes == 0  # page cache
    assert second.total_ms >= second.decode_ms > 0


def test_leases_are_exclusive_under_threads(media, patcher):
    """12 threads on overlapping keys: every frame right, no reader used twice at once."""
    pool = patcher.open_video_reader_pool(max_readers=3)
    in_use: set[int] = set()
    overlap = []
    lock = threading.Lock()
    real_read = fv.FluxonFsVideoReader.read_frames_numpy

    def watched_read(reader, indices, out=None):
        with lock:
            if id(reader) in in_use:
                overlap.append(reader)
            in_use.add(id(reader))
        try:
            return real_read(reader, indices, out)
        finally:
            with lock:
                in_use.discard(id(reader))

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(6):
            relpath = [H264, HEVC, VP9][rng.integers(0, 3)]
            idx = rng.integers(0, 48, 3).tolist()
            frames = pool.read_frames_numpy(**args(relpath, idx))
            np.testing.assert_array_equal(frames, media.reference(REFS[relpath], 32, 32)[idx])

    fv.FluxonFsVideoReader.read_frames_numpy = watched_read
    try:
        failures = run_in_threads(worker, 12)
    finally:
        fv.FluxonFsVideoReader.read_frames_numpy = real_read
    assert not failures, failures[0]
    assert not overlap
    assert len(pool.idle_readers()) <= 3
    assert pool.counters().readers_opened > 3  # concurrency opened extra readers
    pool.close()


def test_eviction_never_closes_a_leased_reader(patcher):
    pool = patcher.open_video_reader_pool(max_readers=1)
    started, release = threading.Event(), threading.Event()
    real_read = fv.FluxonFsVideoReader.read_frames_numpy
    held = {}

    def slow_read(reader, indices, out=None):
        if reader.relpath == H264 and not held:
            held["reader"] = reader
            started.set()
            release.wait(10)
        return real_read(reader, indices, out)

    fv.FluxonFsVideoReader.read_frames_numpy = slow_read
    try:
        t = threading.Thread(target=pool.read_frames_numpy, kwargs=args(H264, [0]))
        t.start()
        started.wait(10)
        for relpath in (HEVC, VP9, HEVC):  # each evicts the other idle readers
            pool.read_frames_numpy(**args(relpath, [0]))
        assert not held["reader"].closed
        release.set()
        t.join()
    finally:
        fv.FluxonFsVideoReader.read_frames_numpy = real_read
    assert [k.relpath for k in pool.idle_readers()] == [H264]
    pool.close()


def test_close_semantics(patcher):
    pool = patcher.open_video_reader_pool(max_readers=4)
    pool.read_frames_numpy(**args(H264, [0]))
    readers = []
    real_read = fv.FluxonFsVideoReader.read_frames_numpy
    pool.close()
    pool.close()
    assert pool.closed and pool.idle_readers() == []
    with pytest.raises(errors.FluxonFsClosedError):
        pool.read_frames_numpy(**args(H264, [0]))
    with pytest.raises(errors.FluxonFsClosedError):
        pool.read_many_numpy_with_stats([FluxonFsVideoReadRequest("train", H264, 8, 8, 1, (0,))])
    # A reader leased when the pool closes is closed when it comes back.
    pool = patcher.open_video_reader_pool()

    def closing_read(reader, indices, out=None):
        readers.append(reader)
        pool.close()
        return real_read(reader, indices, out)

    fv.FluxonFsVideoReader.read_frames_numpy = closing_read
    try:
        pool.read_frames_numpy(**args(H264, [0]))
    finally:
        fv.FluxonFsVideoReader.read_frames_numpy = real_read
    assert readers[0].closed


def test_bad_arguments(patcher):
    with pytest.raises(errors.FluxonFsConfigError, match="max_readers"):
        patcher.open_video_reader_pool(max_readers=0)
    with pytest.raises(errors.FluxonFsConfigError, match="max_readers"):
        patcher.open_video_reader_pool(max_readers=2.5)
    with patcher.open_video_reader_pool() as pool:
        with pytest.raises(errors.FluxonFsConfigError, match="height"):
            pool.read_frames_numpy(**{**args(H264, [0]), "height": 0})
        with pytest.raises(errors.FluxonFsFrameIndexError, match="-1000 is out of range"):
            pool.read_frames_numpy(**args(H264, [-1000]))
        with pytest.raises(IndexError, match="out of range"):
            pool.read_frames_numpy(**args(H264, [1000]))
        # An index error does not cost the reader.
        assert pool.read_frames_numpy_with_stats(**args(H264, [1])).reader_reused


# ---- batched reads ----

def test_read_many_one_native_call_per_key(media, patcher):
    requests = [
        FluxonFsVideoReadRequest("train", H264, 32, 32, 1, (0, 8, 16)),
        FluxonFsVideoReadRequest("train", HEVC, 32, 32, 1, (5, 5, 1)),
        FluxonFsVideoReadRequest("train", H264, 32, 32, 1, (16, 24, 8)),  # overlaps request 0
        FluxonFsVideoReadRequest("train", H264, 48, 48, 1, (3,)),  # another size: another key
        FluxonFsVideoReadRequest("train", H264, 32, 32, 1, ()),
    ]
    with patcher.open_video_reader_pool() as pool:
        results = pool.read_many_numpy_with_stats(requests)
        assert pool.counters().native_calls == 3
        one_by_one = [pool.read_frames_numpy(**args(r.relpath, list(r.indices), r.height))
                      for r in requests]
    for request, result, single in zip(requests, results, one_by_one):
        ref = media.reference(REFS[request.relpath], request.height, request.width)
        assert result.frames.dtype == np.uint8
        assert result.frames.shape == (len(request.indices), request.height, request.width, 3)
        np.testing.assert_array_equal(result.frames, ref[list(request.indices)])
        np.testing.assert_array_equal(result.frames, single)
        assert result.frames.base is None or result.frames.flags.owndata or result.frames.base.flags.owndata
    assert results[0].group_size == 3 and results[1].group_size == 1
    # Duplicates across requests were decoded once: 0, 8, 16, 24 -> 4 conversions.
    assert results[0].stats is results[2].stats
    assert results[0].stats.frames_converted == 4 and results[0].stats.frames_returned == 6
    # No union array copied out per request: a group's results are views of one
    # buffer holding exactly their rows (read_many's peak memory is its output).
    group = [results[0], results[2], results[4]]
    base = results[0].frames.base
    assert base is not None and all(r.frames.base is base for r in group)
    assert base.nbytes == sum(r.frames.nbytes for r in group)


def test_read_many_validates_every_request_before_decoding(patcher):
    with patcher.open_video_reader_pool() as pool:
        good = FluxonFsVideoReadRequest("train", H264, 16, 16, 1, (0,))
        with pytest.raises(TypeError, match=r"requests\[1\]"):
            pool.read_many_numpy_with_stats([good, ("train", H264)])
        with pytest.raises(errors.FluxonFsNotFoundError, match=r"requests\[2\]: unknown export"):
            pool.read_many_numpy_with_stats(
                [good, good, FluxonFsVideoReadRequest("nope", H264, 16, 16, 1, (0,))])
        assert pool.counters().native_calls == 0
    # Negative indices count from the end: the request keeps them as given.
    assert FluxonFsVideoReadRequest("train", H264, 16, 16, 1, (0, -2)).indices == (0, -2)
    with pytest.raises(errors.FluxonFsConfigError, match="width"):
        FluxonFsVideoReadRequest("train", H264, 16, 0, 1, (0,))
    with pytest.raises(errors.FluxonFsBadRequestError):
        FluxonFsVideoReadRequest("train", "../x.mp4", 16, 16, 1, (0,))
    with pytest.raises(TypeError, match="frame index at position 0"):
        FluxonFsVideoReadRequest("train", H264, 16, 16, 1, (1.0,))


def test_a_failing_group_names_its_requests_and_releases_the_reader(patcher):
    with patcher.open_video_reader_pool() as pool:
        requests = [FluxonFsVideoReadRequest("train", VP9, 16, 16, 1, (0,)),
                    FluxonFsVideoReadRequest("train", H264, 16, 16, 1, (1,)),
                    FluxonFsVideoReadRequest("train", H264, 16, 16, 1, (999,))]
        with pytest.raises(IndexError, match=r"requests\[1, 2\]: .*frame index 999"):
            pool.read_many_numpy_with_stats(requests)
        assert len(pool.idle_readers()) == 2  # both readers back, none leased
        bad = [FluxonFsVideoReadRequest("train", "bucket/videos/garbage.mp4", 16, 16, 1, (0,))]
        with pytest.raises(errors.FluxonFsDecodeError, match=r"requests\[0\]"):
            pool.read_many_numpy_with_stats(bad)
        assert pool.counters().readers_discarded == 1
        assert len(pool.idle_readers()) == 2


def test_read_many_decodes_groups_concurrently(media, patcher):
    """Three videos, three workers: each native call waits for the other two."""
    barrier = threading.Barrier(3, timeout=20)
    real_read = fv.FluxonFsVideoReader.read_frames_numpy

    def meeting_read(reader, indices, out=None):
        barrier.wait()  # raises BrokenBarrierError if the calls run one after another
        return real_read(reader, indices, out)

    requests = [FluxonFsVideoReadRequest("train", relpath, 32, 32, 1, (2, 9))
                for relpath in (H264, HEVC, VP9)]
    fv.FluxonFsVideoReader.read_frames_numpy = meeting_read
    try:
        with patcher.open_video_reader_pool() as pool:
            results = pool.read_many_numpy_with_stats(requests, max_workers=3)
            assert pool.counters().peak_leased == 3
            assert pool.counters().native_calls == 3
    finally:
        fv.FluxonFsVideoReader.read_frames_numpy = real_read
    for request, result in zip(requests, results):
        np.testing.assert_array_equal(
            result.frames, media.reference(REFS[request.relpath], 32, 32)[[2, 9]])
    with pytest.raises(errors.FluxonFsConfigError, match="max_workers"):
        patcher.open_video_reader_pool().read_many_numpy_with_stats(requests, max_workers=0)


def test_read_many_failure_waits_for_every_group(patcher):
    requests = [FluxonFsVideoReadRequest("train", "bucket/videos/garbage.mp4", 16, 16, 1, (0,)),
                FluxonFsVideoReadRequest("train", H264, 16, 16, 1, (1,)),
                FluxonFsVideoReadRequest("train", HEVC, 16, 16, 1, (999,))]
    with patcher.open_video_reader_pool() as pool:
        with pytest.raises(errors.FluxonFsDecodeError, match=r"requests\[0\]"):
            pool.read_many_numpy_with_stats(requests, max_workers=3)
        state = pool._local()
        assert not state.leased  # every reader went back (or was discarded)
        counters = pool.counters()
        assert counters.readers_opened == 3 and counters.native_calls == 1  # all three ran
        assert counters.readers_discarded == 1 and len(pool.idle_readers()) == 2


# ---- processes ----

def _child_reads(pool, queue, relpath, indices):
    try:
        frames = pool.read_frames_numpy(**args(relpath, indices))
        counters = pool.counters()
        queue.put((os.getpid(), frames, counters.readers_opened))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put((os.getpid(), repr(exc), -1))


def test_fork_children_get_fresh_state_and_the_parent_keeps_working(media, agent, export_root,
                                                                    redis_url):
    ctx = multiprocessing.get_context("fork")
    with make_patcher(agent.url, export_root, redis_url) as patcher:
        pool = patcher.open_video_reader_pool()
        parent_frames = pool.read_frames_numpy(**args(H264, [3, 40]))  # threads, sockets live
        parent_reader = pool.idle_readers()
        queue = ctx.Queue()
        children = [ctx.Process(target=_child_reads, args=(pool, queue, relpath, [3, 40]))
                    for relpath in (H264, HEVC, VP9)]
        for child in children:
            child.start()
        got = [queue.get(timeout=60) for _ in children]
        for child in children:
            child.join(30)
            assert child.exitcode == 0
        for _, frames, opened in got:
            assert not isinstance(frames, str), frames
            assert opened == 1  # the child opened its own reader, none inherited
        by_shape = sorted(got, key=lambda g: g[0])
        assert len({pid for pid, _, _ in by_shape}) == 3
        # The parent's pool and reader are untouched and keep working.
        assert pool.idle_readers() == parent_reader
        again = pool.read_frames_numpy_with_stats(**args(H264, [3, 40]))
        assert again.reader_reused
        np.testing.assert_array_equal(again.frames, parent_frames)
        pool.close()
    refs = {relpath: media.reference(name, 32, 32)[[3, 40]] for relpath, name in REFS.items()}
    assert any(np.array_equal(frames, refs[HEVC]) for _, frames, _ in got)
    assert any(np.array_equal(frames, refs[VP9]) for _, frames, _ in got)


class ClipDataset:
    """Shaped like a torch Dataset: the pool is built lazily in each worker process."""

    def __init__(self, export_root, agent_url, redis_url, clips):
        self.export_root, self.agent_url, self.redis_url = export_root, agent_url, redis_url
        self.clips = clips
        self._pool = None
        self._pid = None

    def _reader_pool(self):
        if self._pool is None or self._pid != os.getpid():
            patcher = make_patcher(self.agent_url, self.export_root, self.redis_url)
            self._pool, self._pid = patcher.open_video_reader_pool(max_readers=4), os.getpid()
        return self._pool

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, i):
        relpath, start = self.clips[i]
        frames = self._reader_pool().read_frames_numpy(**args(relpath, list(range(start, start + 16, 4))))
        return i, os.getpid(), frames


def _load(dataset_and_index):
    dataset, i = dataset_and_index
    return dataset[i]


def test_dataloader_shaped_workers(media, agent, export_root, redis_url):
    rng = np.random.default_rng(0)
    clips = [(list(REFS)[rng.integers(0, 4)], int(rng.integers(0, 50))) for _ in range(24)]
    dataset = ClipDataset(export_root, agent.url, redis_url, clips)
    with multiprocessing.get_context("fork").Pool(2) as workers:
        batches = workers.map(_load, [(dataset, i) for i in range(len(dataset))], chunksize=3)
    assert len({pid for _, pid, _ in batches}) >= 1
    for i, _, frames in batches:
        relpath, start = clips[i]
        ref = media.reference(REFS[relpath], 32, 32)
        np.testing.assert_array_equal(frames, ref[list(range(start, start + 16, 4))])


def test_read_many_splits_a_group_over_two_decoders_when_gops_are_apart(media):
    """Clips of one video in GOPs far apart go to two decoders at once (spare core)."""
    name = "long_640x360.mp4"  # GOP 24, 288 frames
    ref = media.reference(name, 32, 32)
    with make_patcher(None, media.root) as local, local.open_video_reader_pool() as pool:
        pool.read_frames_numpy(export_name="train", relpath=name, height=32, width=32,
                               num_threads=1, indices=[0])  # an idle reader knows the keyframes
        calls = pool.counters().native_calls
        far = [FluxonFsVideoReadRequest("train", name, 32, 32, 1, tuple(range(s, s + 10)))
               for s in (30, 200, 35, 250)]
        results = pool.read_many_numpy_with_stats(far)
        for request, result in zip(far, results):
            np.testing.assert_array_equal(result.frames, ref[list(request.indices)])
        expected = 2 if (os.cpu_count() or 1) >= 2 else 1
        assert pool.counters().native_calls - calls == expected
        # Clips of one GOP would share decoding, and a lopsided split buys
        # little (fluxon_video/planning.py): one decoder for each group.
        for indices in [(30, 34), (36, 40)], [tuple(range(26, 46)), (50,)]:
            calls = pool.counters().native_calls
            same = [FluxonFsVideoReadRequest("train", name, 32, 32, 1, i) for i in indices]
            for request, result in zip(same, pool.read_many_numpy_with_stats(same)):
                np.testing.assert_array_equal(result.frames, ref[list(request.indices)])
            assert pool.counters().native_calls - calls == 1, indices
