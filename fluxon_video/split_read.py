"""SplitReads: a read's two frame sets on two decoders at once (``num_threads >= 2``).

fluxon_video/planning.py says how a read splits; this runs the halves. The
larger set goes to the reader's decoder (whose frame threads make it the
faster), the other to a second, one-threaded decoder over the same byte
source, on a thread of its own (both release the GIL). Each frame is decoded
from its own keyframe either way, so the bytes are those of one decoder
(the frame-identity rule). Once a split read learns something of the file
(damage) or disagrees with the frame index, reads stay on one decoder.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from fluxon_video.meter import merge_halves
from fluxon_video.planning import place_rows


class SplitReads:
    """The reader's second decoder (made on first use by ``make_second``) and
    whether reads may still split. One owner, the reader: ``close()`` releases
    the second decoder and is safe twice."""

    def __init__(self, make_second: Callable[[], Any]) -> None:
        self._make_second = make_second
        self._second: Any = None
        self.off = False  # True once a split read fell back to the sequential path
        self.reads = 0    # reads split so far

    def decode(self, decoder: Any, wanted: np.ndarray, left: np.ndarray, right: np.ndarray,
               height: int, width: int) -> tuple[np.ndarray, Any]:
        """Rows ``wanted[left]`` on ``decoder`` and ``wanted[right]`` on the second
        one at once; the frames in request order and the two decodes' stats as one."""
        if self._second is None:
            self._second = self._make_second()
        self.reads += 1
        second, before = self._second, decoder.index
        second.index, second.index_learned = before, decoder.index_learned
        second.orient, second.scaling = decoder.orient, decoder.scaling
        done: dict[str, Any] = {}

        # Both decode into one array (the left set's rows, then the right's),
        # put in request order after: peak memory is the output, as for one decoder.
        frames = np.empty((wanted.size, height, width, 3), np.uint8)

        def decode_right() -> None:
            try:
                done["right"] = second.decode(wanted[right], height, width, frames[left.size:])
            except BaseException as exc:  # noqa: BLE001 - raised on the reader's thread
                done["error"] = exc

        worker = threading.Thread(target=decode_right, name="fluxon-gop-half", daemon=True)
        worker.start()
        try:
            _, stats_left = decoder.decode(wanted[left], height, width, frames[:left.size])
        finally:
            worker.join()
            if second.index is not before or decoder.index is not before:
                # A decoder learnt something of the file (damage): the reader's
                # decoder keeps it, and reads stay on one decoder from now on.
                if decoder.index is before:
                    decoder.index = second.index
                self.off = True
        if "error" in done:
            raise done["error"]
        _, stats_right = done["right"]
        if stats_left.fallback or stats_right.fallback:
            self.off = True  # the index disagreed: one decoder from now on
        return (place_rows(frames, np.concatenate([left, right])),
                merge_halves(stats_left, stats_right))

    def close(self) -> None:
        """Release the second decoder (a later split makes a new one)."""
        second, self._second = self._second, None
        if second is not None:
            second.close()
