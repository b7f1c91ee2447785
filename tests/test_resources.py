"""The GIL is released during decode; repeated use leaks no memory, fds or threads."""

from __future__ import annotations

import gc
import os
import threading
import time

import pytest

from fluxon_video.sources import LocalFileRangeSource

avio = pytest.importorskip("fluxon_video._avio")
decode = pytest.importorskip("fluxon_video._decode")
psutil = pytest.importorskip("psutil")


def test_other_python_threads_run_during_a_long_decode(media):
    path = media.path("long_640x360.mp4")
    ticks: list[float] = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    with LocalFileRangeSource(path) as src, avio.ByteSource(src, src.size) as bs:
        t = threading.Thread(target=ticker)
        t.start()
        try:
            time.sleep(0.05)
            start = time.perf_counter()
            decode.decode_frames(bs, [287], 360, 640, 1)
            end = time.perf_counter()
        finally:
            stop.set()
            t.join()
    during = [x for x in ticks if start <= x <= end]
    gaps = [b - a for a, b in zip([start, *during], [*during, end])]
    # Held GIL: one gap as long as the decode. Released: the ticker keeps ticking.
    assert end - start > 0.05
    assert max(gaps) < 0.5 * (end - start), (max(gaps), end - start, len(during))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_open_decode_close_cycles_keep_rss_fds_and_threads_flat(media):
    path = media.path("hevc.mp4")
    proc = psutil.Process()

    def cycle():
        with LocalFileRangeSource(path) as src, avio.ByteSource(src, src.size) as bs:
            decode.decode_frames(bs, [0, 40], 72, 128, 2)

    for _ in range(20):  # warm up allocator pools and lazy inits
        cycle()
    gc.collect()
    rss0, fds0, threads0 = proc.memory_info().rss, _fds(), set(threading.enumerate())
    for _ in range(200):
        cycle()
    gc.collect()
    rss1, fds1, threads1 = proc.memory_info().rss, _fds(), set(threading.enumerate())
    assert fds1 == fds0
    # No thread the cycles started is still alive (a thread an earlier test left may end
    # meanwhile: counting them, a count can drop without any leak here).
    assert not threads1 - threads0, threads1 - threads0
    assert rss1 - rss0 < 16 << 20, f"RSS grew by {(rss1 - rss0) >> 20} MiB over 200 cycles"


def test_failed_decodes_leak_nothing(media):
    data = media.path("h264_moov_end.mp4").read_bytes()
    cut = data[: len(data) // 2]
    from fluxon_video.errors import FluxonFsError
    from fluxon_video.sources import BytesRangeSource

    proc = psutil.Process()

    def cycle():
        src = BytesRangeSource(cut)
        with avio.ByteSource(src, src.size) as bs:
            with pytest.raises(FluxonFsError):
                decode.decode_frames(bs, [0], 32, 32, 1)

    for _ in range(20):
        cycle()
    gc.collect()
    rss0, fds0 = proc.memory_info().rss, _fds()
    for _ in range(200):
        cycle()
    gc.collect()
    assert _fds() == fds0
    assert proc.memory_info().rss - rss0 < 16 << 20
