"""Damaged streams and packets that are not frames: a read returns the ffmpeg
CLI's frame or raises, never another frame.

Damaged files are made at test time: a clip with the first bytes of one
packet overwritten, so the decoder rejects it (H.264 and HEVC: a NAL length;
VP9: the frame marker), in a reference frame, a non-reference frame and a
keyframe. The oracles come from the ffmpeg CLI: the undamaged clip's frames
(what the default policy's frames must be, numbered by the index) and the
damaged clip decoded with one thread (what on_damage="conceal" must return).
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.frame_index import FrameIndex
from tests.helpers import make_patcher
from tests.media import CLIPS, damage_packets, reference_frames

pytest.importorskip("fluxon_video._decode")

H, W = 36, 64
DAMAGED = ["damaged_h264_ref.mp4", "damaged_h264_nonref.mp4", "damaged_h264_key.mp4",
           "damaged_hevc.mp4", "damaged_vp9.webm"]


@pytest.fixture(scope="module")
def frames(media):
    """name -> (undamaged frames, one-threaded CLI frames of the damaged file)."""
    cache = {}

    def get(name):
        if name not in cache:
            clip = CLIPS[name]
            cache[name] = (media.reference(clip.derive_from, H, W),
                           reference_frames(media.path(name), H, W, threads=1))
        return cache[name]

    return get


def read_each(reader, count, threads_label=""):
    """index -> frame, or the exception's class, for every lone read."""
    out = {}
    for i in range(count):
        try:
            out[i] = reader.read_frames_numpy([i], H, W)[0][0]
        except errors.FluxonFsError as exc:
            out[i] = type(exc)
    return out


@pytest.mark.parametrize("name", DAMAGED)
@pytest.mark.parametrize("threads", [1, 2])
def test_default_policy_frames_are_the_undamaged_ones_or_a_named_error(media, frames, name,
                                                                        threads):
    clean, _ = frames(name)
    path = media.path(name)
    damaged_packet = CLIPS[name].damage[0]
    with fv.LocalVideoReader(path, threads) as reader:
        count = reader.index.frame_count
        assert count == clean.shape[0]  # the index numbers packets: nothing shifts
        lone = read_each(reader, count)
        failed = sorted(i for i, v in lone.items() if v is errors.FluxonFsDamagedStreamError)
        # The damaged packet's own frame is among the refused ones, and so is
        # nothing outside its GOP.
        own = int(np.flatnonzero(reader.index.frame_dec == damaged_packet)[0])
        assert own in failed
        keys = reader.index.frame_key
        assert all(keys[i] == keys[own] for i in failed)
        for i, value in lone.items():
            if i not in failed:
                assert isinstance(value, np.ndarray), (i, value)
                assert np.array_equal(value, clean[i]), i
        good = [i for i in range(count) if i not in failed]
        # A batch of the readable frames in reversed order: the same bytes.
        batch, _ = reader.read_frames_numpy(good[::-1], H, W)
        assert np.array_equal(batch, clean[good[::-1]])
        # Any batch holding a damaged frame fails, naming the damage.
        with pytest.raises(errors.FluxonFsDamagedStreamError,
                           match=rf"{path}: frame \d+ depends on damaged data: packet "
                                 rf"{damaged_packet} in decode order"):
            reader.read_frames_numpy(list(range(count)), H, W)
        learnt = reader.index
    # What was learnt travels with the index (the KV copy): a reader opened on
    # it refuses the same frames without decoding them, and reads the rest alike.
    with fv.LocalVideoReader(path, 3 - threads,
                             index=FrameIndex.from_bytes(learnt.to_bytes())) as again:
        assert again.index.pkt_damaged[damaged_packet]
        for i in (failed[0], failed[-1]):
            with pytest.raises(errors.FluxonFsDamagedStreamError):
                again.read_frames_numpy([i], H, W)
        batch, stats = again.read_frames_numpy(good, H, W)
        assert np.array_equal(batch, clean[good])
        assert stats.decode_errors == 0  # the damaged packet is never fed


@pytest.mark.parametrize("name", DAMAGED)
def test_sequential_path_fails_at_the_damage(media, frames, name):
    clean, _ = frames(name)
    path = media.path(name)
    with fv.LocalVideoReader(path) as reader:
        own = int(np.flatnonzero(reader.index.frame_dec == CLIPS[name].damage[0])[0])
    # Frames decoded before the damage are served; after it, the read fails.
    early, _ = fv.decode_local_frames(path, [0], H, W, seek=False)
    assert np.array_equal(early[0], clean[0])
    with pytest.raises(errors.FluxonFsDamagedStreamError, match=str(path)):
        fv.decode_local_frames(path, [own + 30 if own + 30 < len(clean) else own], H, W,
                               seek=False)


