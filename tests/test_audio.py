"""Audio on the frames' clock, checked against the ffmpeg CLI.

Oracles: the CLI's whole-stream decode (``-map 0:a:0 -f f32le``, and with
``-af aresample=R -ac C`` for converted audio), and ffprobe's pts of the
stream's first decoded audio frame, which places CLI sample j at
``first + j / rate``. Frames are checked against the CLI's frames and
ffprobe's frame times, so a clip's frames and samples line up with the CLI's
to the sample.
"""

from __future__ import annotations

import json
import math
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video.errors import (FluxonFsAudioRangeError, FluxonFsConfigError,
                                 FluxonFsNoAudioStreamError)
from fluxon_video.testing import AgentProcess
from tests.helpers import RaisingSource, agent_config_text, make_patcher
from tests.media import reference_frames

LAVFI_VIDEO = ["-f", "lavfi", "-i", "testsrc2=size=96x64:rate=25"]
H264 = ["-c:v", "libx264", "-bf", "2", "-g", "25"]


def tone(rate: int, layout: str = "mono", seconds: float = 4, offset: float | None = None) -> list[str]:
    """A lavfi audio input: a tone plus noise (noise makes AAC code bands as noise)."""
    source = (f"sine=f=330:r={rate},aformat=channel_layouts={layout}[s];"
              f"anoisesrc=r={rate}:a=0.05,aformat=channel_layouts={layout}[n];"
              f"[s][n]amix=normalize=0,atrim=0:{seconds}")
    return [*(["-itsoffset", str(offset)] if offset else []), "-f", "lavfi", "-i", source]


# name: ffmpeg arguments after the inputs' common prefix (made once per session)
MEDIA: dict[str, list[str]] = {
    "aac_stereo.mp4": [*LAVFI_VIDEO, *tone(44100, "stereo"), "-t", "4", *H264, "-c:a", "aac",
                       "-movflags", "+faststart"],
    "opus_stereo.webm": [*LAVFI_VIDEO, *tone(48000, "stereo"), "-t", "4", "-c:v", "libvpx-vp9",
                         "-deadline", "realtime", "-c:a", "libopus"],
    "mp3_mono.mkv": [*LAVFI_VIDEO, *tone(22050), "-t", "4", *H264, "-c:a", "libmp3lame"],
    "pcm_8k.mov": [*LAVFI_VIDEO, *tone(8000), "-t", "4", *H264, "-c:a", "pcm_s16le"],
    "flac_51.mkv": [*LAVFI_VIDEO, *tone(32000, "5.1"), "-t", "4", *H264, "-c:a", "flac"],
    "aac_51_48k.mp4": [*LAVFI_VIDEO, *tone(48000, "5.1"), "-t", "4", *H264, "-c:a", "aac"],
    # audio starting after the video (0.5 s) and shorter than it (ends at 2.5 s)
    "late_short_audio.mp4": [*LAVFI_VIDEO, *tone(16000, seconds=2, offset=0.5), "-t", "4",
                             *H264, "-c:a", "aac"],
    # audio starting before the video (the video 0.6 s later)
    "early_audio.mkv": ["-itsoffset", "0.6", *LAVFI_VIDEO, *tone(48000), "-t", "3", *H264,
                        "-c:a", "libvorbis"],
    # other containers whose demuxer the audio shares with the frames
    "mp3_in.avi": [*LAVFI_VIDEO, *tone(44100), "-t", "4", "-c:v", "mpeg4", "-c:a", "libmp3lame"],
    "mp3_in.flv": [*LAVFI_VIDEO, *tone(44100), "-t", "4", "-c:v", "flv1", "-c:a", "libmp3lame"],
    # where the audio keeps a demuxer of its own beside the frames'
    "aac_in.ts": [*LAVFI_VIDEO, *tone(48000), "-t", "4", *H264, "-c:a", "aac"],
    "m4a_aac.m4a": [*tone(24000, "stereo"), "-c:a", "aac"],
    "mp3_only.mp3": [*tone(44100, "stereo"), "-c:a", "libmp3lame"],
    "wav_only.wav": [*tone(11025), "-c:a", "pcm_s16le"],
    "flac_only.flac": [*tone(16000), "-c:a", "flac"],
    "opus_only.ogg": [*tone(48000, "stereo"), "-c:a", "libopus"],
}
# Derived by stream copy: an MP4 cut at a non-keyframe, so its edit list
# starts both streams inside their first packets (video packets stamped from
# -1.28 s, audio from before 0 s with its priming samples).
DERIVED = {"edit_list.mp4": ("aac_stereo.mp4", ["-ss", "1.3"], ["-c", "copy"])}
AUDIO_ONLY = ("m4a_aac.m4a", "mp3_only.mp3", "wav_only.wav", "flac_only.flac", "opus_only.ogg")
WITH_VIDEO = tuple(n for n in [*MEDIA, *DERIVED] if n not in AUDIO_ONLY)


