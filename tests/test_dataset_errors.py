"""VideoClipDataset on a bad day: bad items skipped or handed to a callable
(``on_error``), an unknown export refused at construction, batches sharded
across ranks like DistributedSampler, and batches a generic ``.to(device)``
loop can move.

The bad objects are real: a non-video file uploaded under a .mp4 name and a
key listed in the dataset that the bucket lacks, in an S3 export on the moto
server, and an audio-visual request on a file without audio; read by a real
DataLoader with 2 worker processes. Good items' frames equal the ffmpeg CLI's.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.testing import free_port
from tests.helpers import check_rank_shards, make_patcher

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, DistributedSampler, get_worker_info

from fluxon_video.torch import (
    FluxonFsNoReadableItemError,
    HostList,
    LoaderStats,
    SameVideoBatchSampler,
    StatsCollate,
    VideoClipDataset,
    collate_clips,
    move_to,
)

H, W = 32, 48
BUCKET = "dataset-errors"
GOOD = ["h264_faststart.mp4", "hevc.mp4", "vp9.webm", "h264_fragmented.mp4"]
WITH_AUDIO = {"h264_faststart.mp4", "h264_fragmented.mp4"}
JUNK, MISSING = "clips/junk.mp4", "clips/missing.mp4"  # not a video; not in the bucket


@pytest.fixture(scope="module")
def s3_export(s3_server, media):
    """The good clips and a non-video file under train/clips/ of a bucket."""
    objects = {f"train/clips/{name}": media.path(name) for name in GOOD}
    objects[f"train/{JUNK}"] = np.random.default_rng(0).bytes(50_000)
    s3_server.upload(BUCKET, objects)
    return s3_server


@pytest.fixture(scope="module")
def patcher(s3_export):
    """Export "train" rooted at s3://dataset-errors/train, served in-process."""
    with make_patcher(None, f"s3://{BUCKET}/train", store=s3_export.store_options(),
                      store_timeout_s=5.0, store_retries=1) as patcher:
        yield patcher


def name_of(relpath: str) -> str:
    return relpath.rsplit("/", 1)[1]


def check_frames(media, relpath, indices, frames):
    ref = media.reference(name_of(relpath), H, W)
    np.testing.assert_array_equal(np.asarray(frames), ref[list(indices)],
                                  err_msg=f"{relpath} {list(indices)}")


def unbatch(batch):
    return [(batch["relpath"][k], batch["indices"][k].tolist(), batch["frames"][k])
            for k in range(len(batch["relpath"]))]


def record_worker(directory: str, worker_id: int) -> None:
    """worker_init_fn: the worker's log lines, and every file its pool is asked
    for (index loads and reads), into files of ``directory`` named by its pid."""
    pid = os.getpid()
    handler = logging.FileHandler(Path(directory) / f"log-{pid}")
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logging.getLogger("fluxon_video.torch").addHandler(handler)
    pool = get_worker_info().dataset.pool
    load, read_many = pool.video_metadata_and_timestamps_s, pool.read_many_numpy_with_stats

    def note(relpaths):
        with open(Path(directory) / f"asked-{pid}", "a") as f:
            f.writelines(f"{relpath}\n" for relpath in relpaths)

    def loading(export_name, relpath, *args, **kwargs):
        note([relpath])
        return load(export_name, relpath, *args, **kwargs)

    def reading(requests, *args, **kwargs):
        note(sorted({r.relpath for r in requests}))
        return read_many(requests, *args, **kwargs)

    pool.video_metadata_and_timestamps_s = loading
    pool.read_many_numpy_with_stats = reading


def worker_records(directory: Path) -> dict[str, tuple[list[str], list[str]]]:
    """pid -> (the files its pool was asked for, in order; its log lines)."""
    out = {}
    for asked in directory.glob("asked-*"):
        pid = asked.name.split("-")[1]
        log = directory / f"log-{pid}"
        out[pid] = (asked.read_text().split(), log.read_text().splitlines() if log.exists() else [])
    return out


# ---- on_error="skip" ----