@pytest.mark.parametrize("name", DAMAGED)
@pytest.mark.parametrize("threads", [1, 2])
def test_conceal_returns_the_one_threaded_decode_on_every_path(media, frames, name, threads):
    _, reference = frames(name)
    path = media.path(name)
    with fv.LocalVideoReader(path, threads, on_damage="conceal") as reader:
        assert reader.index.decoded_pts is not None
        assert reader.index.pkt_damaged[CLIPS[name].damage[0]]
        count = len(reference)
        lone = read_each(reader, count)
        for i in range(count):
            assert isinstance(lone[i], np.ndarray), (i, lone[i])
            assert np.array_equal(lone[i], reference[i]), i
        order = list(range(count))[::-1]
        batch, _ = reader.read_frames_numpy(order, H, W)
        assert np.array_equal(batch, reference[order])
        with pytest.raises(IndexError):
            reader.read_frames_numpy([count], H, W)


def test_conceal_metadata_counts_the_frames_it_returns(media, frames):
    name = "damaged_h264_ref.mp4"
    _, reference = frames(name)
    with make_patcher(None, media.path(name).parent) as patcher:
        with patcher.open_video_reader("train", name, H, W, on_damage="conceal") as reader:
            assert len(reader) == reader.metadata.num_frames == len(reference)
            assert reader.timestamps_s().shape == (len(reference),)
            last = reader.indices_at_times([reader.metadata.end_stream_seconds - 1e-6])
            assert last == [len(reference) - 1]
            assert np.array_equal(reader.read_frames_numpy(last)[0], reference[-1])
        # Metadata without a reader numbers the same frames.
        meta = patcher.video_metadata("train", name, on_damage="conceal")
        assert meta.num_frames == len(reference)
        with patcher.open_video_reader("train", name, H, W) as strict:
            assert len(strict) == len(reference) + 1  # one frame per shown packet
        pool = patcher.open_video_reader_pool(on_damage="conceal")
        with pool:
            result = pool.read_frames_numpy(export_name="train", relpath=name, height=H, width=W,
                                            num_threads=2, indices=[0, len(reference) - 1])
            assert np.array_equal(result, reference[[0, -1]])


def test_the_shared_index_carries_what_a_reader_learnt(media, frames, tmp_path):
    import shutil

    name = "damaged_h264_key.mp4"
    clean, _ = frames(name)
    shutil.copy(media.path(name), tmp_path / name)
    with make_patcher(None, tmp_path) as patcher:
        with patcher.open_video_reader("train", name, H, W, num_threads=2) as first:
            with pytest.raises(errors.FluxonFsDamagedStreamError):
                first.read_frames_numpy([30])
        patcher.client.close()  # the index's background write is done
    with make_patcher(None, tmp_path) as patcher:
        with patcher.open_video_reader("train", name, H, W) as second:
            assert second.last_stats is None
            with pytest.raises(errors.FluxonFsDamagedStreamError):
                second.read_frames_numpy([30])
            assert second.last_stats is None or second.last_stats.frames_decoded == 0
            frames_ok = second.read_frames_numpy([0, 60])
            assert np.array_equal(frames_ok, clean[[0, 60]])


# ---- damage no decoder reports: bytes overwritten inside a slice ----

# Reference P-frames of the second GOP (decode positions), each damaged alone:
# 24 bytes in the middle of its entropy-coded data. The decoders parse most
# such slices to their end without an error: the picture is then wrong (and
# so is every frame decoded from it) but the same on every read. HEVC's can
# instead end the slice early and leave the rest of the picture unwritten,
# with no error, no flag and no log line (packet 29 of hevc.mkv does): before
# that was seen, such a frame, and the B-frames decoded after it, showed what
# the pooled buffer last held, so the same index returned other bytes alone,
# in a batch and with two threads.
MIDDLE_DAMAGE = [("hevc.mkv", 25), ("hevc.mkv", 29), ("hevc.mkv", 33),
                 ("h264_moov_end.mp4", 29), ("h264_moov_end.mp4", 33),
                 ("h264_moov_end.mp4", 37), ("vp9.webm", 27), ("vp9.webm", 33),
                 ("vp9.webm", 41)]