@pytest.fixture(scope="session")
def audio_media(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("audio_media")
    cli = ["ffmpeg", "-nostdin", "-v", "error", "-y"]
    for name, args in MEDIA.items():
        subprocess.run([*cli, *args, str(root / name)], check=True)
    for name, (source, before, after) in DERIVED.items():
        subprocess.run([*cli, *before, "-i", str(root / source), *after, str(root / name)],
                       check=True)
    return root


def probe(path: Path, stream: str, entries: str) -> dict:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", stream, "-show_entries",
                          entries, "-of", "json", str(path)], capture_output=True, check=True)
    return json.loads(out.stdout)


class CliAudio:
    """The CLI's decode of a file's first audio stream, and where its samples lie."""

    def __init__(self, path: Path, *filters: str) -> None:
        info = probe(path, "a:0", "stream=time_base,channels,sample_rate")["streams"][0]
        first = next(f for f in probe(path, "a:0", "frame=pts")["frames"] if "pts" in f)
        self.first = Fraction(first["pts"]) * Fraction(info["time_base"])
        self.rate = int(info["sample_rate"])
        channels = int(info["channels"])
        for f in filters:
            if f.startswith("-ac"):
                channels = int(f.split()[1])
            if f.startswith("aresample="):
                self.rate = int(f.split("=")[1])
        args = [a for f in filters for a in (["-af", f] if f.startswith("aresample") else f.split())]
        raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-map", "0:a:0", *args,
                              "-f", "f32le", "-"], capture_output=True, check=True).stdout
        self.samples = np.frombuffer(raw, np.float32).reshape(-1, channels).T

    def span(self, start_s: float, end_s: float) -> tuple[int, np.ndarray]:
        """(first position, samples) of [start_s, end_s), zeros outside the stream."""
        j0 = math.ceil((Fraction(start_s) - self.first) * self.rate - Fraction(1, 10**6))
        j1 = max(math.ceil((Fraction(end_s) - self.first) * self.rate - Fraction(1, 10**6)), j0)
        out = np.zeros((self.samples.shape[0], j1 - j0), np.float32)
        lo, hi = max(j0, 0), min(j1, self.samples.shape[1])
        if hi > lo:
            out[:, lo - j0:hi - j0] = self.samples[:, lo:hi]
        return j0, out


def video_times(path: Path) -> np.ndarray:
    """ffprobe's presentation time of every shown frame, in display order."""
    info = probe(path, "v:0", "stream=time_base")["streams"][0]
    frames = probe(path, "v:0", "frame=pts,best_effort_timestamp")["frames"]
    base = Fraction(info["time_base"])
    return np.array(sorted(float(int(f.get("pts", f.get("best_effort_timestamp"))) * base)
                           for f in frames))


@pytest.mark.parametrize("name", WITH_VIDEO)
def test_a_clip_is_the_clis_frames_and_samples_on_one_clock(audio_media, name):
    path = audio_media / name
    cli = CliAudio(path)
    times = video_times(path)
    with fv.open_video(path) as reader:
        np.testing.assert_allclose(reader.timestamps_s(), times, atol=1e-9)
        begin, end = reader.metadata.begin_stream_seconds, reader.metadata.end_stream_seconds
        for start_s, stop_s in [(begin, begin + 0.7), (begin + 1.13, begin + 2.0),
                                (end - 0.61, end)]:
            clip = reader.get_clip_played_in_range(start_s, stop_s)
            j0, want = cli.span(start_s, stop_s)
            assert clip.sample_rate == cli.rate
            assert np.array_equal(clip.audio.data, want), (name, start_s, stop_s)
            assert clip.audio_start_s == pytest.approx(float(cli.first + Fraction(j0, cli.rate)),
                                                       abs=1e-9)
            assert -1e-9 <= clip.audio_start_s - start_s < 1 / cli.rate + 1e-9
            shown = np.flatnonzero((times >= start_s) & (times < stop_s))
            np.testing.assert_array_equal(clip.frames.indices, shown)
            np.testing.assert_allclose(clip.frames.pts_seconds, times[shown], atol=1e-9)
            reference = reference_frames(path, reader.height, reader.width)
            assert np.array_equal(clip.frames.data, reference[shown])