def test_skip_replaces_bad_objects_of_an_s3_export_in_workers(media, patcher, tmp_path):
    """A non-video object and a missing key: replaced by the same items in both
    workers as in this process, each logged once per worker and never asked of
    the store again there, counted in the batches' stats; every frame the CLI's."""
    relpaths = ["clips/h264_faststart.mp4", JUNK, "clips/hevc.mp4", MISSING, "clips/vp9.webm"]
    dataset = VideoClipDataset(patcher, "train", relpaths, clip_len=3, stride=2,
                               clips_per_video=2, height=H, width=W, seed=5, on_error="skip")
    bad = [2, 3, 6, 7]
    # Worker 0 gets batches 0, 2, 4 (the junk object in 0 and 2), worker 1 batches
    # 1 and 3 (the missing key in both): each meets its bad file twice per pass.
    order = [2, 0, 4, 6, 3, 8, 7, 1, 5, 9]
    loader = DataLoader(dataset, batch_size=2, sampler=order, num_workers=2,
                        multiprocessing_context="spawn", persistent_workers=True,
                        collate_fn=StatsCollate(dataset),
                        worker_init_fn=functools.partial(record_worker, str(tmp_path)))
    expected = pickle.loads(pickle.dumps(dataset)).__getitems__(order)  # read in this process
    stats = LoaderStats()
    for _ in range(2):  # the same workers twice
        stats.start_epoch()
        seen = []
        for batch in loader:
            stats.update(batch)
            seen.extend(unbatch(batch))
        assert [(r, i) for r, i, _ in seen] == [(e["relpath"], e["indices"].tolist())
                                              for e in expected]
        for position, (relpath, indices, frames) in enumerate(seen):
            if order[position] in bad:  # another item of a good video
                assert relpath not in (JUNK, MISSING)
                assert (relpath, indices) in [dataset.clip(i) for i in range(10) if i not in bad]
            else:
                assert (relpath, indices) == dataset.clip(order[position])
            check_frames(media, relpath, indices, frames)
        assert stats.bad_items() == len(bad)
    assert stats.bad_files() == {JUNK, MISSING}
    records = worker_records(tmp_path)
    assert len(records) == 2
    for asked, lines in records.values():
        tried = {relpath for relpath in asked if relpath in (JUNK, MISSING)}
        assert tried and all(asked.count(relpath) == 1 for relpath in tried), asked
        assert len(lines) == len(tried), lines  # one line per bad file
        for relpath in tried:
            assert [line for line in lines if f"train:{relpath}," in line], lines
        assert all(line.startswith("WARNING bad file") for line in lines)


def test_audio_visual_items_of_a_file_without_audio_are_replaced(media, patcher):
    """A-V clips of a file without audio (and of a non-video object): replaced
    by clips of one video with audio, so SameVideoBatchSampler batches stay one
    video; frames the CLI's, audio that of a direct read of the span."""
    relpaths = ["clips/h264_faststart.mp4", "clips/hevc.mp4", "clips/h264_fragmented.mp4", JUNK]
    spec = fv.AudioSpec(16000, 1)
    dataset = VideoClipDataset(patcher, "train", relpaths, clip_duration_s=0.5, fps=8,
                               clips_per_video=2, height=H, width=W, seed=1, audio=spec,
                               on_error="skip")
    sampler = SameVideoBatchSampler(dataset, batch_size=2, seed=2)
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=2,
                        multiprocessing_context="forkserver", collate_fn=StatsCollate(dataset))
    stats = LoaderStats()
    batches = list(loader)
    assert len(batches) == 4
    with patcher.open_video_reader_pool(2) as pool:
        for batch in batches:
            stats.update(batch)
            assert len(set(batch["relpath"])) == 1  # one video per batch, replacements too
            for k, (relpath, indices, frames) in enumerate(unbatch(batch)):
                assert name_of(relpath) in WITH_AUDIO
                check_frames(media, relpath, indices, frames)
                start = float(batch["audio_start_s"][k])
                direct = pool.read_frames_numpy_with_stats(
                    export_name="train", relpath=relpath, height=H, width=W, num_threads=1,
                    indices=indices, audio=spec,
                    audio_span_s=(start, start + 0.5))
                count = batch["audio"].shape[-1]
                got = batch["audio"][k].numpy()
                n = min(count, direct.audio.num_samples)
                np.testing.assert_array_equal(got[:, :n], direct.audio.data[:, :n])
                assert not got[:, n:].any()
    assert stats.bad_items() == 4 and stats.bad_files() == {"clips/hevc.mp4", JUNK}


def test_a_dataset_of_bad_files_raises_once_nothing_is_left(patcher):
    dataset = VideoClipDataset(patcher, "train", [JUNK, MISSING], clip_len=2, on_error="skip")
    with pytest.raises(FluxonFsNoReadableItemError, match="every other video is bad") as info:
        dataset[0]
    assert isinstance(info.value.__cause__, (errors.FluxonFsNotFoundError,
                                             errors.FluxonFsDecodeError))
    assert set(dataset.bad_files) == {JUNK, MISSING} and dataset.bad_items == 1


# ---- on_error=callable ----

def stand_in(index, exc):
    """An on_error callable: a black clip naming the item and the error."""
    return {"frames": torch.zeros((2, H, W, 3), dtype=torch.uint8),
            "relpath": f"{type(exc).__name__}:{index}",
            "indices": torch.full((2,), -1, dtype=torch.int64),
            "timestamps_s": torch.full((2,), float("nan"), dtype=torch.float64)}


