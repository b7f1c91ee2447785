"""Resize modes and interpolations: each is one ffmpeg CLI command, bit for bit.

For an output of W x H, with FLAGS the interpolation's name in the CLI
(bilinear, bicubic, area, neighbor for "nearest", lanczos):

    stretch            scale=W:H:flags=FLAGS,format=rgb24
    shorter_side_crop  scale=W:H:force_original_aspect_ratio=increase:flags=FLAGS,crop=W:H,format=rgb24
    letterbox          scale=W:H:force_original_aspect_ratio=decrease:flags=FLAGS,pad=W:H:(ow-iw)/2:(oh-ih)/2:black,format=rgb24

run as ``ffmpeg -threads T -i IN -map 0:v:0 -vf <chain> -fps_mode passthrough
-f rawvideo -``. The sizes are picked so that crop and pad offsets land on
.5 (crop rounds those to even, pad truncates), and so that the scaled
picture is the native size (swscale's unscaled converter, 8-pixel blocks).
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.resize import CLI_FLAGS as PACKAGE_CLI_FLAGS
from fluxon_video.sources import LocalFileRangeSource
from tests.helpers import IDENTITIES, make_patcher
from tests.media import Clip, make_clip

avio = pytest.importorskip("fluxon_video._avio")
decode = pytest.importorskip("fluxon_video._decode")

MODES = ("stretch", "shorter_side_crop", "letterbox")
INTERPOLATIONS = ("bilinear", "bicubic", "area", "nearest", "lanczos")
CLI_FLAGS = {"bilinear": "bilinear", "bicubic": "bicubic", "area": "area", "nearest": "neighbor",
             "lanczos": "lanczos"}
COMMANDS = {
    "stretch": "scale={W}:{H}:flags={FLAGS},format=rgb24",
    "shorter_side_crop": ("scale={W}:{H}:force_original_aspect_ratio=increase:flags={FLAGS},"
                          "crop={W}:{H},format=rgb24"),
    "letterbox": ("scale={W}:{H}:force_original_aspect_ratio=decrease:flags={FLAGS},"
                  "pad={W}:{H}:(ow-iw)/2:(oh-ih)/2:black,format=rgb24"),
}

X264 = ("-c:v", "libx264", "-preset", "veryfast", "-bf", "3", "-g", "12")
X265_10 = ("-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "keyint=12:log-level=error")
# Portrait clips (tests/media.py's are landscape): 4:2:0 8-bit, and 10-bit at a
# width that is not a multiple of 8; and a very wide one.
PORTRAIT = {c.name: c for c in [
    Clip("portrait_144x256.mp4", 144, 256, 1, X264),
    Clip("portrait_hevc10_98x170.mp4", 98, 170, 1, X265_10, pix_fmt="yuv420p10le"),
    Clip("wide_200x40.mp4", 200, 40, 1, X264),  # 5:1
]}


@pytest.fixture(scope="module")
def clips(tmp_path_factory, media):
    """name -> path: the portrait clips made here, tests/media.py's by name."""
    root = tmp_path_factory.mktemp("resize")
    for clip in PORTRAIT.values():
        make_clip(clip, root / clip.name)

    def path(name: str) -> Path:
        return root / name if name in PORTRAIT else media.path(name)
    return path


@functools.lru_cache(maxsize=None)
def cli_frames(path: Path, resize: str, interpolation: str, height: int, width: int,
               threads: int = 1) -> np.ndarray:
    chain = COMMANDS[resize].format(W=width, H=height, FLAGS=CLI_FLAGS[interpolation])
    raw = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-threads", str(threads), "-i", str(path),
         "-map", "0:v:0", "-vf", chain, "-fps_mode", "passthrough", "-f", "rawvideo", "-"],
        check=True, capture_output=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, height, width, 3)


