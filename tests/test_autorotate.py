"""autorotate: frames turned upright exactly as the ffmpeg CLI does (its own filters are the oracle)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video.metadata import orientation_from_matrix, rotation_from_matrix
from fluxon_video.sources import LocalFileRangeSource

avio = pytest.importorskip("fluxon_video._avio")
decode = pytest.importorskip("fluxon_video._decode")
demux = pytest.importorskip("fluxon_video._demux")

T, MX, MY = 1, 2, 4
# Each orientation and the ffmpeg filter chain that does the same.
FILTERS = {0: "null", T: "transpose=cclock_flip", T | MY: "transpose=clock",
           T | MX: "transpose=cclock", T | MX | MY: "transpose=clock_flip", MX: "hflip",
           MY: "vflip", MX | MY: "hflip,vflip"}


def cli_frames(path, height, width, *, autorotate=True, pre="null"):
    cmd = ["ffmpeg", "-nostdin", "-v", "error", *([] if autorotate else ["-noautorotate"]),
           "-i", str(path), "-map", "0:v:0",
           "-vf", f"{pre},scale={width}:{height}:flags=bilinear,format=rgb24",
           "-fps_mode", "passthrough", "-f", "rawvideo", "-"]
    raw = subprocess.run(cmd, check=True, capture_output=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, height, width, 3)


@pytest.fixture(scope="module")
def rotated(tmp_path_factory, media):
    """The same clip tagged with each display rotation (MP4 'rotate' metadata)."""
    root = tmp_path_factory.mktemp("rotated")
    base = media.path("h264_340x194.mp4")  # 4:2:0 at a width that is not a multiple of 8
    for degrees in (0, 90, 180, 270):
        subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-i", str(base), "-c", "copy",
                        "-metadata:s:v:0", f"rotate={degrees}", str(root / f"rot{degrees}.mp4")],
                       check=True)
    return root


@pytest.fixture(scope="module")
def patcher(rotated):
    with fv.FluxonFsPatcher(exports=[fv.FluxonFsExport("rot", str(rotated), allow=["a"])],
                            identities={"a": "token-a"}, identity="a") as patcher:
        yield patcher


def ffprobe_rotation(path) -> int:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream_side_data=rotation", "-of", "csv=p=0", str(path)],
                         check=True, capture_output=True, text=True).stdout.strip()
    return int(float(out)) % 360 if out else 0


@pytest.mark.parametrize("degrees", [0, 90, 180, 270])
def test_autorotate_matches_the_cli(rotated, patcher, degrees):
    name = f"rot{degrees}.mp4"
    with patcher.open_video_reader("rot", name, autorotate=True) as reader:
        meta = reader.metadata
        assert meta.rotation_deg == ffprobe_rotation(rotated / name) == degrees
        assert (meta.width, meta.height) == (340, 194)  # as coded, whatever the rotation
        turned = degrees in (90, 270)
        assert (reader.height, reader.width) == ((340, 194) if turned else (194, 340))
        ref = cli_frames(rotated / name, reader.height, reader.width)
        picks = [0, 7, 23, -1]
        np.testing.assert_array_equal(reader.read_frames_numpy(picks), ref[picks])
    # Scaled after turning, as the CLI's autorotate filters come before its scale.
    with patcher.open_video_reader("rot", name, 60, 90, autorotate=True) as reader:
        np.testing.assert_array_equal(reader.read_frames_numpy([3, 30]),
                                      cli_frames(rotated / name, 60, 90)[[3, 30]])
    # Keep-aspect follows the displayed (turned) picture.
    with patcher.open_video_reader("rot", name, None, 100, autorotate=True) as reader:
        expected = round(100 * (340 / 194 if turned else 194 / 340) / 2) * 2
        assert (reader.height, reader.width) == (expected, 100)


@pytest.mark.parametrize("degrees", [90, 270])
def test_the_default_is_the_coded_orientation(rotated, patcher, degrees):
    name = f"rot{degrees}.mp4"
    with patcher.open_video_reader("rot", name) as reader:
        assert (reader.height, reader.width) == (194, 340)
        np.testing.assert_array_equal(
            reader.read_frames_numpy([0, 9]),
            cli_frames(rotated / name, 194, 340, autorotate=False)[[0, 9]])
    with patcher.open_video_reader_pool(autorotate=True) as pool:
        frames = pool.read_frames_numpy(export_name="rot", relpath=name, height=None,
                                        width=None, num_threads=1, indices=[4])
        np.testing.assert_array_equal(frames, cli_frames(rotated / name, 340, 194)[[4]])


@pytest.mark.parametrize("clip", ["h264_340x194.mp4", "odd_321x241.mp4", "vp9.webm"])
@pytest.mark.parametrize("orient", sorted(FILTERS))
def test_every_orientation_is_the_cli_filter(media, clip, orient):
    """The pixel permutation itself, per plane and chroma layout, against ffmpeg's filters."""
    path = media.path(clip)
    with LocalFileRangeSource(path) as src, avio.ByteSource(src, src.size) as bs:
        index = demux.scan_packets(bs)
        width, height = index.header["width"], index.header["height"]
        if orient & T:
            width, height = height, width
        with decode.VideoDecoder(bs, 1) as decoder:
            decoder.index = index
            decoder.orient = orient
            for h, w in ((height, width), (37, 53)):
                frames, _ = decoder.decode([0, 13, 30], h, w)
                ref = cli_frames(path, h, w, autorotate=False, pre=FILTERS[orient])
                np.testing.assert_array_equal(frames, ref[[0, 13, 30]], err_msg=f"{orient} {h}x{w}")


