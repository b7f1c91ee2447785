"""Streams joined end to end: MPEG-TS files concatenated byte for byte, as
recorders and segmenters leave them.

At the join the demuxer flags the first packet corrupt (the continuity
counters break) and the timestamps of the two parts overlap. Such a packet
lies inside the file, so it is decoded like any other (only a packet the
file ends inside of is dropped, as the frame index counts it); every frame
of both parts reads, in any order, as the ffmpeg CLI decodes the file. When
the second part has another frame size, each frame is scaled from its own
size to the output size: the CLI's ``-reinit_filter 0`` output (by default
the CLI rebuilds its filter graph at the change and converts differently).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from tests.helpers import make_patcher
from tests.media import ffprobe_frame_count, reference_frames

pytest.importorskip("fluxon_video._decode")

H, W = 32, 48
PARTS = {"a.ts": "96x64", "b.ts": "160x90", "c.ts": "96x64"}
JOINED = {"same_size.ts": ("a.ts", "c.ts"), "size_change.ts": ("a.ts", "b.ts")}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("joined")
    for name, size in PARTS.items():
        subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                        f"testsrc2=size={size}:rate=25", "-t", "1", "-c:v", "libx264", "-bf", "2",
                        "-g", "10", str(root / name)], check=True)
    for name, parts in JOINED.items():
        (root / name).write_bytes(b"".join((root / p).read_bytes() for p in parts))
    return root


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", JOINED)
def test_every_frame_of_both_parts_reads_as_the_cli_decodes_it(root, name, threads):
    path = root / name
    expected = reference_frames(path, H, W, input_options=("-reinit_filter", "0"))
    assert len(expected) == ffprobe_frame_count(path) == 50
    with fv.open_video(path, H, W, num_threads=threads) as reader:
        assert len(reader) == 50
        assert np.array_equal(reader.read_frames_numpy(range(50)), expected)
        picks = np.random.default_rng(7).permutation(50)[:12]
        assert np.array_equal(reader.read_frames_numpy(picks), expected[picks])
        assert np.array_equal(reader.read_frames_numpy([-1, 25, 24]), expected[[49, 25, 24]])
    with make_patcher(None, root) as patcher, \
            patcher.open_video_reader("train", name, H, W) as remote:
        assert np.array_equal(remote.read_frames_numpy([30, 2, 49]), expected[[30, 2, 49]])