def some(count: int) -> list[int]:
    return sorted({0, 1, count // 2, count - 1})


def assert_like_cli(path: Path, resize: str, interpolation: str, height: int, width: int,
                    threads: int = 1) -> None:
    ref = cli_frames(path, resize, interpolation, height, width, threads)
    indices = some(len(ref))
    with fv.open_video(path, height, width, threads, resize=resize,
                       interpolation=interpolation) as reader:
        got = reader.read_frames_numpy(indices)
    for k, i in enumerate(indices):
        if not np.array_equal(got[k], ref[i]):
            diff = np.abs(got[k].astype(int) - ref[i].astype(int))
            pytest.fail(f"{path.name} {resize} {interpolation} {width}x{height} threads={threads}: "
                        f"frame {i} differs from the CLI's (max {diff.max()}, "
                        f"{np.count_nonzero(diff.any(-1))} pixels)")


def test_the_package_names_the_cli_flags_the_tests_use():
    assert PACKAGE_CLI_FLAGS == CLI_FLAGS


@pytest.mark.parametrize("interpolation", INTERPOLATIONS)
@pytest.mark.parametrize("resize", MODES)
@pytest.mark.parametrize("name", ["odd_321x241.mp4", "portrait_144x256.mp4"])
def test_every_mode_and_interpolation_is_its_cli_command(clips, name, resize, interpolation):
    # Square, landscape and portrait outputs of a landscape 4:4:4 clip at an
    # odd size and of a portrait 4:2:0 one.
    for threads, (height, width) in zip((1, 2, 1), [(64, 64), (77, 101), (101, 77)]):
        assert_like_cli(clips(name), resize, interpolation, height, width, threads)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("resize", ["shorter_side_crop", "letterbox"])
@pytest.mark.parametrize("name, interpolation", [
    ("hevc.mp4", "bilinear"), ("vp9.webm", "bicubic"), ("av1.mkv", "area"),
    ("mpeg4.avi", "nearest"), ("fullrange.mp4", "lanczos"), ("h264_340x194.mp4", "bicubic"),
    # Non-square pixels: the CLI keeps the aspect ratio of the pixels, not the display's.
    ("h264_sar4x3.mp4", "bilinear"), ("portrait_hevc10_98x170.mp4", "area"),
])
def test_codecs_and_pixel_formats(clips, name, interpolation, resize, threads):
    for height, width in [(48, 48), (90, 120), (120, 90)]:
        assert_like_cli(clips(name), resize, interpolation, height, width, threads)


@pytest.mark.parametrize("resize", MODES)
@pytest.mark.parametrize("name, sizes", [
    # 321x241 4:4:4; 340x194 4:2:0, a width that is not a multiple of 8.
    ("odd_321x241.mp4", [(241, 321), (241, 200), (300, 321), (242, 322)]),
    ("h264_340x194.mp4", [(194, 340), (194, 300), (250, 340)]),
])
def test_a_picture_scaled_to_its_own_size_then_cropped_or_padded(clips, name, sizes, resize):
    # Each size makes the crop or letterbox scale the frame to its native size:
    # swscale's unscaled converter, which needs padded rows.
    for height, width in sizes:
        assert_like_cli(clips(name), resize, "bilinear", height, width)


def test_extreme_aspect_ratios(clips):
    # 321x241 letterboxed into 1000x4 scales to 5x4 (av_rescale(4, 321, 241) = 5),
    # into 4x1000 to 4x3.
    assert_like_cli(clips("odd_321x241.mp4"), "letterbox", "area", 4, 1000)
    assert_like_cli(clips("odd_321x241.mp4"), "letterbox", "area", 1000, 4)
    assert_like_cli(clips("wide_200x40.mp4"), "shorter_side_crop", "bicubic", 50, 3)
    # 200x40 into 2x10: the CLI's height would be av_rescale(2, 40, 200) = 0, and it
    # fails; ours is one row, centred on black.
    with fv.open_video(clips("wide_200x40.mp4"), 10, 2, resize="letterbox") as reader:
        frame = reader[0]
    assert frame.shape == (10, 2, 3) and frame[:4].max() == 0 and frame[5:].max() == 0
    assert frame[4].max() > 0


def test_the_defaults_are_stretch_and_bilinear(clips, media):
    with fv.open_video(clips("odd_321x241.mp4"), 77, 101) as reader:
        assert (reader.resize, reader.interpolation) == ("stretch", "bilinear")
        frames = reader.read_frames_numpy([0, 30])
    np.testing.assert_array_equal(frames, media.reference("odd_321x241.mp4", 77, 101)[[0, 30]])


def test_changing_the_mode_or_interpolation_rebuilds_the_scaler(clips):
    path = clips("portrait_144x256.mp4")
    steps = [("stretch", "bilinear"), ("stretch", "lanczos"), ("letterbox", "lanczos"),
             ("letterbox", "nearest"), ("shorter_side_crop", "nearest"), ("stretch", "bilinear")]
    with LocalFileRangeSource(path) as src, avio.ByteSource(src, src.size) as bs, \
            decode.VideoDecoder(bs, 1) as decoder:
        for resize, interpolation in steps:
            decoder.scaling = (resize, interpolation)
            assert decoder.scaling == (resize, interpolation)
            frames, _ = decoder.decode([2, 3], 60, 60)
            np.testing.assert_array_equal(
                frames, cli_frames(path, resize, interpolation, 60, 60)[[2, 3]],
                err_msg=f"{resize} {interpolation}")


def test_autorotate_turns_the_frame_before_it_is_letterboxed(clips, tmp_path):
    rotated = tmp_path / "rot90.mp4"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(clips("h264_340x194.mp4")),
                    "-c", "copy", "-metadata:s:v:0", "rotate=90", str(rotated)], check=True)
    # The CLI autorotates by default: its transpose comes before the chain.
    ref = cli_frames(rotated, "letterbox", "bicubic", 100, 100)
    with fv.open_video(rotated, 100, 100, autorotate=True, resize="letterbox",
                       interpolation="bicubic") as reader:
        np.testing.assert_array_equal(reader.read_frames_numpy([0, 7]), ref[[0, 7]])


