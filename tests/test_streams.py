"""Which video stream is read, and stream_index= everywhere.

The files are made at test time by the ffmpeg CLI: a Matroska file with
three video streams and an audio stream, where the second video stream (the
container's stream 2) carries the default disposition, and an MP4 whose
cover art is a stream of its own. The oracles are the CLI decoding one
stream (``-map 0:N``) and ffprobe's frame counts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.local import LocalVideoReader, decode_local_frames
from tests.helpers import IDENTITIES, make_patcher

pytest.importorskip("fluxon_video._decode")

H, W = 48, 64
MULTI = "multi.mkv"        # 0: h264 96x64, 1: aac, 2: h264 128x72 (default), 3: mpeg4 80x48 12 fps
COVER = "cover_art.mp4"    # 0: h264 96x64, 1: png cover art
DEFAULT_STREAM = 2
VIDEO_STREAMS = (0, 2, 3)
FFMPEG = ["ffmpeg", "-nostdin", "-loglevel", "error", "-y"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("streams")
    subprocess.run([
        *FFMPEG, "-f", "lavfi", "-i", "testsrc2=size=96x64:rate=24",
        "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000",
        "-f", "lavfi", "-i", "testsrc=size=128x72:rate=24",
        "-f", "lavfi", "-i", "smptebars=size=80x48:rate=12", "-t", "1.5",
        "-map", "0", "-map", "1", "-map", "2", "-map", "3",
        "-c:v", "libx264", "-preset", "veryfast", "-bf", "2", "-g", "12", "-c:v:2", "mpeg4",
        "-c:a", "aac", "-disposition:v:0", "0", "-disposition:v:1", "default",
        "-disposition:v:2", "0", str(root / MULTI)], check=True)
    subprocess.run([*FFMPEG, "-f", "lavfi", "-i", "color=red:size=32x32", "-frames:v", "1",
                    str(root / "cover.png")], check=True)
    subprocess.run([*FFMPEG, "-i", str(root / "cover.png"), "-f", "lavfi", "-i",
                    "testsrc2=size=96x64:rate=24", "-t", "1", "-map", "1", "-map", "0",
                    "-c:v:0", "libx264", "-c:v:1", "png", "-disposition:v:1", "attached_pic",
                    str(root / COVER)], check=True)
    (root / "cover.png").unlink()
    return root


def cli_frames(path: Path, stream: int) -> np.ndarray:
    raw = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path), "-map", f"0:{stream}",
         "-vf", f"scale={W}:{H}:flags=bilinear,format=rgb24", "-fps_mode", "passthrough",
         "-f", "rawvideo", "-"], check=True, capture_output=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, H, W, 3)


def probe_stream(path: Path, stream: int) -> dict:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", str(stream), "-count_frames",
         "-show_entries", "stream=index,width,height,codec_name,nb_read_frames", "-of", "json",
         str(path)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["streams"][0]


@pytest.fixture(scope="module")
def reference(root):
    cache: dict[int, np.ndarray] = {}

    def get(stream: int) -> np.ndarray:
        if stream not in cache:
            cache[stream] = cli_frames(root / MULTI, stream)
        return cache[stream]

    return get


def test_the_streams_differ(reference):
    """Otherwise reading the wrong stream could pass."""
    firsts = [reference(s)[0] for s in VIDEO_STREAMS]
    assert not any(np.array_equal(a, b) for i, a in enumerate(firsts) for b in firsts[i + 1:])


def test_the_default_is_the_stream_av_find_best_stream_picks(root, reference):
    """The default-disposition stream, not the first one."""
    with make_patcher(None, root) as patcher:
        with patcher.open_video_reader("train", MULTI, H, W) as reader:
            assert reader.metadata.stream_index == DEFAULT_STREAM
            probe = probe_stream(root / MULTI, DEFAULT_STREAM)
            assert (reader.metadata.width, reader.metadata.height) == (probe["width"],
                                                                        probe["height"])
            assert len(reader) == int(probe["nb_read_frames"])
            assert np.array_equal(reader.read_frames_numpy(range(len(reader))),
                                  reference(DEFAULT_STREAM))


@pytest.mark.parametrize("stream", VIDEO_STREAMS)
def test_each_stream_reads_as_the_cli_maps_it(root, reference, stream):
    probe = probe_stream(root / MULTI, stream)
    expected = reference(stream)
    with make_patcher(None, root) as patcher:
        metadata = patcher.video_metadata("train", MULTI, stream_index=stream)
        assert metadata.stream_index == stream and metadata.codec == probe["codec_name"]
        assert metadata.num_frames == int(probe["nb_read_frames"]) == len(expected)
        with patcher.open_video_reader("train", MULTI, H, W, stream_index=stream) as reader:
            order = list(range(len(expected)))[::-1]
            assert np.array_equal(reader.read_frames_numpy(order), expected[order])
            assert len(reader.timestamps_s()) == len(expected)
    # The sequential reference path and a local reader choose the same stream.
    frames, _ = decode_local_frames(root / MULTI, [0, len(expected) - 1], H, W, seek=False,
                                    stream_index=stream)
    assert np.array_equal(frames, expected[[0, -1]])
    with LocalVideoReader(root / MULTI, stream_index=stream) as local:
        assert np.array_equal(local.read_frames_numpy([3], H, W)[0], expected[[3]])


@pytest.mark.parametrize("name,stream,named", [
    (MULTI, 1, "1: audio aac"), (MULTI, 9, "3: video mpeg4"), (COVER, 1, "1: cover art png")])
def test_a_stream_that_is_not_a_video_stream_is_refused(root, name, stream, named):
    with make_patcher(None, root) as patcher:
        with pytest.raises(errors.FluxonFsNoVideoStreamError, match=f"stream_index={stream}") as info:
            patcher.open_video_reader("train", name, H, W, stream_index=stream)
        assert named in str(info.value) and f"train:{name}" in str(info.value)
        with pytest.raises(errors.FluxonFsNoVideoStreamError):
            patcher.video_metadata("train", name, stream_index=stream)
    with pytest.raises(errors.FluxonFsNoVideoStreamError, match=named):
        decode_local_frames(root / name, [0], H, W, seek=False, stream_index=stream)


@pytest.mark.parametrize("bad", [-1, True, 1.0, "0"])
def test_stream_index_must_be_a_non_negative_int(root, bad):
    with make_patcher(None, root) as patcher:
        with pytest.raises(errors.FluxonFsConfigError, match="stream_index"):
            patcher.open_video_reader("train", MULTI, H, W, stream_index=bad)
        with pytest.raises(errors.FluxonFsConfigError, match="stream_index"):
            fv.FluxonFsVideoReadRequest("train", MULTI, H, W, 1, (0,), stream_index=bad)


def test_cover_art_is_never_the_default(root):
    expected = cli_frames(root / COVER, 0)
    with make_patcher(None, root) as patcher:
        with patcher.open_video_reader("train", COVER, H, W) as reader:
            assert reader.metadata.stream_index == 0 and len(reader) == len(expected) == 24
            assert np.array_equal(reader.read_frames_numpy([0, 23]), expected[[0, 23]])


def test_the_pool_keys_readers_by_stream(root, reference):
    with make_patcher(None, root) as patcher, patcher.open_video_reader_pool() as pool:
        requests = [fv.FluxonFsVideoReadRequest("train", MULTI, H, W, 1, (5, 0), stream_index=s)
                    for s in (*VIDEO_STREAMS, None)]
        results = pool.read_many_numpy_with_stats(requests)
        for request, result in zip(requests, results):
            stream = DEFAULT_STREAM if request.stream_index is None else request.stream_index
            assert np.array_equal(result.frames, reference(stream)[[5, 0]])
        assert sorted(key.options.stream_index for key in pool.idle_readers()
                      if key.options.stream_index is not None) == [0, 2, 3]
        lone = pool.read_frames_numpy(export_name="train", relpath=MULTI, height=H, width=W,
                                      num_threads=2, indices=[7], stream_index=3)
        assert np.array_equal(lone, reference(3)[[7]])
        assert pool.video_metadata("train", MULTI, stream_index=3).stream_index == 3
        metadata, times = pool.video_metadata_and_timestamps_s("train", MULTI, stream_index=0)
        assert metadata.stream_index == 0 and len(times) == len(reference(0))


def test_each_streams_index_is_shared_under_its_own_kind(root, reference, redis_url):
    for expected_source in ("scan", "kv"):
        with make_patcher(None, root, redis_url) as patcher:
            for stream in (3, None, 0):
                with patcher.open_video_reader("train", MULTI, H, W, stream_index=stream) as reader:
                    frames = reader.read_frames_numpy([1, 4])
                    assert reader.last_stats.index_source == expected_source
                    want = DEFAULT_STREAM if stream is None else stream
                    assert reader.metadata.stream_index == want
                    assert np.array_equal(frames, reference(want)[[1, 4]])


def test_the_cli_reads_and_stats_a_chosen_stream(root, reference, tmp_path):
    from tests.test_ops import cli

    identities = "\n".join(f'{n} = "{t}"' for n, t in IDENTITIES.items())
    config = tmp_path / "fluxon.toml"
    config.write_text(f'[identities]\n{identities}\n\n[[exports]]\nname = "data"\n'
                      f'root = "{root}"\nallow = ["alice"]\n')
    stat = json.loads(cli("stat", f"data:{MULTI}", "--stream", "3", "--json",
                          config=config).stdout)
    assert stat["stream_index"] == 3 and stat["codec"] == "mpeg4"
    rows = [json.loads(line) for line in cli(
        "read", f"data:{MULTI}", "--stream", "0", "--frames", "2", "--size", f"{W}x{H}",
        "--format", "npy", "--json", "--out", str(tmp_path / "out"), config=config
    ).stdout.splitlines()]
    assert np.array_equal(np.load(rows[0]["file"]), reference(0)[2])
    refused = cli("read", f"data:{MULTI}", "--stream", "1", "--frames", "0", "--out",
                  str(tmp_path / "no"), config=config, check=False)
    assert refused.returncode == 1 and "1: audio aac" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_dataset_reads_its_stream(root, reference):
    pytest.importorskip("torch")
    from fluxon_video.torch import VideoClipDataset

    with make_patcher(None, root) as patcher:
        dataset = VideoClipDataset(patcher, "train", [MULTI], clip_len=4, height=H, width=W,
                                   stream_index=3)
        item = dataset[0]
        assert np.array_equal(item["frames"].numpy(), reference(3)[item["indices"].numpy()])
        with pytest.raises(errors.FluxonFsConfigError):
            VideoClipDataset(patcher, "train", [MULTI], stream_index=-2)