@pytest.mark.parametrize("name", WITH_VIDEO)
def test_frames_and_audio_take_turns_on_one_demuxer(audio_media, name):
    """In a file with video the audio has no demuxer of its own (but in MPEG-TS): it
    reads through the frames'. Clips read in order continue the audio decode across
    the frames' reads (the turn finds its packet again, nothing is decoded twice);
    clips read out of order restart it; every clip stays the CLI's frames and samples."""
    path = audio_media / name
    cli = CliAudio(path)
    times = video_times(path)
    with fv.open_video(path, height=32, width=48) as reader:
        reference = reference_frames(path, reader.height, reader.width)
        trusted = reader._decoder.index.trusted  # FLV's never is: it reads sequentially
        # from where both streams have begun (before the audio's first sample a
        # read has nothing to continue: zeros, then the decode from the start)
        base = max(reader.metadata.begin_stream_seconds, float(cli.first))
        in_order = [(base + 0.25 * k, base + 0.25 * (k + 1)) for k in range(6)]
        out_of_order = [(base + 1.7, base + 1.9), (base + 0.1, base + 0.4),
                        (base + 1.0, base + 1.1)]
        for k, (start_s, stop_s) in enumerate(in_order + out_of_order):
            clip = reader.get_clip_played_in_range(start_s, stop_s)
            assert np.array_equal(clip.audio.data, cli.span(start_s, stop_s)[1]), (name, k)
            # a frame within tolerance_s (1e-4 s) of a bound counts as at it (in at
            # the start, out at the stop): base + 0.4 lands a float's hair (or, in
            # FLV's milliseconds, 11 us) after a frame's time, and that frame is out
            shown = np.flatnonzero((times >= start_s - 1e-4) & (times < stop_s - 1e-4))
            assert np.array_equal(clip.frames.data, reference[shown]), (name, k)
            decoder = reader._audio._decoder
            shared = not name.endswith(".ts")  # MPEG-TS: the audio's own demuxer
            assert decoder.shares_demuxer == shared
            if k == len(in_order) - 1:
                # every clip after the first continued where the last one stopped
                assert (decoder.resumed, decoder.lost_place, decoder.started) == (
                    len(in_order) - 1 if shared else 0, 0, 0)
        # a clip behind the decoder seeks to a pre-roll or decodes from the start
        assert decoder.sought + decoder.started >= 1
        # and the frames never disagreed with the index (a decoder fed packets
        # twice after a turn would: the path then falls back to the sequential one)
        assert reader._decoder.index.trusted == trusted


@pytest.mark.parametrize("name", ["aac_stereo.mp4", "opus_stereo.webm", "edit_list.mp4",
                                  "early_audio.mkv", "mp3_in.avi"])
def test_random_mixes_of_frame_audio_and_clip_reads_stay_the_clis(audio_media, name):
    """Frames by index and by time, audio alone and clips, in a seeded random
    order on one reader (2 frame threads): every turn on the shared demuxer,
    forward or back, near or far, leaves both decodes giving the CLI's output."""
    path = audio_media / name
    cli = CliAudio(path)
    rng = np.random.default_rng(20261202)
    with fv.open_video(path, height=32, width=48, num_threads=2) as reader:
        reference = reference_frames(path, reader.height, reader.width)
        times = reader.timestamps_s()
        lo, hi = max(float(times[0]), float(cli.first)), float(times[-1])
        for step in range(40):
            start_s = float(rng.uniform(lo, hi - 0.5))
            stop_s = start_s + float(rng.uniform(0.05, 0.5))
            kind = step % 4 if step < 8 else int(rng.integers(4))
            if kind == 0:
                first = int(rng.integers(len(times) - 6))
                indices = sorted({first, first + 2, first + 5})
                assert np.array_equal(reader.get_frames_at(indices).data,
                                      reference[indices]), (name, step)
            elif kind == 1:
                shown = np.flatnonzero((times >= start_s) & (times < stop_s))
                assert np.array_equal(reader.get_frames_played_in_range(start_s, stop_s).data,
                                      reference[shown]), (name, step)
            elif kind == 2:
                got = reader.get_audio_played_in_range(start_s, stop_s)
                assert np.array_equal(got.data, cli.span(start_s, stop_s)[1]), (name, step)
            else:
                clip = reader.get_clip_played_in_range(start_s, stop_s)
                shown = np.flatnonzero((times >= start_s) & (times < stop_s))
                assert np.array_equal(clip.frames.data, reference[shown]), (name, step)
                assert np.array_equal(clip.audio.data, cli.span(start_s, stop_s)[1]), (name, step)
        assert reader._decoder.index.trusted  # no read fell back to the sequential path


