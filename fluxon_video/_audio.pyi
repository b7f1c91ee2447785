"""Types of the compiled audio decoder and resampler (_audio.pyx)."""

from typing import Any

import numpy as np

from fluxon_video._avio import ByteSource
from fluxon_video._decode import VideoDecoder

EXACT_SEEK_FORMATS: tuple[str, ...]
FORGETFUL_CODECS: tuple[str, ...]
MIN_PREROLL_SAMPLES: int
CONTINUE_WITHIN_SAMPLES: int
SHARED_DEMUXERS: tuple[str, ...]

class AudioDecoder:
    """One audio stream decoded to float32 planes; with a host, it takes turns
    on the host's demuxer."""

    name: str
    codec_name: str
    sample_rate: int
    channels: int
    seeks_exactly: bool
    forgets: bool
    shares_demuxer: bool
    resumed: int
    lost_place: int
    sought: int
    started: int
    def __init__(self, source: ByteSource, name: str | None = None, stream_index: int = -1,
                 host: VideoDecoder | None = None) -> None: ...
    def close(self) -> None: ...
    def header(self) -> dict[str, Any]: ...
    def first_time_s(self) -> float: ...
    def plan(self, start: int, exact: bool = True,
             can_continue: bool = True) -> tuple[str, int]: ...
    def samples(self, start: int, stop: int,
                exact: bool = True) -> tuple[np.ndarray, tuple[int, int]]: ...

def resample(planes: np.ndarray, in_rate: int, out_rate: int, out_channels: int) -> np.ndarray: ...
