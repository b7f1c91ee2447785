"""`read`: decode frames of one video to PNG or .npy files, and its audio to WAV.

The WAV file is 16-bit PCM (Python's ``wave`` module), what every player and
audio tool reads. The reader's float32 samples are converted as the ffmpeg
CLI converts float to s16 (swresample: ``lrintf(x * 32768)``, clipped to
[-32768, 32767], no dither), so the file's samples are ``ffmpeg -i IN -map
0:a:0 -f s16le -`` (with ``-af aresample=R -ac C`` when asked) sliced at the
span's sample positions (docs/audio.md, "One clock"). 16 bits keep what a
listener or a check needs; the API's float32 samples (``reader.read_audio``)
are the lossless form.
"""

from __future__ import annotations

import contextlib
import struct
import wave
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fluxon_video.defaults import TIME_TOLERANCE_S
from fluxon_video.errors import FluxonFsIOError
from fluxon_video.options import ReadOptions
from fluxon_video.patcher import FluxonFsPatcher


@dataclass(frozen=True)
class AudioOut:
    """``read --audio``: where the WAV goes, the span (None: the frames'), the
    rate and channel count (None: the stream's)."""

    path: Path
    span_s: tuple[float, float] | None = None
    sample_rate: int | None = None
    channels: int | None = None


def pcm16(samples: np.ndarray) -> np.ndarray:
    """float32 ``(channels, n)`` -> interleaved little-endian int16 ``(n, channels)``,
    rounded to nearest (ties to even) and clipped, as swresample converts."""
    scaled = np.rint(np.asarray(samples, np.float32) * np.float32(32768))
    return np.clip(scaled, -32768, 32767).astype("<i2").T


def write_wav(path: Path, samples: np.ndarray, sample_rate: int) -> None:
    """A 16-bit PCM WAV file of float32 ``(channels, n)`` samples (see pcm16)."""
    # The file opened here: wave.open(path) leaves a noisy half-made writer behind
    # when the path cannot be opened.
    with open(path, "wb") as file, wave.open(file, "wb") as out:
        out.setnchannels(int(samples.shape[0]))
        out.setsampwidth(2)
        out.setframerate(int(sample_rate))
        out.writeframes(np.ascontiguousarray(pcm16(samples)).tobytes())


def write_png(path: Path, rgb: np.ndarray) -> None:
    """An 8-bit RGB PNG. Written directly (zlib + three chunks) so that one CLI
    call needs no image library."""
    height, width, _ = rgb.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, width * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                     + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b""))


@contextlib.contextmanager
def _writing(out: Path, what: str = "the frames") -> Iterator[None]:
    """An OS error writing under ``out`` (a file in its place, no permission, a full
    disk) as one FluxonFsIOError naming it."""
    try:
        yield
    except OSError as exc:
        raise FluxonFsIOError(f"{out}: cannot write {what} there "
                              f"({exc.strerror or exc})") from exc


def read_frames(patcher: FluxonFsPatcher, export: str, relpath: str, frames: list[int],
                times: list[float], options: ReadOptions, out: Path | None, fmt: str,
                audio: AudioOut | None = None,
                tolerance_s: float = TIME_TOLERANCE_S) -> list[dict[str, object]]:
    """Write the frames (and the frames ``times`` name under ``tolerance_s``) under
    ``out``; one row each. With ``audio``, also the WAV file of the span the
    frames cover (or ``audio.span_s``), and a row saying what it holds."""
    with patcher.open_video_reader(export, relpath, options=options) as reader:
        indices = list(frames) + (reader.indices_at_times(times, tolerance_s=tolerance_s)
                                  if times else [])
        rows: list[dict[str, object]] = []
        if indices:
            assert out is not None  # the command line asks for --out with frames
            rows += _write_frames(reader, indices, out, fmt, Path(relpath).stem)
        if audio is not None:
            rows.append(_write_audio(reader, indices, audio))
        return rows


def _write_audio(reader: Any, indices: list[int], audio: AudioOut) -> dict[str, object]:
    """The WAV file of the span (given, or the frames' as ``get_clip_at`` takes it)."""
    from fluxon_video.audio import AudioSpec
    from fluxon_video.frames import covered_span, frame_durations

    if audio.span_s is not None:
        start_s, end_s = audio.span_s
    else:
        stamps = reader.timestamps_s()
        durations = frame_durations(stamps, reader.metadata.end_stream_seconds)
        chosen = np.array([i % len(stamps) for i in indices])
        start_s, end_s = covered_span(stamps[chosen], durations[chosen])
    samples = reader.read_audio(start_s, end_s, AudioSpec(audio.sample_rate, audio.channels))
    with _writing(audio.path, "the audio"):
        write_wav(audio.path, samples.data, samples.sample_rate)
    return {"audio_file": str(audio.path), "start_s": round(float(samples.pts_seconds), 6),
            "end_s": round(float(end_s), 6), "num_samples": samples.num_samples,
            "sample_rate": samples.sample_rate, "channels": samples.num_channels}


def _write_frames(reader: Any, indices: list[int], out: Path, fmt: str,
                  stem: str) -> list[dict[str, object]]:
    """The frames at ``indices`` as files under ``out``: one row each."""
    with _writing(out):
        out.mkdir(parents=True, exist_ok=True)
    decoded = reader.read_frames_numpy(indices)
    stamps = reader.timestamps_s()
    rows: list[dict[str, object]] = []
    for k, index in enumerate(indices):
        resolved = index % len(reader)
        path = out / f"{stem}_{resolved:06d}.{fmt}"
        with _writing(out):
            if fmt == "png":
                write_png(path, decoded[k])
            else:
                np.save(path, decoded[k])
        rows.append({"frame": resolved, "time_s": round(float(stamps[resolved]), 6),
                     "height": reader.height, "width": reader.width, "file": str(path)})
    return rows
