"""read_gray16_numpy: the samples of 9- to 16-bit gray videos (depth maps) as coded.

Videos: a 12-bit gray HEVC encoded losslessly with B-frames (as LeRobot stores
depth cameras) and a 16-bit FFV1 in Matroska, every sample a different value
per frame. Oracle: the ffmpeg CLI's decode to the video's own gray format.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from tests.media import reference_frames, reference_gray_samples

HEIGHT, WIDTH, FRAMES = 34, 50, 45
# codes that differ per pixel and per frame, over the format's whole range
SOURCE = ("nullsrc=s={w}x{h}:r=30,trim=end_frame={n},format={fmt},"
          "geq=lum='mod(X*37+Y*101+N*53\\,{top})'")
VIDEOS = {
    "hevc_gray12.mp4": ("gray12le", 4096, ["-c:v", "libx265", "-x265-params",
                                           "lossless=1:bframes=3:keyint=12:log-level=error"]),
    "ffv1_gray16.mkv": ("gray16le", 65536, ["-c:v", "ffv1", "-g", "10"]),
}


@pytest.fixture(scope="module", params=sorted(VIDEOS))
def gray_video(request, tmp_path_factory) -> tuple[Path, np.ndarray]:
    """(a gray video, every frame's samples by the ffmpeg CLI)."""
    fmt, top, codec = VIDEOS[request.param]
    path = tmp_path_factory.mktemp("gray16") / request.param
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                    SOURCE.format(w=WIDTH, h=HEIGHT, n=FRAMES, fmt=fmt, top=top), *codec,
                    "-pix_fmt", fmt, str(path)], check=True, capture_output=True)
    codes = reference_gray_samples(path, fmt, HEIGHT, WIDTH)
    assert len(codes) == FRAMES and len(np.unique(codes)) > 1000
    return path, codes


@pytest.mark.parametrize("threads", [1, 2])
def test_every_frame_is_the_clis_samples(gray_video, threads):
    """Random order, duplicates, negative indices: each frame's samples as the CLI
    decodes them, uint16 (N, H, W), on one and on two decoder threads."""
    path, codes = gray_video
    order = np.random.default_rng(threads).permutation(FRAMES)
    with fv.open_video(path, num_threads=threads) as reader:
        assert reader.metadata.pix_fmt in ("gray12le", "gray16le")
        frames = reader.read_gray16_numpy(order)
        assert frames.dtype == np.uint16 and frames.shape == (FRAMES, HEIGHT, WIDTH)
        assert frames.flags.c_contiguous
        assert np.array_equal(frames, codes[order])
        again = reader.read_gray16_numpy([7, -1, 7, 0])
        assert np.array_equal(again, codes[[7, FRAMES - 1, 7, 0]])
        assert reader.read_gray16_numpy([]).shape == (0, HEIGHT, WIDTH)


def test_rgb_and_gray_reads_share_a_reader(gray_video):
    """The same reader alternates between RGB frames (the CLI's rgb24) and the
    samples: neither read leaves the other a wrong frame."""
    path, codes = gray_video
    rgb = reference_frames(path, HEIGHT, WIDTH)
    with fv.open_video(path) as reader:
        assert np.array_equal(reader.read_frames_numpy([3, 30]), rgb[[3, 30]])
        assert np.array_equal(reader.read_gray16_numpy([30, 4]), codes[[30, 4]])
        assert np.array_equal(reader.read_frames_numpy([31, 2]), rgb[[31, 2]])


def test_what_it_refuses(gray_video, tmp_path):
    """A reader opened at another size, and a video that is not gray, are refused
    before anything is decoded, naming the file."""
    path, _ = gray_video
    with fv.open_video(path, height=HEIGHT // 2, width=WIDTH // 2) as reader, \
            pytest.raises(fv.FluxonFsConfigError, match=f"{path.name}.*video's size {WIDTH}x"):
        reader.read_gray16_numpy([0])
    colour = tmp_path / "colour.mp4"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                    f"testsrc2=s={WIDTH}x{HEIGHT}:r=30:d=0.5", "-pix_fmt", "yuv420p", str(colour)],
                   check=True, capture_output=True)
    with fv.open_video(colour) as reader:
        with pytest.raises(fv.FluxonFsDecodeError, match="colour.mp4: a yuv420p video"):
            reader.read_gray16_numpy([0])
        assert reader.read_frames_numpy([0]).shape == (1, HEIGHT, WIDTH, 3)


def test_through_an_agent(gray_video, tmp_path):
    """The same samples from a real agent (the reader's pages through the fetch
    path): the method is the reader's, wherever its bytes come from."""
    from fluxon_video.testing import AgentProcess
    from tests.helpers import agent_config_text, make_patcher

    path, codes = gray_video
    config = tmp_path / "agent.toml"
    config.write_text(agent_config_text(path.parent))
    config.chmod(0o600)
    with AgentProcess(config) as agent:
        patcher = make_patcher(agent.url, path.parent)
        try:
            with patcher.open_video_reader("train", path.name) as reader:
                assert np.array_equal(reader.read_gray16_numpy([40, 2, 2]), codes[[40, 2, 2]])
            assert patcher.stats().remote_bytes > 0
        finally:
            patcher.close()


def test_a_reader_pool_reads_them(gray_video):
    """FluxonFsVideoReaderPool.read_gray16_numpy: the samples on a pooled reader
    of the video's own size, reused by the next read of the file."""
    from tests.helpers import make_patcher

    path, codes = gray_video
    with make_patcher(None, path.parent) as patcher:
        pool = patcher.open_video_reader_pool()
        for order in ([5, 1, 5], [-1, 0]):
            frames = pool.read_gray16_numpy(export_name="train", relpath=path.name,
                                            num_threads=1, indices=order)
            assert np.array_equal(frames, codes[order])
        assert (pool.counters().readers_opened, pool.counters().leases_reused) == (1, 1)
        pool.close()