def refuse(index, exc):
    raise RuntimeError(f"the run stops at item {index}: {exc}")


def test_a_callable_policy_gives_the_item_or_raises(media, patcher):
    relpaths = [JUNK, "clips/vp9.webm", MISSING]
    dataset = VideoClipDataset(patcher, "train", relpaths, clip_len=2, height=H, width=W,
                               on_error=stand_in)
    loader = DataLoader(dataset, batch_size=3, num_workers=2, multiprocessing_context="forkserver",
                        collate_fn=collate_clips)
    (batch,) = list(loader)
    assert batch["relpath"] == ["FluxonFsDecodeError:0", "clips/vp9.webm",
                                "FluxonFsNotFoundError:2"]
    assert not batch["frames"][0].any() and batch["indices"][2].tolist() == [-1, -1]
    check_frames(media, "clips/vp9.webm", batch["indices"][1].tolist(), batch["frames"][1])
    # Known bad in this process: the callable again, the store not asked again.
    asked = []
    load = dataset.pool.video_metadata_and_timestamps_s
    dataset.pool.video_metadata_and_timestamps_s = lambda e, r, *a: asked.append(r) or load(e, r, *a)
    for _ in range(2):
        assert [item["relpath"] for item in dataset.__getitems__([0, 2])] == [
            "FluxonFsDecodeError:0", "FluxonFsNotFoundError:2"]
    assert asked == [JUNK, MISSING] and dataset.bad_items == 4
    dataset.on_error = refuse
    with pytest.raises(RuntimeError, match="the run stops at item 0: train:clips/junk.mp4"):
        dataset[0]
    dataset.on_error = lambda index, exc: None
    with pytest.raises(TypeError, match="on_error returned NoneType for item 2"):
        dataset[2]
    with pytest.raises(errors.FluxonFsConfigError, match="on_error must be one of"):
        VideoClipDataset(patcher, "train", relpaths, on_error="ignore")


# ---- what is never skipped ----

def test_errors_that_are_not_about_the_file_are_raised(patcher, s3_export):
    """Refused access, a store that does not answer, and an index out of range
    end the read under on_error="skip" too: they are not the file's."""
    with make_patcher(None, f"s3://{BUCKET}/train", store=s3_export.store_options(),
                      identity="bob") as bob:  # export "train" allows alice only
        dataset = VideoClipDataset(bob, "train", ["clips/vp9.webm"], on_error="skip")
        with pytest.raises(errors.FluxonFsPermissionError):
            dataset[0]
        assert dataset.bad_files == {} and dataset.bad_items == 0
    dead = {**s3_export.store_options(), "endpoint": f"http://127.0.0.1:{free_port()}"}
    with make_patcher(None, f"s3://{BUCKET}/train", store=dead, store_timeout_s=1.0,
                      store_retries=0) as nowhere:
        dataset = VideoClipDataset(nowhere, "train", ["clips/vp9.webm", "clips/hevc.mp4"],
                                   on_error="skip")
        with pytest.raises(errors.FluxonFsIOError) as info:
            dataset.__getitems__([0, 1])
        assert not isinstance(info.value, errors.FluxonFsNotFoundError)
        assert dataset.bad_files == {} and dataset.bad_items == 0
    dataset = VideoClipDataset(patcher, "train", ["clips/vp9.webm"], on_error="skip")
    with pytest.raises(IndexError):
        dataset[1]


# ---- construction ----

def test_an_unknown_export_is_refused_at_construction(patcher):
    for source in (patcher, patcher.open_video_reader_pool(2)):
        with pytest.raises(errors.FluxonFsNotFoundError,
                           match=r"unknown export 'tran' \(configured: shared, train\)"):
            VideoClipDataset(source, "tran", ["clips/vp9.webm"])


# ---- SameVideoBatchSampler across ranks ----

@pytest.fixture(scope="module")
def seven_videos(tmp_path_factory):
    """A dataset of 7 videos (never read: the sampler needs only their number)."""
    root = tmp_path_factory.mktemp("sampler")
    with make_patcher(None, root) as patcher:
        yield VideoClipDataset(patcher, "train", [f"v{k}.mp4" for k in range(7)],
                               clips_per_video=2)


