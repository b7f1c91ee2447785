"""Types of the benchmark's decode floor (_floor.pyx)."""

from typing import Sequence

import numpy as np

from fluxon_video._avio import ByteSource
from fluxon_video.frame_index import FrameIndex

def decode_floor(source: ByteSource, indices: Sequence[int] | np.ndarray, num_threads: int = 1,
                 name: str | None = None, index: FrameIndex | None = None) -> dict[str, float]: ...