@pytest.fixture(scope="module")
def large_media(tmp_path_factory) -> Path:
    """Files of several 256 KiB pages, so that a read fetches pages after the open."""
    root = tmp_path_factory.mktemp("large_audio_media")
    cli = ["ffmpeg", "-nostdin", "-v", "error", "-y"]
    subprocess.run([*cli, "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=25", *tone(44100),
                    "-t", "16", "-c:v", "libx264", "-preset", "ultrafast", "-g", "50",
                    "-c:a", "aac", str(root / "av.mp4")], check=True)
    subprocess.run([*cli, *tone(48000, "stereo", seconds=60), "-c:a", "aac", "-b:a", "256k",
                    str(root / "audio.m4a")], check=True)
    return root


@pytest.mark.parametrize("name,late", [("av.mp4", 12.0), ("audio.m4a", 50.0)])
def test_an_audio_read_that_failed_leaves_the_reader_reading(large_media, name, late):
    """A fetch that fails under an audio read raises the storage's error; once
    the storage answers again the next reads are the CLI's (the demuxer that
    failed, the frames' shared one or the audio's own, is opened anew)."""
    path = large_media / name
    cli = CliAudio(path)
    data = path.read_bytes()
    source = RaisingSource(data, fail_from=len(data))  # fails reads past fail_from
    with fv.open_video(source, height=36, width=64) as reader:
        assert np.array_equal(reader.get_audio_played_in_range(1.0, 1.5).data,
                              cli.span(1.0, 1.5)[1])
        source.fail_from = 0  # the storage is down
        with pytest.raises(RaisingSource.Boom, match="storage exploded"):
            reader.get_audio_played_in_range(late, late + 0.5)
        source.fail_from = len(data)  # and back
        for start_s in (late, late + 0.5, 2.0):
            clip = reader.get_clip_played_in_range(start_s, start_s + 0.5)
            assert np.array_equal(clip.audio.data, cli.span(start_s, start_s + 0.5)[1])
        if reader.has_video:
            times = reader.timestamps_s()
            shown = np.flatnonzero((times >= 2.0) & (times < 2.5))
            reference = reference_frames(path, reader.height, reader.width)
            assert np.array_equal(clip.frames.data, reference[shown])


def test_an_audio_reads_stats_count_the_pages_it_fetched(audio_media):
    with fv.open_video(audio_media / "aac_stereo.mp4", height=32, width=48) as reader:
        cache = reader._byte_source
        before = cache.stats()
        reader.get_audio_played_in_range(2.0, 3.5)
        after, stats = cache.stats(), reader.last_stats
        assert stats.bytes_fetched == after["bytes_fetched"] - before["bytes_fetched"] > 0
        assert stats.page_misses == after["page_misses"] - before["page_misses"]
        assert stats.page_hits == after["page_hits"] - before["page_hits"]


@pytest.mark.parametrize("name", ["aac_stereo.mp4", "opus_stereo.webm", "flac_51.mkv",
                                  "early_audio.mkv", "edit_list.mp4", "wav_only.wav"])
def test_resampled_and_remixed_audio_is_the_clis_aresample(audio_media, name):
    path = audio_media / name
    for rate, channels in [(16000, 1), (None, 1), (48000, 2)]:
        filters = ([f"aresample={rate}"] if rate else []) + [f"-ac {channels}"]
        cli = CliAudio(path, *filters)
        with fv.open_video(path) as reader:
            for start_s, stop_s in [(0.0, 0.4), (0.9, 2.2), (2.6, 3.0)]:
                got = reader.get_audio_played_in_range(start_s, stop_s, sample_rate=rate,
                                                       num_channels=channels)
                j0, want = cli.span(start_s, stop_s)
                assert got.sample_rate == cli.rate and got.num_channels == channels
                # Measured: bit-exact (0.0 max difference) on every file and span here.
                assert np.array_equal(got.data, want), (name, rate, channels, start_s)
                assert got.pts_seconds == pytest.approx(float(cli.first + Fraction(j0, cli.rate)))