def test_matrices_map_to_the_cli_choices():
    def matrix(a, b, c, d):  # 16.16 fixed point, as the display matrix side data stores them
        return [int(a * 65536), int(b * 65536), 0, int(c * 65536), int(d * 65536), 0, 0, 0, 1 << 30]

    assert orientation_from_matrix(None) == 0 and rotation_from_matrix(None) == 0
    assert orientation_from_matrix(matrix(1, 0, 0, 1)) == 0
    assert orientation_from_matrix(matrix(0, -1, 1, 0)) == T | MX       # rotate=90: cclock
    assert rotation_from_matrix(matrix(0, -1, 1, 0)) == 90
    assert orientation_from_matrix(matrix(0, 1, -1, 0)) == T | MY       # rotate=270: clock
    assert rotation_from_matrix(matrix(0, 1, -1, 0)) == 270
    assert orientation_from_matrix(matrix(-1, 0, 0, -1)) == MX | MY     # 180
    assert orientation_from_matrix(matrix(1, 0, 0, -1)) == MY           # a vertical mirror
    assert orientation_from_matrix(matrix(0.7071, -0.7071, 0.7071, 0.7071)) is None  # 45 degrees


def test_autorotate_refuses_an_angle_it_cannot_reproduce(rotated, tmp_path):
    shutil.copy(rotated / "rot0.mp4", tmp_path / "rot45.mp4")
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-i", str(rotated / "rot0.mp4"),
                    "-c", "copy", "-metadata:s:v:0", "rotate=45", str(tmp_path / "rot45.mp4")],
                   check=True)
    with fv.FluxonFsPatcher(exports=[fv.FluxonFsExport("x", str(tmp_path), allow=["a"])],
                            identities={"a": "token-a"}, identity="a") as patcher:
        with patcher.open_video_reader("x", "rot45.mp4", 32, 32) as reader:
            assert reader.metadata.rotation_deg == 0  # not a right angle
        with pytest.raises(fv.FluxonFsDecodeError, match="multiples of 90"):
            patcher.open_video_reader("x", "rot45.mp4", 32, 32, autorotate=True)
