"""10-bit sources: fluxon's frames against the exact ffmpeg CLI command they equal.

fluxon converts with one bilinear SwsContext (``_convert.pyx``). For 8-bit 4:2:0
at native size swscale takes its unscaled YUV->RGB converter, whatever the
flags, so the CLI's default flags (bicubic) give the same pixels. For 10-bit
4:2:0 there is no unscaled converter: even at native size the chroma planes are
upsampled vertically by the scaler proper, and the filter (bilinear or bicubic)
shows in the pixels. So the reference has to name the flags:

    ffmpeg -i IN -map 0:v:0 -vf scale=W:H:flags=bilinear,format=rgb24 \
           -fps_mode passthrough -f rawvideo -

and at native size, equivalently, ``-sws_flags bilinear`` **as an output option**
(after ``-i``) with ``-vf format=rgb24``. Before ``-i`` it is an input option
and does not reach the auto-inserted scaler: the output is then bicubic, as with
no flags at all. Clips are made at test time (lavfi testsrc2, 2 s, 48 frames),
once per session.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.media import Clip, make_clip

pytest.importorskip("fluxon_video._decode")

from fluxon_video.local import LocalVideoReader, decode_local_frames  # noqa: E402
from fluxon_video.metadata import build_metadata  # noqa: E402

X264 = ("-c:v", "libx264", "-preset", "veryfast", "-bf", "3", "-g", "24", "-keyint_min", "24",
        "-sc_threshold", "0")
X265 = ("-c:v", "libx265", "-preset", "ultrafast", "-tag:v", "hvc1",
        "-x265-params", "keyint=24:min-keyint=24:bframes=3:log-level=error",
        "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709")

# 170 is not a multiple of 8 (swscale's converters work in 8-pixel blocks);
# 4:2:0 and 4:2:2 need even sizes.
W, H = 170, 94
CLIPS = {c.name: c for c in [
    Clip("h264_yuv420p10.mp4", W, H, 2, X264, pix_fmt="yuv420p10le"),
    # BT.709 tagged, so the frame's own matrix is used, not the default one.
    Clip("hevc_yuv420p10.mp4", W, H, 2, X265, pix_fmt="yuv420p10le"),
    Clip("h264_yuv422p10.mp4", W, H, 2, X264, pix_fmt="yuv422p10le"),
]}
CODECS = {"h264_yuv420p10.mp4": "h264", "hevc_yuv420p10.mp4": "hevc",
          "h264_yuv422p10.mp4": "h264"}
FRAMES = 48
SCALED = (77, 101)  # an odd, non-uniform downscale
SIZES = ["native", SCALED]

# The reference: tests/media.py's command, flags spelled out.
BILINEAR = "bilinear"
# The same at native size, the flags given to the auto-inserted scaler.
SWS_FLAGS_BILINEAR = "sws_flags_bilinear"
# The CLI's default (bicubic), and -sws_flags put before -i (where it is ignored).
DEFAULT_FLAGS = "default_flags"
SWS_FLAGS_BEFORE_INPUT = "sws_flags_before_input"


def cli_args(command: str, height: int, width: int) -> tuple[list[str], list[str]]:
    """(input options, output options) for the CLI's rgb24 frames at height x width."""
    scale = f"scale={width}:{height}"
    if command == BILINEAR:
        return [], ["-vf", f"{scale}:flags=bilinear,format=rgb24"]
    if command == SWS_FLAGS_BILINEAR:
        return [], ["-sws_flags", "bilinear", "-vf", f"{scale},format=rgb24"]
    if command == DEFAULT_FLAGS:
        return [], ["-vf", f"{scale},format=rgb24"]
    if command == SWS_FLAGS_BEFORE_INPUT:
        return ["-sws_flags", "bilinear"], ["-vf", f"{scale},format=rgb24"]
    raise ValueError(command)


def cli_frames(path: Path, command: str, height: int, width: int) -> np.ndarray:
    before, after = cli_args(command, height, width)
    raw = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", *before, "-i", str(path), "-map", "0:v:0",
         *after, "-fps_mode", "passthrough", "-f", "rawvideo", "-"],
        check=True, capture_output=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, height, width, 3)


class TenBitMedia:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._refs: dict = {}
        self._batches: dict = {}

    def path(self, name: str) -> Path:
        out = self.root / name
        with self._lock:
            if not out.exists():
                make_clip(CLIPS[name], out)
        return out

    def reference(self, name: str, command: str, height: int, width: int) -> np.ndarray:
        key = (name, command, height, width)
        path = self.path(name)
        with self._lock:
            if key not in self._refs:
                self._refs[key] = cli_frames(path, command, height, width)
            return self._refs[key]

    def batch(self, name: str, height: int, width: int) -> np.ndarray:
        """Every frame in one read of range(n), through one reader."""
        key = (name, height, width)
        path = self.path(name)
        with self._lock:
            if key not in self._batches:
                with LocalVideoReader(path) as reader:
                    frames, _ = reader.read_frames_numpy(list(range(FRAMES)), height, width)
                self._batches[key] = frames
            return self._batches[key]