@pytest.fixture(scope="module")
def middle_damaged(media, tmp_path_factory):
    """(name, packet) -> (the damaged copy, the undamaged file's frames)."""
    root = tmp_path_factory.mktemp("middle_damage")
    made = {}

    def get(name, packet):
        if (name, packet) not in made:
            source = media.path(name if name != "hevc.mkv" else "hevc.mp4")
            if name == "hevc.mkv":  # the same HEVC stream in Matroska
                mkv = root / name
                if not mkv.exists():
                    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(source),
                                    "-c", "copy", str(mkv)], check=True)
                source = mkv
            path = root / f"mid{packet}_{name}"
            damage_packets(source, path, (packet,), middle=24)
            made[name, packet] = (path, reference_frames(source, H, W))
        return made[name, packet]

    return get


def read_alone(path, threads, i):
    """Frame i read alone by a new reader: its bytes, or "refused"."""
    with fv.LocalVideoReader(path, threads) as reader:
        try:
            return reader.read_frames_numpy([i], H, W)[0][0]
        except errors.FluxonFsDamagedStreamError:
            return "refused"


@pytest.mark.parametrize("name,packet", MIDDLE_DAMAGE)
def test_damage_inside_a_slice_gives_each_index_one_answer(middle_damaged, name, packet):
    """Every frame around the damage, read alone, in batches (in two orders, with
    a far frame) and at 1 and 2 threads, is the same bytes every time or the
    damaged-stream error every time; a frame whose decode does not pass the
    damaged packet is the undamaged file's."""
    path, clean = middle_damaged(name, packet)
    with fv.LocalVideoReader(path) as reader:
        keys, own_packets = reader.index.frame_key, reader.index.frame_dec
    own = int(np.flatnonzero(own_packets == packet)[0])
    gop = np.flatnonzero(keys == keys[own])
    sampled = list(range(max(int(gop[0]) - 2, 0), min(int(gop[-1]) + 4, len(clean))))
    depends = {i: keys[i] <= packet <= own_packets[i] for i in sampled}
    answers = {i: [read_alone(path, threads, i) for threads in (1, 2)] for i in sampled}
    refused = sorted(i for i, a in answers.items() if any(isinstance(v, str) for v in a))
    for i, (one, two) in answers.items():
        if i in refused:
            assert isinstance(one, str) and isinstance(two, str), (i, "refused at one count only")
            assert depends[i], i
        else:
            assert np.array_equal(one, two), (i, "1 and 2 threads differ")
            if not depends[i]:
                assert np.array_equal(one, clean[i]), i
    readable = [i for i in sampled if i not in refused]
    far = len(clean) - 1 if len(clean) - 1 not in sampled else 0
    rng = np.random.default_rng(packet)
    for threads in (1, 2):
        with fv.LocalVideoReader(path, threads) as reader:
            for order in (readable, readable[::-1], list(rng.permutation(readable)) + [far]):
                order = [int(i) for i in order]
                batch = reader.read_frames_numpy(order, H, W)[0]
                for row, i in enumerate(order):
                    want = answers[i][0] if i in answers else clean[i]
                    assert np.array_equal(batch[row], want), (threads, i, "batch differs")
            for i in refused[:1] + refused[-1:]:
                with pytest.raises(errors.FluxonFsDamagedStreamError, match=f"packet {packet} "):
                    reader.read_frames_numpy([far, i], H, W)


def test_a_picture_the_decoder_left_unfinished_is_refused(middle_damaged):
    """The HEVC decoder ends packet 29's slice early and outputs the picture
    without the rest: that is damage, named as such, and every frame whose decode
    passes it (the B-frames shown before it too) is refused, at 1 and 2 threads,
    on the indexed and the sequential path."""
    path, _ = middle_damaged("hevc.mkv", 29)
    for threads in (1, 2):
        with fv.LocalVideoReader(path, threads) as reader:
            own = int(np.flatnonzero(reader.index.frame_dec == 29)[0])
            shown_before = [i for i in range(own) if reader.index.frame_dec[i] > 29]
            assert shown_before  # B-frames decoded after it, shown before it
            for i in (shown_before[0], own, own + 1):
                with pytest.raises(errors.FluxonFsDamagedStreamError,
                                   match=r"packet 29 in decode order .*unwritten"):
                    reader.read_frames_numpy([i], H, W)
        # The sequential path too: a B-frame shown before the picture is not
        # returned before that picture came out and was seen.
        with pytest.raises(errors.FluxonFsDamagedStreamError, match="unwritten"):
            fv.decode_local_frames(path, [shown_before[0]], H, W, threads, seek=False)