@pytest.mark.parametrize("name", AUDIO_ONLY)
def test_audio_only_files_read_through_the_same_api(audio_media, name):
    path = audio_media / name
    cli = CliAudio(path)
    with fv.open_video(path) as reader:
        assert not reader.has_video
        clip = reader.get_clip_played_in_range(0.25, 1.75)
        assert clip.frames.data.shape[0] == 0
        j0, want = cli.span(0.25, 1.75)
        assert np.array_equal(clip.audio.data, want)
        # reads out of order: a seek back (or a decode from the start) gives the same
        again = reader.get_audio_played_in_range(3.1, 3.4)
        assert np.array_equal(again.data, cli.span(3.1, 3.4)[1])
        assert np.array_equal(reader.get_audio_played_in_range(0.25, 1.75).data, want)


def test_audio_outside_the_stream_pads_with_zeros_or_raises(audio_media):
    path = audio_media / "late_short_audio.mp4"
    cli = CliAudio(path)
    assert 0.4 < cli.first < 0.5  # the audio starts after the video
    with fv.open_video(path) as reader:
        head = reader.get_audio_played_in_range(0.0, 1.0)
        j0, want = cli.span(0.0, 1.0)
        assert j0 < 0 and np.array_equal(head.data, want)
        assert not head.data[:, :-j0].any() and head.data[:, -j0:].any()
        tail = reader.get_audio_played_in_range(2.0, 4.0)  # the audio ends before the video
        assert np.array_equal(tail.data, cli.span(2.0, 4.0)[1])
        assert not tail.data[:, -8000:].any()
        for span in [(0.0, 1.0), (2.0, 4.0)]:
            with pytest.raises(FluxonFsAudioRangeError, match="late_short_audio.mp4"):
                reader.get_audio_played_in_range(*span, pad_audio=False)
        inside = reader.get_audio_played_in_range(1.0, 2.0, pad_audio=False)
        assert np.array_equal(inside.data, cli.span(1.0, 2.0)[1])


def test_audio_spans_that_cannot_be_met_are_refused_naming_the_file(audio_media):
    """Non-finite times, a rate no resampler takes, and a span whose samples
    would not fit in any machine's memory: a clear error each, the reader usable."""
    with fv.open_video(audio_media / "aac_stereo.mp4") as reader:
        for span in [(0.0, float("inf")), (float("-inf"), 1.0)]:
            with pytest.raises(FluxonFsConfigError, match="aac_stereo.mp4: .* must be finite"):
                reader.get_audio_played_in_range(*span)
        with pytest.raises(FluxonFsConfigError, match="sample_rate must be at most 768000"):
            reader.get_audio_played_in_range(0.0, 1.0, sample_rate=10**9)
        with pytest.raises(FluxonFsConfigError, match=r"aac_stereo.mp4: \d+ audio samples of 2 "
                                                      r"channels would take .* GiB, more than"):
            reader.get_audio_played_in_range(0.0, 1e12)
        assert reader.get_audio_played_in_range(0.0, 1.0).data.shape == (2, 44100)


@pytest.mark.parametrize("span", ["x", (1.0,), (0.0, "a"), (2.0, 1.0), 0])
def test_a_requests_audio_span_that_is_not_two_ordered_numbers_is_refused(span):
    with pytest.raises(FluxonFsConfigError, match="audio_span_s must be"):
        fv.FluxonFsVideoReadRequest("e", "a.mp4", 8, 8, 1, (0,), audio=fv.AudioSpec(),
                                    audio_span_s=span)


def test_seeking_audio_without_exactness_matches_where_the_codec_forgets(audio_media):
    """exact_audio=False seeks with a pre-roll: bit-exact for FLAC and PCM (no
    state outlives the pre-roll); for AAC the noise bands may differ, never the place."""
    for name in ("flac_only.flac", "pcm_8k.mov"):
        cli = CliAudio(audio_media / name)
        with fv.open_video(audio_media / name) as reader:
            got = reader.get_audio_played_in_range(2.5, 3.0, exact_audio=False)
            assert np.array_equal(got.data, cli.span(2.5, 3.0)[1])
    cli = CliAudio(audio_media / "aac_stereo.mp4")
    with fv.open_video(audio_media / "aac_stereo.mp4") as reader:
        got = reader.get_audio_played_in_range(2.5, 3.0, exact_audio=False).data
        want = cli.span(2.5, 3.0)[1]
        # the 330 Hz tone dominates: misplaced by one sample, the correlation drops
        assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.99
        assert np.corrcoef(got[:, 1:].ravel(), want[:, :-1].ravel())[0, 1] < 0.99


