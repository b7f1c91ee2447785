"""A trainer's read counters scraped over HTTP (fluxon_video.metrics), from one
process and from a DataLoader's workers across epochs."""

from __future__ import annotations

import urllib.request
from dataclasses import fields

import pytest
from prometheus_client.parser import text_string_to_metric_families
from torch.utils.data import DataLoader

from fluxon_video.metrics import serve_metrics
from fluxon_video.stats import FluxonFsProcessStats
from fluxon_video.torch import LoaderStats, StatsCollate, VideoClipDataset
from tests.helpers import make_patcher

H, W = 36, 64
NAME = "long_640x360.mp4"


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name.endswith("_total")}


def expected(stats: FluxonFsProcessStats) -> dict[str, float]:
    return {(f"fluxon_video_{f.name[:-3]}_seconds_total" if f.name.endswith("_ms")
             else f"fluxon_video_{f.name}_total"):
            getattr(stats, f.name) / (1e3 if f.name.endswith("_ms") else 1)
            for f in fields(FluxonFsProcessStats)}


def test_one_process_counters_are_its_patchers(media):
    media.path(NAME)  # made on first use
    with make_patcher(None, media.root, piece_size=16 << 10) as patcher, \
            serve_metrics(patcher.stats) as server:
        assert scrape(server.url)["fluxon_video_reads_total"] == 0
        with patcher.open_video_reader("train", NAME, H, W) as reader:
            reader.read_frames_numpy(list(range(30, 46, 4)))
        got, want = scrape(server.url), expected(patcher.stats())
        assert got == pytest.approx(want)
        assert got["fluxon_video_reads_total"] == 1
        assert got["fluxon_video_frames_returned_total"] == 4
        assert got["fluxon_video_remote_bytes_total"] > 0
        assert got["fluxon_video_ahead_pages_total"] > 0  # the read's own plan, fetched ahead
    server.close()  # a second close is fine
    with pytest.raises(OSError):
        scrape(server.url)


def test_a_dataloaders_workers_add_up_across_epochs(media):
    """Workers exit at each epoch's end (not persistent): the scraped counters
    still only grow, the exited workers' figures kept."""
    videos = ["h264_faststart.mp4", "vp9.webm"]
    for name in videos:
        media.path(name)
    patcher = make_patcher(None, media.root)
    dataset = VideoClipDataset(patcher, "train", videos, clip_len=4, stride=3,
                               clips_per_video=5, height=H, width=W, seed=7)
    loader = DataLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context="fork",
                        collate_fn=StatsCollate(dataset))
    stats = LoaderStats()
    with serve_metrics(stats.cumulative) as server:
        frames = []
        for _ in range(2):
            stats.start_epoch()
            for batch in loader:
                stats.update(batch)
            frames.append(scrape(server.url)["fluxon_video_frames_returned_total"])
            assert stats.total().frames_returned == 40  # this epoch's
        assert frames == [40, 80]
        assert scrape(server.url) == pytest.approx(expected(stats.cumulative()))
    patcher.close()


def test_a_worker_that_takes_an_old_workers_pid_adds_to_it():
    stats = LoaderStats()

    def batch(reads: int, bad: int) -> dict:
        return {"fluxon_stats": {"pid": 7, "stats": {"reads": reads, "frames_returned": reads},
                                 "bad_items": bad}}

    stats.update(batch(5, 3))
    stats.start_epoch()
    stats.update(batch(2, 1))  # a new process: fewer reads than the last figure of that pid
    assert stats.cumulative().reads == 7 and stats.total().reads == 2
    assert stats.bad_items() == 1  # the new worker's, not 1 less the old one's 3
