"""fluxon_video.torch in real DataLoader worker processes (CPU torch), and pickling."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.fs.kv import EmbeddedPieceStore
from tests.helpers import make_patcher

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from fluxon_video.torch import (  # noqa: E402
    LoaderStats,
    SameVideoBatchSampler,
    StatsCollate,
    VideoClipDataset,
)

VIDEOS = ["h264_faststart.mp4", "hevc.mp4", "vp9.webm", "av1.mkv", "h264_bframes.mkv"]
H, W = 32, 48


@pytest.fixture(scope="module")
def local(media):
    """Export "train" over the media library, served in-process."""
    for name in VIDEOS + ["h264_vfr.mkv"]:
        media.path(name)
    with make_patcher(None, media.root) as patcher:
        yield patcher


def check_items(media, items):
    for item in items:
        ref = media.reference(item["relpath"], H, W)
        indices = item["indices"].tolist()
        np.testing.assert_array_equal(item["frames"].numpy(), ref[indices],
                                      err_msg=f"{item['relpath']} {indices}")


def unbatch(batch):
    """The per-clip dicts of a collated batch."""
    return [{"frames": batch["frames"][k], "relpath": batch["relpath"][k],
             "indices": batch["indices"][k], "timestamps_s": batch["timestamps_s"][k]}
            for k in range(len(batch["relpath"]))]


# ---- pickling ----

def test_configuration_objects_pickle(local, export_root):
    patcher = pickle.loads(pickle.dumps(local))
    assert patcher.config == local.config and patcher.identity == local.identity
    assert pickle.loads(pickle.dumps(local.config)) == local.config
    request = fv.FluxonFsVideoReadRequest("train", "hevc.mp4", None, 32, 1, (0, -1))
    assert pickle.loads(pickle.dumps(request)) == request
    metadata = local.video_metadata("train", "hevc.mp4")
    assert pickle.loads(pickle.dumps(metadata)) == metadata
    with local.open_video_reader_pool(max_readers=3) as pool:
        pool.read_frames_numpy(export_name="train", relpath="hevc.mp4", height=H, width=W,
                               num_threads=1, indices=[1])
        copy = pickle.loads(pickle.dumps(pool))
        assert copy.max_readers == 3 and copy.idle_readers() == []  # no reader crosses over
        frames = copy.read_frames_numpy(export_name="train", relpath="hevc.mp4", height=H,
                                        width=W, num_threads=1, indices=[1])
        assert frames.shape == (1, H, W, 3)
        copy.close()
        with local.open_video_reader("train", "hevc.mp4", H, W) as reader:
            with pytest.raises(TypeError, match="does not pickle"):
                pickle.dumps(reader)
    dataset = VideoClipDataset(local, "train", VIDEOS, clip_len=3, height=H, width=W)
    dataset[0]  # builds a pool here...
    clone = pickle.loads(pickle.dumps(dataset))  # ...that does not travel
    assert clone._local is None and clone.clip(3) == dataset.clip(3)
    with pytest.raises(TypeError, match="kv_store"):
        pickle.dumps(fv.FluxonFsPatcher(local.config, kv_store=EmbeddedPieceStore(1 << 20)))


# ---- the dataset in real worker processes ----

@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_dataloader_workers_return_exact_frames(media, local, context):
    dataset = VideoClipDataset(local, "train", VIDEOS, clip_len=4, stride=3, clips_per_video=2,
                               height=H, width=W, seed=7)
    loader = DataLoader(dataset, batch_size=4, shuffle=False, num_workers=2,
                        multiprocessing_context=context, collate_fn=StatsCollate(dataset))
    stats = LoaderStats()
    seen = []
    for batch in loader:
        assert batch["frames"].dtype == torch.uint8 and batch["frames"].shape[1:] == (4, H, W, 3)
        stats.update(batch)
        seen.extend(unbatch(batch))
    assert len(seen) == len(dataset) == 10
    check_items(media, seen)
    # The same seed and epoch give the same clips wherever they are read.
    assert [(i["relpath"], i["indices"].tolist()) for i in seen] == \
           [(r, idx) for r, idx in (dataset.clip(k) for k in range(len(dataset)))]
    total = stats.total()
    assert total.reads >= 3 and total.frames_returned == 40  # two workers, added up
    assert len(stats._latest) == 2


def test_agent_and_redis_behind_spawned_workers(media, agent, export_root, redis_url):
    relpaths = [f"bucket/videos/{n}" for n in ("h264_faststart.mp4", "hevc.mp4", "vp9.webm")]
    with make_patcher(agent.url, export_root, redis_url) as patcher:
        dataset = VideoClipDataset(patcher, "train", relpaths, clip_len=5, stride=2,
                                   height=H, width=W, layout="TCHW")
        loader = DataLoader(dataset, batch_size=3, num_workers=2, multiprocessing_context="spawn")
        for batch in loader:
            assert batch["frames"].shape == (3, 5, 3, H, W)
            for k, relpath in enumerate(batch["relpath"]):
                ref = media.reference(relpath.rsplit("/", 1)[1], H, W)
                frames = batch["frames"][k].permute(0, 2, 3, 1).numpy()
                np.testing.assert_array_equal(frames, ref[batch["indices"][k].tolist()])


def test_seed_and_epoch_decide_the_clips(local):
    def clips(seed, epoch):
        dataset = VideoClipDataset(local, "train", VIDEOS, clip_len=4, stride=2, seed=seed)
        dataset.set_epoch(epoch)
        return [dataset.clip(i) for i in range(len(dataset))]

    assert clips(1, 0) == clips(1, 0)
    assert clips(1, 0) != clips(1, 1) and clips(1, 0) != clips(2, 0)
    for relpath, indices in clips(3, 5):
        assert np.all(np.diff(indices) == 2) and len(indices) == 4


def test_arguments_a_dataset_cannot_serve_are_refused_when_it_is_made(local):
    """One path as a string (read as its characters before), times that are not
    finite, and clips whose frames could never fit in memory: a clear error at
    construction, not a list of 1-letter relpaths, an OverflowError or the OOM killer."""
    with pytest.raises(TypeError, match=r"got the string 'hevc.mp4': pass \['hevc.mp4'\]"):
        VideoClipDataset(local, "train", "hevc.mp4")
    for duration, fps in [(float("nan"), 8.0), (1.0, float("inf")), (0.0, 8.0)]:
        with pytest.raises(ValueError, match="must be finite positive numbers"):
            VideoClipDataset(local, "train", VIDEOS, clip_duration_s=duration, fps=fps)
    for kwargs in ({"clip_len": 10**12}, {"clip_duration_s": 1.0, "fps": 1e12}):
        with pytest.raises(errors.FluxonFsConfigError, match="train: a clip of 10{12} frames "
                                                               "would take"):
            VideoClipDataset(local, "train", VIDEOS, height=H, width=W, **kwargs)


def test_time_based_clips_on_a_variable_frame_rate_file(media, local):
    import av

    name = "h264_vfr.mkv"
    with av.open(str(media.path(name))) as container:
        times = np.array([float(f.pts * f.time_base) for f in container.decode(video=0)])
    dataset = VideoClipDataset(local, "train", [name], clip_duration_s=1.0, fps=10,
                               clips_per_video=6, height=H, width=W, seed=3)
    for i in range(len(dataset)):
        relpath, indices, when = dataset.clip_with_times(i)
        assert len(indices) == 10 and np.allclose(np.diff(when), 0.1)
        expected = [int(np.flatnonzero(times <= t)[-1]) for t in when]  # displayed at t
        assert indices == expected
    items = dataset.__getitems__(list(range(len(dataset))))
    check_items(media, items)
    for item in items:
        np.testing.assert_allclose(item["timestamps_s"].numpy(), times[item["indices"].numpy()])
    # Average-fps arithmetic would have picked other frames on this file.
    fps = len(times) / (times[-1] - times[0])
    _, indices, when = dataset.clip_with_times(0)
    assert [int(round((t - times[0]) * fps)) for t in when] != indices


def test_same_video_batches_are_one_native_call_per_video(media, local):
    dataset = VideoClipDataset(local, "train", VIDEOS, clip_len=4, stride=4, clips_per_video=4,
                               height=H, width=W)
    sampler = SameVideoBatchSampler(dataset, batch_size=8, seed=1)
    batches = list(sampler)
    assert sum(len(b) for b in batches) == len(dataset) and len(batches) == len(sampler) == 3
    for batch in batches:  # 4 clips of one video, then 4 of another
        videos = [i // 4 for i in batch]
        assert videos[:4] == [videos[0]] * 4 and videos[4:] == videos[4:5] * len(videos[4:])
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=0)
    pool = dataset.pool
    dataset.clip(0)  # metadata first, so only the batch's reads are counted below
    calls, reads = pool.counters().native_calls, pool.stats().reads
    for batch in loader:
        check_items(media, unbatch(batch))
    # One native decode per video per batch: 5 videos over 3 batches.
    assert pool.counters().native_calls - calls == 5
    assert pool.stats().reads - reads == 5
    with pytest.raises(ValueError, match="multiple"):
        SameVideoBatchSampler(dataset, batch_size=6)


def test_import_without_torch_names_the_extra():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import fluxon_video\n"
            "assert 'torch' not in [m.split('.')[0] for m in sys.modules if sys.modules[m]]\n"
            "try:\n"
            "    import fluxon_video.torch\n"
            "except ImportError as exc:\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "fluxon-video[torch]" in out.stdout


def test_import_fluxon_video_does_not_import_torch():
    code = "import sys, fluxon_video; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_each_video_index_is_loaded_once_per_process(local):
    dataset = VideoClipDataset(local, "train", VIDEOS, clip_len=4, clips_per_video=3)
    before = dataset.pool.stats().metadata_calls
    for i in range(len(dataset)):
        dataset.clip(i)
    assert dataset.pool.stats().metadata_calls - before == len(VIDEOS)


def test_mixed_aspect_ratios_batch_one_video_at_a_time(media, local):
    """One side given: each video keeps its aspect ratio; batches of one video's
    clips stack under the default collation (docs/api.md)."""
    media.path("odd_321x241.mp4")
    names = ["h264_faststart.mp4", "odd_321x241.mp4"]  # 16:9 and about 4:3
    dataset = VideoClipDataset(local, "train", names, clip_len=4, clips_per_video=2,
                               height=None, width=64)
    loader = DataLoader(dataset, batch_sampler=SameVideoBatchSampler(dataset, 2))
    heights = {}
    for batch in loader:
        relpath = batch["relpath"][0]
        assert set(batch["relpath"]) == {relpath}
        heights[relpath] = batch["frames"].shape[2]
        assert batch["frames"].shape[0] == 2 and batch["frames"].shape[3] == 64
    assert heights == {"h264_faststart.mp4": 36, "odd_321x241.mp4": 48}
