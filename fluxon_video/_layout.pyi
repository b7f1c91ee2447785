"""Types of the frame layout converter (_layout.pyx)."""

import numpy as np

def frames_to_planes(frames: np.ndarray, table: np.ndarray, out: np.ndarray,
                     rows: np.ndarray | None = None) -> None: ...
