"""One owner and one release path per resource: decoder, client, patcher, identity."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from fluxon_video import errors
from fluxon_video.sources import BytesRangeSource, LocalFileRangeSource
from tests.helpers import RaisingSource, make_patcher

avio = pytest.importorskip("fluxon_video._avio")
decode = pytest.importorskip("fluxon_video._decode")

VIDEO = "bucket/videos/h264_faststart.mp4"


@pytest.fixture
def decoder(media):
    with LocalFileRangeSource(media.path("h264_faststart.mp4")) as src:
        with avio.ByteSource(src, src.size) as bs:
            with decode.VideoDecoder(bs, 1) as dec:
                yield dec


def test_reset_reopens_and_close_is_final(media, decoder):
    ref = media.reference("h264_faststart.mp4", 32, 32)
    frames, _ = decoder.decode([5], 32, 32)
    assert decoder.is_open
    decoder.reset()
    assert not decoder.is_open
    again, stats = decoder.decode([5], 32, 32)  # reopens
    np.testing.assert_array_equal(frames, again)
    np.testing.assert_array_equal(again[0], ref[5])
    assert stats.container_open_ms > 0
    decoder.close()
    decoder.close()  # twice is fine
    assert decoder.closed and not decoder.is_open
    with pytest.raises(errors.FluxonFsClosedError, match="closed"):
        decoder.decode([5], 32, 32)
    with pytest.raises(errors.FluxonFsClosedError):
        decoder.reset()


def test_a_failed_open_leaves_nothing_half_built(media):
    data = media.path("h264_faststart.mp4").read_bytes()
    bs = avio.ByteSource(BytesRangeSource(bytes(range(256)) * 64, "garbage.bin"), 256 * 64)
    with bs, decode.VideoDecoder(bs, 1) as dec:
        for _ in range(2):  # the same clean error each time, nothing left open
            with pytest.raises(errors.FluxonFsDecodeError, match="not a recognised"):
                dec.decode([0], 16, 16)
            assert not dec.is_open
    # The source fails after the container header: the open fails, then it is
    # healthy again and the same decoder opens from scratch.
    src = RaisingSource(data, fail_from=1000)
    with avio.ByteSource(src, len(data), page_size=4096) as bs, decode.VideoDecoder(bs, 1) as dec:
        with pytest.raises(RaisingSource.Boom):
            dec.decode([0], 16, 16)
        assert not dec.is_open
        src.fail_from = len(data)
        frames, _ = dec.decode([0], 16, 16)
        np.testing.assert_array_equal(frames[0], media.reference("h264_faststart.mp4", 16, 16)[0])


def test_readers_of_a_closed_patcher_fail(export_root):
    patcher = make_patcher(None, export_root)
    reader = patcher.open_video_reader("train", VIDEO, 16, 16)
    reader.read_frames_numpy([0])
    patcher.close()
    patcher.close()
    with pytest.raises(errors.FluxonFsClosedError):
        reader.read_frames_numpy([1])
    with pytest.raises(errors.FluxonFsClosedError):
        patcher.open_video_reader("train", VIDEO, 16, 16)
    reader.close()


def test_open_video_reader_takes_the_identity_explicitly(export_root):
    with make_patcher(None, export_root, identity="alice") as patcher:
        with patcher.open_video_reader("shared", VIDEO, 16, 16, identity="bob") as reader:
            assert reader.identity.name == "bob"
            reader.read_frames_numpy([0])
        assert patcher.identity.name == "alice"  # the patcher's own is untouched
        with pytest.raises(errors.FluxonFsPermissionError):
            patcher.open_video_reader("train", VIDEO, 16, 16, identity="bob")


def _read_in_child(patcher, parent_backfill_id, queue):
    try:
        client = patcher.client
        with patcher.open_video_reader("train", VIDEO, 16, 16) as reader:
            frames = reader.read_frames_numpy([3])
        queue.put((id(client.backfill) != parent_backfill_id, frames.shape))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put(repr(exc))


def test_the_client_rebuilds_its_own_state_after_fork(export_root):
    with make_patcher(None, export_root) as patcher:
        with patcher.open_video_reader("train", VIDEO, 16, 16) as reader:
            reader.read_frames_numpy([0])
        parent_backfill = patcher.client.backfill
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_read_in_child, args=(patcher, id(parent_backfill), queue))
        child.start()
        result = queue.get(timeout=60)
        child.join(60)
        assert result == (True, (1, 16, 16, 3)), result
        assert patcher.client.backfill is parent_backfill  # the parent's is untouched
