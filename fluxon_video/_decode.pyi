"""Types of the compiled video decoder (_decode.pyx)."""

from types import TracebackType
from typing import Any, Callable, Sequence

import numpy as np

from fluxon_video._avio import ByteSource
from fluxon_video.frame_index import FrameIndex
from fluxon_video.stats import DecodeStats

class VideoDecoder:
    """Demux -> decode -> swscale into the caller's array; one per reader."""

    name: str
    num_threads: int
    closed: bool
    index: FrameIndex | None
    on_damage: str
    stream_index: int
    index_learned: Callable[[FrameIndex], None] | None
    orient: int
    scaling: tuple[str, str]
    def __init__(self, source: ByteSource, num_threads: int = 1, name: str | None = None,
                 on_damage: str = "error", stream_index: int | None = None) -> None: ...
    def is_open(self) -> bool: ...
    def reset(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> VideoDecoder: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...
    def decode(self, indices: Sequence[int] | np.ndarray, height: int, width: int,
               out: np.ndarray | None = None, samples: str = "rgb24"
               ) -> tuple[np.ndarray, DecodeStats]: ...
    def guest_pipeline(self, probe: bool) -> Any: ...
    def frame_count(self) -> int | None: ...
    def survey(self) -> None: ...

def decode_frames(source: ByteSource, indices: Sequence[int] | np.ndarray, height: int,
                  width: int, num_threads: int = 1, name: str | None = None,
                  index: FrameIndex | None = None, on_damage: str = "error",
                  stream_index: int | None = None) -> tuple[np.ndarray, DecodeStats]: ...
def library_versions() -> dict[str, str]: ...