@pytest.mark.parametrize("bad", [{"resize": "crop"}, {"resize": None},
                                 {"interpolation": "cubic"}, {"interpolation": 2}])
def test_bad_values_are_config_errors(clips, export_root, bad):
    (key, value), = bad.items()
    with pytest.raises(errors.FluxonFsConfigError, match=f"{key} must be one of"):
        fv.open_video(clips("odd_321x241.mp4"), 32, 32, **bad)
    with make_patcher(None, export_root) as patcher:
        with pytest.raises(errors.FluxonFsConfigError, match=f"{key} must be one of"):
            patcher.open_video_reader("train", "bucket/videos/hevc.mp4", 32, 32, **bad)
        with pytest.raises(errors.FluxonFsConfigError, match=f"{key} must be one of"):
            fv.FluxonFsVideoReadRequest("train", "bucket/videos/hevc.mp4", 32, 32, 1, (0,), **bad)
        with patcher.open_video_reader_pool() as pool:
            with pytest.raises(errors.FluxonFsConfigError, match=f"{key} must be one of"):
                pool.read_frames_numpy(export_name="train", relpath="bucket/videos/hevc.mp4",
                                       height=32, width=32, num_threads=1, indices=[0], **bad)


# ---- through FluxonFS: the patcher's readers, the pool, the dataset, the CLI ----

@pytest.fixture(scope="module")
def mixed(tmp_path_factory, clips):
    """An export root of videos of three shapes: landscape, odd, portrait."""
    root = tmp_path_factory.mktemp("mixed")
    for name in ("hevc.mp4", "odd_321x241.mp4", "portrait_144x256.mp4"):
        shutil.copy(clips(name), root / name)  # a symlink out of the root is refused
    return root