# ---- packets that are not frames ----

def ffprobe_frames(path):
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_frames",
         "-show_entries", "frame=key_frame,best_effort_timestamp_time", "-of", "json", str(path)],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["frames"]


def test_vp8_invisible_frames_are_not_counted(media):
    path = media.path("vp8_altref.webm")
    probed = ffprobe_frames(path)
    packets = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_packets",
         "-show_entries", "stream=nb_read_packets", "-of", "csv=p=0", str(path)],
        check=True, capture_output=True, text=True).stdout
    assert int(packets) > len(probed)  # the file does hold invisible frames
    times = np.asarray([float(f["best_effort_timestamp_time"]) for f in probed])
    keys = tuple(i for i, f in enumerate(probed) if f["key_frame"])
    reference = reference_frames(path, H, W)
    with make_patcher(None, path.parent) as patcher:
        with patcher.open_video_reader("train", path.name, H, W) as reader:
            assert len(reader) == reader.metadata.num_frames == len(probed) == len(reference)
            assert reader.metadata.keyframe_indices == keys
            np.testing.assert_allclose(reader.timestamps_s(), times, atol=1e-6)
            probes = [times[0], times[len(times) // 2] + 1e-3, times[-1]]
            assert reader.indices_at_times(probes) == [0, len(times) // 2, len(times) - 1]
            for i in (0, keys[-1], len(reference) - 1):
                assert np.array_equal(reader.read_frames_numpy([i])[0], reference[i])
            order = list(range(len(reference)))[::-1]
            assert np.array_equal(reader.read_frames_numpy(order), reference[order])
            assert reader.last_stats.path == "indexed"


def test_cli_read_fails_on_damage_or_conceals(media, frames, tmp_path):
    import shutil

    from tests.helpers import IDENTITIES
    from tests.test_ops import cli

    name = "damaged_h264_ref.mp4"
    clean, reference = frames(name)
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(media.path(name), root / name)
    identities = "\n".join(f'{n} = "{t}"' for n, t in IDENTITIES.items())
    config = tmp_path / "fluxon.toml"
    config.write_text(f'[identities]\n{identities}\n\n[[exports]]\nname = "data"\n'
                      f'root = "{root}"\nallow = ["alice"]\n')
    args = ("read", f"data:{name}", "--frames", "0,10", "--size", f"{W}x{H}", "--format", "npy",
            "--json")
    refused = cli(*args, "--out", str(tmp_path / "a"), config=config, check=False)
    assert refused.returncode == 1 and "depends on damaged data" in refused.stderr
    assert "Traceback" not in refused.stderr
    rows = [json.loads(line) for line in cli(*args, "--out", str(tmp_path / "b"), "--on-damage",
                                              "conceal", config=config).stdout.splitlines()]
    for row in rows:
        assert np.array_equal(np.load(row["file"]), reference[row["frame"]])
    assert not np.array_equal(reference[10], clean[10])  # the policies do differ there


@pytest.mark.parametrize("on_damage", ["error", "conceal"])
def test_read_many_groups_keep_each_policys_frames(media, frames, on_damage):
    name = "damaged_h264_key.mp4"  # GOP 24..47 depends on the damaged keyframe
    clean, reference = frames(name)
    expected = clean if on_damage == "error" else reference
    with make_patcher(None, media.path(name).parent) as patcher:
        with patcher.open_video_reader_pool(on_damage=on_damage) as pool:
            requests = [fv.FluxonFsVideoReadRequest("train", name, H, W, threads, tuple(ix))
                        for threads, ix in ((1, [50, 3]), (1, [10, 60, 3]), (2, [0, 70]))]
            results = pool.read_many_numpy_with_stats(requests)
            for request, result in zip(requests, results):
                assert np.array_equal(result.frames, expected[list(request.indices)])
            damaged = [fv.FluxonFsVideoReadRequest("train", name, H, W, 1, (3, 30))]
            if on_damage == "error":
                with pytest.raises(errors.FluxonFsDamagedStreamError):
                    pool.read_many_numpy_with_stats(damaged)
            else:
                result = pool.read_many_numpy_with_stats(damaged)[0]
                assert np.array_equal(result.frames, reference[[3, 30]])


# ---- a timestamp the decoder contradicts ----

LIAR = "lying_pts_h264.mp4"


@pytest.mark.parametrize("threads", [1, 2])
def test_a_lying_pts_never_misplaces_a_frame_alone_or_in_a_batch(media, threads):
    """One P-frame's composition offset says it is shown right after it is
    decoded; the decoder (by its picture order) still shows it frames later.
    Whatever the read's shape, frame i is the CLI's i-th output or an error:
    a batch whose last target lies far on once skipped the non-reference
    frames that would show the lie, and returned the frame next to the one
    asked for."""
    path = media.path(LIAR)
    expected = reference_frames(path, H, W, threads=1)
    last = expected.shape[0] - 1
    read = 0
    for i in range(8, 28):
        for indices in ([i], [i, last], [last, i - 3, i]):
            with fv.LocalVideoReader(path, threads) as reader:
                try:
                    got = reader.read_frames_numpy(indices, H, W)[0]
                except errors.FluxonFsError:
                    continue
            read += 1
            assert np.array_equal(got[indices.index(i)], expected[i]), (i, indices)
    assert read > 30  # the lie costs the fast path, not the frames


def _drop_a_cluster_timestamp(path, out):
    """The second Matroska cluster's Timestamp element turned into a Void one (a
    damage the demuxer reads as the cluster starting at 0: its frames' pts repeat
    the first cluster's)."""
    data = bytearray(path.read_bytes())
    cluster = data.index(b"\x1f\x43\xb6\x75", data.index(b"\x1f\x43\xb6\x75") + 4)
    at = cluster + 4 + (9 - data[cluster + 4].bit_length())  # after the size's vint
    if data[at] == 0xBF:  # a CRC-32 element first (6 bytes)
        at += 6
    assert data[at] == 0xE7, "the cluster's first element is not its Timestamp"
    data[at] = 0xEC
    out.write_bytes(bytes(data))


def test_damaged_timestamps_never_time_another_frame(tmp_path):
    """Frames of a cluster whose timestamp is lost get pts 0.. again: the sorted
    pts are not the times of the frames the decoder outputs. By default times
    raise a named error (reads by index stay exact); on_damage="conceal" gives
    each frame the time the decoder gives it (ffprobe's best effort timestamp)."""
    good, path = tmp_path / "good.mkv", tmp_path / "lost_cluster_time.mkv"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                    f"testsrc2=size={W}x{H}:rate=30", "-t", "4", "-c:v", "libx264", "-g", "30",
                    "-bf", "2", "-cluster_time_limit", "1000", str(good)], check=True)
    _drop_a_cluster_timestamp(good, path)
    expected = reference_frames(path, H, W, threads=1)
    cli_times = np.array([float(f.get("best_effort_timestamp_time", "nan"))
                          for f in ffprobe_frames(path)])
    assert (np.diff(cli_times) < 0).any()  # the damage shows in the CLI's times
    with fv.open_video(path, H, W) as reader:
        assert len(reader) == expected.shape[0]
        assert 0 <= reader.metadata.begin_stream_seconds < reader.metadata.end_stream_seconds < 10
        for call in (reader.timestamps_s, lambda: reader.indices_at_times([0.5]),
                     lambda: reader.get_frames_at([3])):
            with pytest.raises(errors.FluxonFsDamagedStreamError, match="lost_cluster_time.mkv"):
                call()
        for i in (0, 29, 30, 45, expected.shape[0] - 1):
            np.testing.assert_array_equal(reader.read_frames_numpy([i])[0], expected[i])
    with fv.open_video(path, H, W, on_damage="conceal") as reader:
        times = reader.timestamps_s()
        # Where the decoder outputs a frame with no time at all, ffprobe shows its
        # own guess or none; every time the decoder does give is the CLI's.
        known = np.isfinite(times)
        assert known.sum() >= times.size - 2
        np.testing.assert_allclose(times[known], cli_times[known], atol=1e-9)
        chosen = [int(i) for i in np.flatnonzero(known)[[0, 29, 35, -1]]]
        batch = reader.get_frames_at(chosen)
        np.testing.assert_array_equal(batch.data, expected[chosen])
        np.testing.assert_allclose(batch.pts_seconds, cli_times[chosen], atol=1e-9)
        with pytest.raises(errors.FluxonFsDamagedStreamError, match="do not increase"):
            reader.indices_at_times([0.5])  # two frames carry 0.5 s: neither is "the" one