@pytest.fixture(scope="session")
def tenbit(tmp_path_factory) -> TenBitMedia:
    return TenBitMedia(tmp_path_factory.mktemp("tenbit"))


def hw(size) -> tuple[int, int]:
    return (H, W) if size == "native" else size


def assert_frames_equal(got: np.ndarray, ref: np.ndarray, indices, what: str) -> None:
    assert got.dtype == np.uint8 and got.shape == (len(indices), *ref.shape[1:])
    for k, i in enumerate(indices):
        if not np.array_equal(got[k], ref[i]):
            diff = np.abs(got[k].astype(int) - ref[i].astype(int))
            pytest.fail(f"{what}: frame {i} differs from the CLI's (max diff {diff.max()}, "
                        f"{np.count_nonzero(diff.any(-1))} pixels)")


@pytest.mark.parametrize("name", CLIPS)
def test_the_clips_are_ten_bit_and_the_metadata_says_so(tenbit, name):
    path = tenbit.path(name)
    with LocalVideoReader(path) as reader:
        index = reader.index
        assert index is not None and index.frame_count == FRAMES
        meta = build_metadata(index, path.stat().st_size, path.stat().st_mtime_ns, name)
    assert meta.pix_fmt == CLIPS[name].pix_fmt
    assert meta.bit_depth == 10
    assert meta.codec == CODECS[name]
    assert (meta.width, meta.height) == (W, H)
    assert len(tenbit.reference(name, BILINEAR, H, W)) == FRAMES


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", CLIPS)
def test_a_batch_equals_the_cli_with_bilinear_flags(tenbit, name, size):
    height, width = hw(size)
    ref = tenbit.reference(name, BILINEAR, height, width)
    assert_frames_equal(tenbit.batch(name, height, width), ref, range(FRAMES),
                        f"{name} {height}x{width} batch")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", CLIPS)
def test_lone_reads_equal_the_cli_with_bilinear_flags(tenbit, name, size):
    height, width = hw(size)
    ref = tenbit.reference(name, BILINEAR, height, width)
    path = tenbit.path(name)
    # Backwards and forwards, across the keyframe at 24, through one reader.
    order = [47, 0, 30, 29, 5, 24, 23, 46, 12, 13, 1]
    paths = set()
    with LocalVideoReader(path) as reader:
        for i in order:
            frames, stats = reader.read_frames_numpy([i], height, width)
            paths.add(stats.path)
            assert_frames_equal(frames, ref, [i], f"{name} {height}x{width} lone read")
    assert "indexed" in paths, paths
    # A cold reader per read, two decoder threads.
    for i in (40, 17):
        with LocalVideoReader(path, num_threads=2) as reader:
            frames, _ = reader.read_frames_numpy([i], height, width)
        assert_frames_equal(frames, ref, [i], f"{name} {height}x{width} cold lone read")
    # The sequential reference path, unsorted and with a duplicate.
    indices = [33, 2, 47, 2]
    frames, stats = decode_local_frames(path, indices, height, width, seek=False)
    assert stats.path == "sequential"
    assert_frames_equal(frames, ref, indices, f"{name} {height}x{width} sequential")


@pytest.mark.parametrize("name", CLIPS)
def test_at_native_size_sws_flags_bilinear_after_the_input_is_the_same_command(tenbit, name):
    ref = tenbit.reference(name, SWS_FLAGS_BILINEAR, H, W)
    np.testing.assert_array_equal(ref, tenbit.reference(name, BILINEAR, H, W))
    assert_frames_equal(tenbit.batch(name, H, W), ref, range(FRAMES), f"{name} -sws_flags")


def _cases_where_bicubic_shows():
    # 4:2:2 at native size has no vertical chroma upsampling (and horizontal
    # chroma is not interpolated without full_chroma_int): there the flags do
    # not change a pixel, so that case cannot tell the commands apart.
    return [(name, size) for name in CLIPS for size in SIZES
            if not (size == "native" and CLIPS[name].pix_fmt == "yuv422p10le")]


@pytest.mark.parametrize("command", [DEFAULT_FLAGS, SWS_FLAGS_BEFORE_INPUT])
@pytest.mark.parametrize(("name", "size"), _cases_where_bicubic_shows())
def test_the_cli_default_flags_give_other_pixels(tenbit, name, size, command):
    """Not a fluxon property: shows the tests above would catch a bicubic converter."""
    height, width = hw(size)
    bicubic = tenbit.reference(name, command, height, width)
    ours = tenbit.batch(name, height, width)
    assert bicubic.shape == ours.shape
    differing = [i for i in range(FRAMES) if not np.array_equal(bicubic[i], ours[i])]
    assert len(differing) == FRAMES, f"{name} {height}x{width} {command}: {differing}"