@pytest.mark.parametrize("name", [*MEDIA, *DERIVED])
def test_an_exact_read_after_an_inexact_one_is_still_the_clis(audio_media, name):
    """exact_audio=False may seek back with a pre-roll and leave the decoder
    standing there; an exact read that follows on the same reader must not
    carry on from that decode (AAC's and Opus's differ from a decode from the
    start: 2e-5 on AAC, 0.03 and more on noise-coded bands) but give the CLI's
    samples whatever came before, at every codec and several positions."""
    path = audio_media / name
    cli = CliAudio(path)
    first, length = float(cli.first), cli.samples.shape[1] / cli.rate
    with fv.open_video(path) as reader:
        for fraction in (0.3, 0.45, 0.6):
            at = first + fraction * length
            late = first + 0.85 * length
            reader.get_audio_played_in_range(late, late + 0.1)  # the decoder stands past `at`
            reader.get_audio_played_in_range(at, at + 0.2, exact_audio=False)
            for start_s, stop_s in [(at + 0.2, at + 0.45), (at + 0.3, at + 0.5),
                                    (at + 0.05, at + 0.3)]:
                got = reader.get_audio_played_in_range(start_s, stop_s).data
                assert np.array_equal(got, cli.span(start_s, stop_s)[1]), (name, fraction,
                                                                            start_s)


def test_audio_only_files_refuse_frame_calls_as_no_video_stream(audio_media, tmp_path):
    """Every call that needs frames or their times says the file has no video
    stream (FluxonFsNoVideoStreamError, as documented), on the reader, the
    patcher and the pool; the audio calls work."""
    name = "m4a_aac.m4a"
    no_video = fv.FluxonFsNoVideoStreamError
    with fv.open_video(audio_media / name) as reader:
        calls = {
            "metadata": lambda: reader.metadata, "len": lambda: len(reader),
            "timestamps_s": reader.timestamps_s,
            "indices_at_times": lambda: reader.indices_at_times([0.5]),
            "read_frames_numpy": lambda: reader.read_frames_numpy([0]),
            "get_frames_at": lambda: reader.get_frames_at([0]),
            "get_frames_at([])": lambda: reader.get_frames_at([]),
            "get_frames_played_at": lambda: reader.get_frames_played_at([0.5]),
            "get_frames_in_range": lambda: reader.get_frames_in_range(0, 3),
            "get_frames_played_in_range": lambda: reader.get_frames_played_in_range(0.0, 1.0),
            "... with fps": lambda: reader.get_frames_played_in_range(0.0, 1.0, fps=4),
            "reader[0]": lambda: reader[0], "reader[0:2]": lambda: reader[0:2],
            "iter": lambda: next(iter(reader)),
            "get_clip_at": lambda: reader.get_clip_at([0]),
        }
        for what, call in calls.items():
            with pytest.raises(no_video, match=f"{name}: no video stream"):
                call()
            assert what  # named for the failure's traceback
        assert reader.read_frames_numpy([]).shape[0] == 0  # a clip's frames: none
        assert reader.get_clip_played_in_range(0.0, 1.0, fps=4).frames.data.shape[0] == 0
    root = tmp_path / "root"
    root.mkdir()
    (root / name).write_bytes((audio_media / name).read_bytes())
    with make_patcher(None, root) as patcher:
        for call in (patcher.video_metadata, patcher.video_timestamps_s):
            with pytest.raises(no_video, match=f"train:{name}: no video stream"):
                call("train", name)
        with patcher.open_video_reader_pool() as pool, pytest.raises(no_video):
            pool.video_metadata("train", name)


def test_audio_reads_refuse_lengths_and_times_that_are_not_numbers(audio_media):
    """num_samples must be an int >= 0, and a span two numbers of seconds: anything
    else is a FluxonFsConfigError naming the file, not a silent read or a bare TypeError."""
    with fv.open_video(audio_media / "m4a_aac.m4a") as reader:
        for count in (-5, 2.5, True, "3", np.float64(4.0)):
            with pytest.raises(FluxonFsConfigError, match=r"m4a_aac.m4a: num_samples must be"):
                reader.read_audio(0.0, 1.0, num_samples=count)
        for span in [("0", "1"), (0.0, "1.5"), (None, 1.0), (0.0, True)]:
            with pytest.raises(FluxonFsConfigError, match=r"m4a_aac.m4a: audio span .* must be "
                                                          r"finite numbers"):
                reader.get_audio_played_in_range(*span)
        assert reader.read_audio(0.5, 1.0, num_samples=np.int64(7)).data.shape == (2, 7)
        assert reader.read_audio(0.5, 1.0, num_samples=0).data.shape == (2, 0)
        got = reader.get_audio_played_in_range(np.float32(0.5), np.int64(1))
        assert got.data.shape == (2, 12000)


