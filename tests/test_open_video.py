"""One reader for any source: fluxon_video.open_video on a path, bytes, a file
object and a range source reads as a FluxonFS reader does: the same frames
(the ffmpeg CLI's), the same metadata and times, the same errors."""

from __future__ import annotations

import io
import os
import shutil

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from tests.helpers import make_patcher
from tests.media import ffprobe_frame_count

pytest.importorskip("fluxon_video._decode")

H, W = 36, 64
CLIPS = ["h264_moov_end.mp4", "hevc.mp4", "vp9.webm", "h264_bframes.mkv"]
KINDS = ["path", "bytes", "file object", "range source"]


def source_of(kind: str, path):
    data = path.read_bytes()
    return {"path": lambda: str(path), "bytes": lambda: data,
            "file object": lambda: io.BytesIO(data),
            "range source": lambda: fv.BytesRangeSource(data, path.name)}[kind]()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", CLIPS)
def test_every_source_reads_the_clis_frames(media, name, kind):
    path = media.path(name)
    expected = media.reference(name, H, W)
    indices = [0, 5, len(expected) // 2, len(expected) - 1]
    with fv.open_video(source_of(kind, path), H, W) as reader:
        assert len(reader) == len(expected) == ffprobe_frame_count(path)
        assert np.array_equal(reader.read_frames_numpy(indices), expected[indices])
        assert np.array_equal(reader.read_frames_numpy([-1]), expected[[-1]])


@pytest.mark.parametrize("name", CLIPS)
def test_metadata_and_times_are_the_fluxonfs_readers(media, name, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(media.path(name), root / name)
    with make_patcher(None, root) as patcher, \
            patcher.open_video_reader("train", name) as remote, \
            fv.open_video(root / name) as local:
        ignore = {"size_bytes", "mtime_ns"}
        assert ({k: v for k, v in vars(local.metadata).items() if k not in ignore}
                == {k: v for k, v in vars(remote.metadata).items() if k not in ignore})
        assert np.array_equal(local.timestamps_s(), remote.timestamps_s())
        times = [0.0, 0.3, 1.0]
        assert local.indices_at_times(times) == remote.indices_at_times(times)
        assert (local.height, local.width) == (remote.height, remote.width)  # native size


def test_errors_are_the_same_classes(media, tmp_path):
    with pytest.raises(errors.FluxonFsNotFoundError):
        fv.open_video(tmp_path / "missing.mp4")
    with pytest.raises(errors.FluxonFsBadRequestError, match="video source"):
        fv.open_video(12345)
    with pytest.raises(errors.FluxonFsConfigError):
        fv.open_video(media.path("hevc.mp4"), 0, W)
    with fv.open_video(np.random.default_rng(1).bytes(50_000), H, W) as garbage:
        with pytest.raises(errors.FluxonFsDecodeError):
            garbage.read_frames_numpy([0])
    reader = fv.open_video(media.path("hevc.mp4"), H, W)
    with pytest.raises(errors.FluxonFsFrameIndexError):
        reader.read_frames_numpy([10_000])
    reader.close()
    reader.close()
    with pytest.raises(errors.FluxonFsClosedError):
        reader.read_frames_numpy([0])


@pytest.mark.timeout(60)
def test_a_path_that_is_not_a_regular_file_is_refused_at_once(tmp_path):
    """A FIFO (whose open would wait for a writer), a directory and a device are
    not videos, a symlink loop is nothing: every local entry point refuses them,
    naming the path, promptly."""
    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.mp4"
    loop.symlink_to(loop)
    with pytest.raises(errors.FluxonFsNotFoundError, match="loop.mp4: cannot be opened "
                                                           r"\(Too many levels of symbolic links"):
        fv.open_video(loop, H, W)
    for path in (fifo, tmp_path, "/dev/null"):
        for open_it in (lambda p: fv.open_video(p, H, W), fv.LocalVideoReader,
                        lambda p: fv.decode_local_frames(str(p), [0], H, W, 1)):
            with pytest.raises(errors.FluxonFsNotFoundError,
                               match=f"{path}: not a regular file"):
                open_it(path)


def test_a_file_object_that_cannot_seek_is_refused_naming_it():
    read_end, write_end = os.pipe()
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        with pytest.raises(errors.FluxonFsBadRequestError, match="is not seekable"):
            fv.open_video(pipe)

    class Refusing(io.RawIOBase):
        name = "refusing.mp4"

        def seekable(self) -> bool:
            return True

        def seek(self, offset: int, whence: int = 0) -> int:
            raise OSError("seek refused")
    with pytest.raises(errors.FluxonFsBadRequestError, match="refusing.mp4: cannot seek .*seek "
                                                            "refused"):
        fv.open_video(Refusing())


def test_a_path_the_process_may_not_read_is_a_permission_error(media, tmp_path, monkeypatch):
    """Tests run as root, whom no mode bits stop: the refusal is injected at os.open."""
    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(errors.FluxonFsPermissionError, match="hevc.mp4: permission denied"):
        fv.open_video(media.path("hevc.mp4"), H, W)


def test_a_replaced_local_file_fails_reads(media, tmp_path):
    path = tmp_path / "clip.mp4"
    shutil.copy(media.path("h264_moov_end.mp4"), path)
    with fv.open_video(path, H, W) as reader:
        reader.read_frames_numpy([0])
        shutil.copy(media.path("h264_faststart.mp4"), tmp_path / "new.mp4")
        os.replace(tmp_path / "new.mp4", path)
        with pytest.raises(errors.FluxonFsFileChangedError):
            reader.read_frames_numpy([1])


def test_a_path_reader_closes_its_file_and_a_given_object_stays_open(media):
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    before = fds()
    with fv.open_video(media.path("hevc.mp4"), H, W) as reader:
        reader.read_frames_numpy([0])
    assert fds() == before
    handle = open(media.path("hevc.mp4"), "rb")
    with fv.open_video(handle, H, W) as reader:
        reader.read_frames_numpy([3])
    assert not handle.closed  # the caller's object
    handle.close()


def test_a_local_file_opened_again_loads_its_index_from_the_process(media, tmp_path):
    """The second open of a path takes the index the first one built (no scan);
    a file rewritten in place is another version and is scanned again; bytes
    and file objects have no identity to key on and are always scanned."""
    first, second = media.path("h264_bframes.mkv"), media.path("vp9.webm")
    path = tmp_path / "clip.mkv"
    shutil.copyfile(first, path)
    expected = media.reference("h264_bframes.mkv", H, W)
    picks = [0, 7, len(expected) - 1]
    for source in ("scan", "process", "process"):
        with fv.open_video(path, H, W) as reader:
            np.testing.assert_array_equal(reader.read_frames_numpy(picks), expected[picks])
            assert reader.last_stats.index_source == source
            assert len(reader) == len(expected)
    shutil.copyfile(second, tmp_path / "other.webm")
    os.replace(tmp_path / "other.webm", path)  # the same path, another file
    expected = media.reference("vp9.webm", H, W)
    with fv.open_video(path, H, W) as reader:
        assert reader.last_stats is None and len(reader) == len(expected)
        np.testing.assert_array_equal(reader.read_frames_numpy([3]), expected[[3]])
        assert reader.last_stats.index_source == "scan"
    data = path.read_bytes()
    for _ in range(2):
        with fv.open_video(data, H, W) as reader:
            reader.read_frames_numpy([0])
            assert reader.last_stats.index_source == "scan"


def test_num_threads_auto_is_one_thread_per_core_and_reads_the_same_frames(media, tmp_path):
    from fluxon_video.validation import MAX_AUTO_THREADS

    cores = max(1, min(len(os.sched_getaffinity(0)), MAX_AUTO_THREADS))
    name = "h264_moov_end.mp4"
    expected = media.reference(name, H, W)
    indices = [0, 5, len(expected) // 2, len(expected) - 1]
    with fv.open_video(media.path(name), H, W, num_threads="auto") as reader:
        assert reader.num_threads == cores
        assert np.array_equal(reader.read_frames_numpy(indices), expected[indices])
    frames, _ = fv.decode_local_frames(media.path(name), indices, H, W, num_threads="auto")
    assert np.array_equal(frames, expected[indices])
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(media.path(name), root / name)
    with make_patcher(None, root) as patcher:
        request = fv.FluxonFsVideoReadRequest("train", name, H, W, "auto", (0, 5))
        assert request.num_threads == cores
        with patcher.open_video_reader("train", name, H, W, "auto") as remote:
            assert remote.num_threads == cores
    for bad in ("all", 0, -1, 2.0):
        with pytest.raises(errors.FluxonFsConfigError, match="num_threads must be a positive"):
            fv.open_video(media.path(name), H, W, num_threads=bad)


def test_dir_shows_the_public_api():
    """dir(fluxon_video) lists what users call, not the submodules the import
    loaded; every name listed exists."""
    import fluxon_video

    names = dir(fluxon_video)
    assert "open_video" in names and "FluxonFsPatcher" in names and "FrameBatch" in names
    assert not {"native", "opening", "reader", "fs", "logs", "metadata"} & set(names)
    assert all(hasattr(fluxon_video, name) for name in names)


def test_errors_name_their_file_as_fields(media, tmp_path):
    """Besides the message, an error about a file carries export and relpath (or
    the local path) and the reason, as PyAV's errors carry filename and errno."""
    missing = tmp_path / "missing.mp4"
    with pytest.raises(errors.FluxonFsNotFoundError) as local:
        fv.open_video(missing)
    assert (local.value.path, local.value.export, local.value.relpath) == (str(missing), None, None)
    assert local.value.reason == "no such file"
    shutil.copy(media.path("h264_faststart.mp4"), tmp_path / "a.mp4")
    with make_patcher(None, tmp_path) as patcher:
        with pytest.raises(errors.FluxonFsNotFoundError) as remote:
            patcher.open_video_reader("train", "sub/none.mp4", 36, 64)
        assert (remote.value.export, remote.value.relpath, remote.value.path) == (
            "train", "sub/none.mp4", None)
        assert remote.value.reason and "train:" not in remote.value.reason
        with patcher.open_video_reader("train", "a.mp4", 36, 64) as reader:
            with pytest.raises(errors.FluxonFsFrameIndexError) as index:
                reader.read_frames_numpy([10**6])
            assert (index.value.export, index.value.relpath) == ("train", "a.mp4")
            assert "out of range" in index.value.reason
    with fv.open_video(media.path("h264_faststart.mp4").read_bytes()) as in_memory:
        with pytest.raises(errors.FluxonFsFrameIndexError) as unnamed:
            in_memory.read_frames_numpy([10**6])
        assert unnamed.value.path is None and "out of range" in unnamed.value.reason


def test_the_patchers_calls_about_a_file_name_it_as_fields(media, tmp_path):
    """Stats, range reads, warming, times and listings outside a reader carry
    the export and relpath too (the export alone for a listing)."""
    shutil.copy(media.path("h264_faststart.mp4"), tmp_path / "a.mp4")
    with make_patcher(None, tmp_path) as patcher:
        calls = {"file_version": lambda: patcher.file_version("train", "gone.mp4"),
                 "read_range": lambda: patcher.read_range("train", "gone.mp4", 0, 10),
                 "warm_file": lambda: patcher.warm_file("train", "gone.mp4"),
                 "video_timestamps_s": lambda: patcher.video_timestamps_s("train", "gone.mp4")}
        for name, call in calls.items():
            with pytest.raises(errors.FluxonFsNotFoundError) as missing:
                call()
            assert (missing.value.export, missing.value.relpath) == ("train", "gone.mp4"), name
            assert missing.value.reason and "train:" not in missing.value.reason, name
        with pytest.raises(errors.FluxonFsError) as listing:
            list(patcher.list_files("nosuch"))
        assert listing.value.export == "nosuch" and listing.value.reason