@pytest.mark.parametrize("drop_last", [False, True])
def test_the_sampler_shards_videos_like_distributed_sampler(seven_videos, drop_last):
    dataset = seven_videos
    for shuffle in (False, True):
        shards = []
        for rank in range(3):
            sampler = SameVideoBatchSampler(dataset, batch_size=4, shuffle=shuffle, seed=9,
                                            drop_last=drop_last, num_replicas=3, rank=rank)
            sampler.set_epoch(4)
            batches = list(sampler)
            assert len(batches) == len(sampler)
            items = [i for batch in batches for i in batch]
            videos = [i // 2 for i in items[::2]]
            assert items == [v * 2 + k for v in videos for k in range(2)]  # clips kept together
            assert videos == sampler.videos().tolist()
            shards.append(videos)
            if not shuffle:  # the same videos as torch's own sampler
                assert videos == list(DistributedSampler(range(7), num_replicas=3, rank=rank,
                                                         shuffle=False, drop_last=drop_last))
        check_rank_shards(shards, drop_last, 6 if drop_last else 9, 7)
    with pytest.raises(errors.FluxonFsConfigError, match="rank must be"):
        SameVideoBatchSampler(dataset, 2, num_replicas=2, rank=2)
    with pytest.raises(errors.FluxonFsConfigError, match="both num_replicas and rank"):
        SameVideoBatchSampler(dataset, 2, num_replicas=2)


def test_the_sampler_warns_once_when_set_epoch_is_never_called(seven_videos):
    sampler = SameVideoBatchSampler(seven_videos, batch_size=2, seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # One epoch of a DataLoader with workers (which makes two iterators) is one.
        items = list(range(len(seven_videos)))  # stands for the dataset: nothing is read
        loader = DataLoader(items, batch_sampler=sampler, num_workers=2,
                            multiprocessing_context="forkserver")
        assert sorted(i for batch in loader for i in batch.tolist()) == items
        assert caught == []
        sampler.set_epoch(0)
        first = list(sampler)
        assert list(sampler) == first and len(caught) == 1
        assert "without set_epoch()" in str(caught[0].message)
        list(sampler)
        sampler.set_epoch(1)
        assert list(sampler) != first
        steady = SameVideoBatchSampler(seven_videos, batch_size=2, shuffle=False)
        list(steady), list(steady)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            list(sampler)
    assert len(caught) == 1


def shard_of_rank(rank, dataset, store, out):
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                         world_size=2)
    try:
        sampler = SameVideoBatchSampler(dataset, batch_size=2, seed=3)
        sampler.set_epoch(1)
        Path(out, f"rank{rank}").write_text(
            f"{sampler.num_replicas} {sampler.rank} " + " ".join(map(str, sampler.videos())))
    finally:
        torch.distributed.destroy_process_group()


def test_the_sampler_takes_world_size_and_rank_from_torch_distributed(seven_videos, tmp_path):
    # Gloo's loopback mesh now and then fails to connect on a loaded machine
    # ("connectFullMesh failed ... Connection closed by peer", a known flake of
    # gloo itself): that start, and only that, is tried again with a new store.
    for attempt in range(3):
        try:
            torch.multiprocessing.spawn(
                shard_of_rank, args=(seven_videos, str(tmp_path / f"store{attempt}"),
                                     str(tmp_path)), nprocs=2)
            break
        except torch.multiprocessing.ProcessRaisedException as exc:
            if "connectFullMesh" not in str(exc) or attempt == 2:
                raise
    shards = {}
    for rank in range(2):
        replicas, got, *videos = map(int, (tmp_path / f"rank{rank}").read_text().split())
        assert (replicas, got) == (2, rank)
        shards[rank] = videos
        expected = SameVideoBatchSampler(seven_videos, 2, seed=3, num_replicas=2, rank=rank)
        expected.set_epoch(1)
        assert videos == expected.videos().tolist()
    assert len(shards[0]) == len(shards[1]) == 4
    assert set(shards[0] + shards[1]) == set(range(7))


# ---- batches and devices ----

def test_a_generic_to_device_loop_moves_the_tensors_and_keeps_the_rest(media, patcher):
    relpaths = ["clips/h264_faststart.mp4", "clips/vp9.webm"]
    dataset = VideoClipDataset(patcher, "train", relpaths, clip_len=2, clips_per_video=2,
                               height=H, width=W)
    loader = DataLoader(dataset, batch_size=2, num_workers=2, multiprocessing_context="forkserver",
                        collate_fn=StatsCollate(dataset))
    stats = LoaderStats()
    for batch in loader:
        moved = {k: v.to("meta") for k, v in batch.items()}  # the loop that used to fail
        assert moved["frames"].device.type == "meta" and moved["indices"].is_meta
        assert isinstance(moved["relpath"], HostList) and moved["relpath"] == batch["relpath"]
        stats.update(moved)  # the stats survive the loop
        for relpath, indices, frames in unbatch(batch):
            check_frames(media, relpath, indices, frames)
        nested = move_to({"clip": batch, "pair": (batch["frames"], "x")}, "meta")
        assert nested["clip"]["timestamps_s"].is_meta and nested["pair"][1] == "x"
        assert nested["clip"]["relpath"] == batch["relpath"]
    assert stats.total().frames_returned == 8 and stats.bad_items() == 0