def test_a_clip_by_indices_carries_the_audio_of_its_frames(audio_media):
    path = audio_media / "aac_stereo.mp4"
    cli = CliAudio(path, "aresample=16000", "-ac 1")
    with fv.open_video(path, height=32, width=48) as reader:
        clip = reader.get_clip_at([30, 34, 38], sample_rate=16000, num_channels=1)
        times = reader.timestamps_s()
        assert clip.audio_start_s >= times[30] and clip.audio.duration_seconds == pytest.approx(
            times[39] - times[30], abs=1 / 16000)
        assert np.array_equal(clip.audio.data, cli.span(times[30], times[39])[1])


def test_no_audio_stream_is_a_clear_error(media):
    with fv.open_video(media.path("hevc.mp4")) as reader:
        assert reader.metadata.audio is None
        with pytest.raises(FluxonFsNoAudioStreamError, match="hevc.mp4"):
            reader.get_audio_played_in_range(0.0, 1.0)


def test_pool_read_many_returns_each_requests_audio(audio_media, tmp_path):
    names = ["aac_stereo.mp4", "opus_stereo.webm", "m4a_aac.m4a"]
    root = tmp_path / "root"
    (root / "av").mkdir(parents=True)
    for name in names:
        (root / "av" / name).write_bytes((audio_media / name).read_bytes())
    spec = fv.AudioSpec(sample_rate=16000, num_channels=1)
    with make_patcher(None, root) as patcher, patcher.open_video_reader_pool() as pool:
        requests = [
            fv.FluxonFsVideoReadRequest("train", "av/aac_stereo.mp4", 32, 48, 1, (10, 11, 12),
                                        audio=spec),
            fv.FluxonFsVideoReadRequest("train", "av/opus_stereo.webm", 32, 48, 1, (50,),
                                        audio=spec, audio_span_s=(1.0, 1.5)),
            fv.FluxonFsVideoReadRequest("train", "av/m4a_aac.m4a", None, None, 1, (),
                                        audio=spec, audio_span_s=(0.5, 2.5)),
            fv.FluxonFsVideoReadRequest("train", "av/aac_stereo.mp4", 32, 48, 1, (70,)),
        ]
        results = pool.read_many_numpy_with_stats(requests)
    spans = [(0.4, 0.52), (1.0, 1.5), (0.5, 2.5)]
    for name, result, span in zip(names, results, spans):
        want = CliAudio(audio_media / name, "aresample=16000", "-ac 1").span(*span)[1]
        assert np.array_equal(result.audio.data, want), name
    assert results[2].frames.shape[0] == 0
    assert results[3].audio is None


def test_dataset_workers_on_a_second_node_read_the_audio_from_the_kv(audio_media, tmp_path,
                                                                     redis_url):
    """Node A reads the clips through a real agent and Redis; node B (another
    patcher: its own page cache) reads them in spawned DataLoader workers, from
    the KV alone, frames and samples as the CLI's."""
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from fluxon_video.torch import LoaderStats, StatsCollate, VideoClipDataset

    names = ["aac_stereo.mp4", "opus_stereo.webm", "early_audio.mkv"]
    root = tmp_path / "root"
    (root / "av").mkdir(parents=True)
    for name in names:
        (root / "av" / name).write_bytes((audio_media / name).read_bytes())
    config = tmp_path / "agent.toml"
    config.write_text(agent_config_text(root))
    relpaths = [f"av/{name}" for name in names]
    options = dict(clip_duration_s=1.0, fps=8, clips_per_video=2, height=32, width=48, seed=3,
                   audio=fv.AudioSpec(sample_rate=16000, num_channels=1))
    clis = {name: CliAudio(audio_media / name, "aresample=16000", "-ac 1") for name in names}
    with AgentProcess(config) as agent:
        with make_patcher(agent.url, root, redis_url) as node_a:
            warm = VideoClipDataset(node_a, "train", relpaths, **options)
            first = warm.__getitems__(list(range(len(warm))))
            assert node_a.client.backfill.wait_idle()
        with make_patcher(agent.url, root, redis_url) as node_b:
            dataset = VideoClipDataset(node_b, "train", relpaths, **options)
            loader = DataLoader(dataset, batch_size=2, num_workers=2,
                                multiprocessing_context="spawn", collate_fn=StatsCollate(dataset))
            stats, item = LoaderStats(), 0
            for batch in loader:
                stats.update(batch)
                assert batch["audio"].shape == (2, 1, 16000) and batch["audio"].dtype.is_floating_point
                for k, relpath in enumerate(batch["relpath"]):
                    start_s = float(dataset.clip_with_times(item)[2][0])
                    want = clis[relpath.split("/")[1]].span(start_s, start_s + 1.0)[1][:, :16000]
                    assert np.array_equal(batch["audio"][k].numpy(), want), (relpath, start_s)
                    assert np.array_equal(first[item]["audio"].numpy(), want)
                    ref = reference_frames(audio_media / relpath.split("/")[1], 32, 48)
                    indices = batch["indices"][k].tolist()
                    assert np.array_equal(batch["frames"][k].numpy(), ref[indices])
                    item += 1
            assert item == len(dataset) == 6
            total = stats.total()
            assert total.remote_bytes == 0 and total.kv_hits > 0, total


