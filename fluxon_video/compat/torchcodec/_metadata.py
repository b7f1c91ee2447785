"""torchcodec's stream metadata: ``VideoStreamMetadata`` and ``AudioStreamMetadata``.

The fields of torchcodec 0.13 to 0.17 (unchanged), in its order, so they
can be built directly, positionally or by keyword. Every field defaults to None, and a computed
field left None is derived as torchcodec documents it (from the content's
values when a scan gave them, else the header's), so code written for the
versions where those were properties builds them too.

A decoder fills them from the frame index (fluxon_video/frame_index.py):
the ``*_from_content`` values are the scan's, exact; the header's fields the
index does not record (duration, frame count, start) are the content's
values too, never the header's guess (docs/compat.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from fluxon_video.compat._timing import FrameTiming


def _metadata_repr(self: Any) -> str:
    return "".join([f"{type(self).__name__}:\n",
                    *(f"  {f.name}: {getattr(self, f.name)}\n" for f in dataclasses.fields(self))])


@dataclass
class StreamMetadata:
    duration_seconds_from_header: float | None = None
    begin_stream_seconds_from_header: float | None = None
    bit_rate: float | None = None
    codec: str | None = None
    stream_index: int | None = None
    duration_seconds: float | None = None
    begin_stream_seconds: float | None = None

    __repr__ = _metadata_repr


@dataclass
class VideoStreamMetadata(StreamMetadata):
    """Metadata of one video stream (torchcodec.decoders.VideoStreamMetadata)."""

    begin_stream_seconds_from_content: float | None = None
    end_stream_seconds_from_content: float | None = None
    width: int | None = None
    height: int | None = None
    num_frames_from_header: int | None = None
    num_frames_from_content: int | None = None
    average_fps_from_header: float | None = None
    pixel_aspect_ratio: Fraction | None = None
    rotation: float | None = None
    color_primaries: str | None = None
    color_space: str | None = None
    color_transfer_characteristic: str | None = None
    pixel_format: str | None = None
    end_stream_seconds: float | None = None
    num_frames: int | None = None
    average_fps: float | None = None

    def __post_init__(self) -> None:
        begin, end = self.begin_stream_seconds_from_content, self.end_stream_seconds_from_content
        scanned = begin is not None and end is not None
        if self.begin_stream_seconds is None:
            self.begin_stream_seconds = begin if begin is not None else 0.0
        if self.duration_seconds is None:
            if scanned:
                self.duration_seconds = end - begin  # type: ignore[operator]
            elif self.duration_seconds_from_header is not None:
                self.duration_seconds = self.duration_seconds_from_header
            elif self.num_frames_from_header is not None and self.average_fps_from_header:
                self.duration_seconds = self.num_frames_from_header / self.average_fps_from_header
        if self.end_stream_seconds is None:
            self.end_stream_seconds = end if end is not None else self.duration_seconds
        if self.num_frames is None:
            if self.num_frames_from_content is not None:
                self.num_frames = self.num_frames_from_content
            elif self.num_frames_from_header is not None:
                self.num_frames = self.num_frames_from_header
            elif self.duration_seconds is not None and self.average_fps_from_header:
                self.num_frames = int(self.duration_seconds * self.average_fps_from_header)
        if self.average_fps is None:
            if scanned and self.num_frames_from_content and end > begin:  # type: ignore[operator]
                self.average_fps = self.num_frames_from_content / (end - begin)  # type: ignore[operator]
            else:
                self.average_fps = self.average_fps_from_header

    __repr__ = _metadata_repr


@dataclass
class AudioStreamMetadata(StreamMetadata):
    """Metadata of one audio stream (torchcodec.decoders.AudioStreamMetadata)."""

    sample_rate: int | None = None
    num_channels: int | None = None
    sample_format: str | None = None

    def __post_init__(self) -> None:
        if self.duration_seconds is None:
            self.duration_seconds = self.duration_seconds_from_header
        if self.begin_stream_seconds is None:
            self.begin_stream_seconds = (self.begin_stream_seconds_from_header
                                         if self.begin_stream_seconds_from_header is not None
                                         else 0.0)

    __repr__ = _metadata_repr


def _known(text: str | None) -> str | None:
    return text if text and text != "unknown" else None


def video_stream_metadata(reader: Any, timing: FrameTiming) -> VideoStreamMetadata:
    """A reader's VideoStreamMetadata, as torchcodec reports it after its scan."""
    md = reader.metadata
    begin, end = timing.begin, timing.end
    rotation = None
    if timing.header.get("display_matrix") is not None:
        rotation = float(md.rotation_deg if md.rotation_deg <= 180 else md.rotation_deg - 360)
    # The stream's size turned upright (as torchcodec decodes it), before any transform.
    width, height = ((md.height, md.width) if reader.autorotate and md.rotation_deg in (90, 270)
                     else (md.width, md.height))
    return VideoStreamMetadata(
        duration_seconds_from_header=end - begin,
        begin_stream_seconds_from_header=begin,
        bit_rate=md.bit_rate or None,
        codec=md.codec,
        stream_index=md.stream_index,
        duration_seconds=end - begin,
        begin_stream_seconds=begin,
        begin_stream_seconds_from_content=begin,
        end_stream_seconds_from_content=end,
        width=int(width),
        height=int(height),
        num_frames_from_header=md.num_frames,
        num_frames_from_content=md.num_frames,
        average_fps_from_header=timing.header_fps,
        pixel_aspect_ratio=Fraction(*md.sample_aspect_ratio),
        rotation=rotation,
        color_primaries=None,
        color_space=_known(md.color_space),
        color_transfer_characteristic=None,
        pixel_format=md.pix_fmt or None,
        end_stream_seconds=end,
        num_frames=md.num_frames,
        average_fps=md.average_fps,
    )


def audio_stream_metadata(audio: Any) -> AudioStreamMetadata:
    """AudioStreamMetadata of our FluxonFsAudioMetadata (the header's values, as
    torchcodec's AudioDecoder reports them: it does not scan)."""
    start, duration = audio.begin_stream_seconds, audio.duration_seconds
    return AudioStreamMetadata(
        duration_seconds_from_header=duration,
        begin_stream_seconds_from_header=start,
        bit_rate=None,
        codec=audio.codec,
        stream_index=audio.stream_index,
        duration_seconds=duration,
        begin_stream_seconds=start if start is not None else 0.0,
        sample_rate=audio.sample_rate,
        num_channels=audio.num_channels,
        sample_format=None,
    )