def test_the_patcher_reader_and_the_pool_pass_them_through(mixed):
    with make_patcher(None, mixed) as patcher:
        with patcher.open_video_reader("train", "portrait_144x256.mp4", 48, 64,
                                       resize="shorter_side_crop", interpolation="area") as reader:
            np.testing.assert_array_equal(
                reader.read_frames_numpy([0, 9]),
                cli_frames(mixed / "portrait_144x256.mp4", "shorter_side_crop", "area", 48, 64)[[0, 9]])
        with patcher.open_video_reader_pool() as pool:
            requests = [fv.FluxonFsVideoReadRequest("train", name, 56, 56, 1, (0, 5), None, resize,
                                                    interpolation)
                        for name, resize, interpolation in [
                            ("hevc.mp4", "letterbox", "lanczos"),
                            ("hevc.mp4", "shorter_side_crop", "lanczos"),  # another reader
                            ("portrait_144x256.mp4", "letterbox", "nearest"),
                            ("odd_321x241.mp4", "stretch", "bicubic")]]
            assert pickle.loads(pickle.dumps(requests[0])) == requests[0]
            results = pool.read_many_numpy_with_stats(requests)
            for request, result in zip(requests, results):
                np.testing.assert_array_equal(
                    result.frames, cli_frames(mixed / request.relpath, request.resize,
                                              request.interpolation, 56, 56)[[0, 5]])
            assert sorted((key.options.resize, key.options.interpolation)
                          for key in pool.idle_readers()) == [
                ("letterbox", "lanczos"), ("letterbox", "nearest"),
                ("shorter_side_crop", "lanczos"), ("stretch", "bicubic")]
            frames = pool.read_frames_numpy(export_name="train", relpath="hevc.mp4", height=56,
                                            width=56, num_threads=2, indices=[5],
                                            resize="letterbox", interpolation="lanczos")
            np.testing.assert_array_equal(
                frames, cli_frames(mixed / "hevc.mp4", "letterbox", "lanczos", 56, 56)[[5]])


def test_the_dataset_batches_videos_of_mixed_shapes(mixed):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from fluxon_video.torch import VideoClipDataset

    names = ["hevc.mp4", "odd_321x241.mp4", "portrait_144x256.mp4"]
    with make_patcher(None, mixed) as patcher:
        with pytest.raises(errors.FluxonFsConfigError, match="resize must be one of"):
            VideoClipDataset(patcher, "train", names, resize="squash")
        dataset = VideoClipDataset(patcher, "train", names, clip_len=3, stride=2, height=40,
                                   width=40, resize="shorter_side_crop", interpolation="bicubic")
        batch = next(iter(DataLoader(dataset, batch_size=3, num_workers=0)))
    assert batch["frames"].shape == (3, 3, 40, 40, 3) and batch["frames"].dtype == torch.uint8
    for k, relpath in enumerate(batch["relpath"]):
        ref = cli_frames(mixed / relpath, "shorter_side_crop", "bicubic", 40, 40)
        np.testing.assert_array_equal(batch["frames"][k].numpy(),
                                      ref[batch["indices"][k].tolist()], err_msg=relpath)


def test_the_cli_read_command_takes_resize_and_interpolation(mixed, tmp_path):
    config = tmp_path / "fluxon.toml"
    identities = "\n".join(f'{n} = "{t}"' for n, t in IDENTITIES.items())
    config.write_text(f'[identities]\n{identities}\n\n[[exports]]\nname = "data"\n'
                      f'root = "{mixed}"\nallow = ["alice"]\n')
    env = {**os.environ, "FLUXON_VIDEO_CONFIG": str(config), "FLUXON_VIDEO_IDENTITY": "alice"}
    command = [sys.executable, "-m", "fluxon_video", "read", "data:portrait_144x256.mp4",
               "--frames", "0,7", "--size", "64x48", "--format", "npy", "--out", str(tmp_path),
               "--json"]
    done = subprocess.run([*command, "--resize", "letterbox", "--interpolation", "nearest"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    ref = cli_frames(mixed / "portrait_144x256.mp4", "letterbox", "nearest", 48, 64)
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["frame"] for row in rows] == [0, 7]
    for row in rows:
        np.testing.assert_array_equal(np.load(row["file"]), ref[row["frame"]])
    bad = subprocess.run([*command, "--interpolation", "cubic"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert bad.returncode == 2 and "invalid choice: 'cubic'" in bad.stderr