@pytest.mark.parametrize("name", ["aac_stereo.mp4", "edit_list.mp4", "pcm_8k.mov",
                                  "opus_stereo.webm", "mp3_mono.mkv", "flac_51.mkv",
                                  "early_audio.mkv"])
def test_the_frame_index_lists_the_audio_packets_as_ffprobe_does(audio_media, name):
    """Every audio packet's pts, byte offset and size, so a clip's audio bytes
    can be fetched ahead: MP4/MOV's from the sample table (no payload read),
    Matroska's logged by the scan that indexes the video."""
    path = audio_media / name
    info = probe(path, "a:0", "stream=time_base")["streams"][0]
    packets = probe(path, "a:0", "packet=pts,pos,size")["packets"]
    want = np.array([[int(p["pts"]), int(p["pos"]), int(p["size"])] for p in packets]).T
    with fv.open_video(path) as reader:
        index = reader._decoder.index
        assert tuple(index.header["audio"]["time_base"]) == tuple(
            int(x) for x in info["time_base"].split("/"))
        got = index.audio_packets
        # ffprobe lists what the demuxer returns: the packets the edit list keeps
        np.testing.assert_array_equal(got, want)
        assert fv.FluxonFsVideoMetadata is type(reader.metadata)
        restored = type(index).from_bytes(index.to_bytes())
        np.testing.assert_array_equal(restored.audio_packets, want)


@pytest.mark.parametrize("name", [*AUDIO_ONLY, "aac_51_48k.mp4", "pcm_8k.mov"])
def test_audio_metadata_is_ffprobes_with_or_without_video(audio_media, name):
    path = audio_media / name
    want = probe(path, "a:0", "stream=index,codec_name,sample_rate,channels,channel_layout,"
                              "start_time,duration")["streams"][0]
    with fv.open_video(path) as reader:
        got = reader.audio_metadata
    assert (got.stream_index, got.codec, got.sample_rate, got.num_channels) == (
        want["index"], want["codec_name"], int(want["sample_rate"]), want["channels"])
    assert got.layout == want.get("channel_layout", "unknown")
    for ours, theirs in [(got.begin_stream_seconds, want.get("start_time")), (got.duration_seconds,
                                                                 want.get("duration"))]:
        assert (ours is None) == (theirs is None) and (ours is None or
                                                       abs(ours - float(theirs)) < 1e-6)


def test_the_old_audio_names_still_work_and_warn(audio_media):
    """Renamed to torchcodec's words (issue 37.2): AudioSpec(channels=), the
    methods' channels=, AudioSamples.start_s/channels/duration_s and the audio
    metadata's channels/start_s/duration_s read the same values, and warn."""
    with fv.open_video(audio_media / "m4a_aac.m4a") as reader:
        with pytest.warns(DeprecationWarning, match="num_channels="):
            spec = fv.AudioSpec(16000, channels=1)
        assert spec == fv.AudioSpec(16000, num_channels=1)
        new = reader.read_audio(0.5, 1.0, spec)
        with pytest.warns(DeprecationWarning, match="num_channels="):
            old = reader.get_audio_played_in_range(0.5, 1.0, sample_rate=16000, channels=1)
        assert np.array_equal(old.data, new.data) and new.num_channels == 1
        for obj, renames in [(new, {"start_s": "pts_seconds", "channels": "num_channels",
                                    "duration_s": "duration_seconds"}),
                             (reader.audio_metadata, {"channels": "num_channels",
                                                      "start_s": "begin_stream_seconds",
                                                      "duration_s": "duration_seconds"})]:
            for old_name, new_name in renames.items():
                with pytest.warns(DeprecationWarning, match=f"use {new_name}"):
                    assert getattr(obj, old_name) == getattr(obj, new_name)
        with pytest.raises(TypeError, match="twice"):
            fv.AudioSpec(16000, 2, channels=1)
