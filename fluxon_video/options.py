"""ReadOptions: what a reader is asked for, checked once, in one value.

Output size, decoder threads, resize mode and interpolation, the stream,
autorotation and the damage policy; and two defaults of the reads, the torch
layout and the audio spec (they do not change how a reader decodes, so the
pool's readers are shared across them). Building one checks every field (a bad
value is a FluxonFsConfigError or a TypeError naming it); after that, the
patcher, ``open_video``, the pool (its reader key), the dataset, the compat
layers and the CLI pass the same value down without checking again. Frozen
and hashable: two equal options are one reader key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fluxon_video.audio import AudioSpec
from fluxon_video.damage import check_policy
from fluxon_video.errors import FluxonFsConfigError
from fluxon_video.frames import DEFAULT_LAYOUT, check_layout
from fluxon_video.resize import check_interpolation, check_resize
from fluxon_video.validation import (Threads, check_output_size, positive_int, stream_choice,
                                     thread_count)


@dataclass(frozen=True)
class ReadOptions:
    """How a reader decodes. ``height``/``width`` None: native size, or the
    aspect ratio kept from the other; ``num_threads`` an int or ``"auto"``;
    ``resize`` ``"stretch"``, ``"shorter_side_crop"`` or ``"letterbox"``;
    ``interpolation`` ``"bilinear"``, ``"bicubic"``, ``"area"``, ``"nearest"``
    or ``"lanczos"``; ``stream_index`` the container stream (None: the
    default rule's); ``autorotate`` turns frames upright by the display
    matrix; ``on_damage`` ``"error"``, ``"skip"`` or ``"conceal"``;
    ``layout`` the torch reads' default, ``"NHWC"`` or ``"NCHW"``; ``audio``
    the audio reads' default AudioSpec (None: the stream's own rate and
    channels; for the dataset, clips with audio in that spec)."""

    height: int | None = None
    width: int | None = None
    num_threads: int = 1
    resize: str = "stretch"
    interpolation: str = "bilinear"
    stream_index: int | None = None
    autorotate: bool = False
    on_damage: str = "error"
    layout: str = "NHWC"
    audio: AudioSpec | None = None

    def __post_init__(self) -> None:
        checked = {
            "height": None if self.height is None else positive_int("height", self.height),
            "width": None if self.width is None else positive_int("width", self.width),
            "num_threads": thread_count(self.num_threads),
            "resize": check_resize(self.resize),
            "interpolation": check_interpolation(self.interpolation),
            "stream_index": stream_choice(self.stream_index),
            "autorotate": bool(self.autorotate),
            "on_damage": check_policy(self.on_damage),
            "layout": check_layout(self.layout),
            "audio": self.audio,
        }
        if self.audio is not None and not isinstance(self.audio, AudioSpec):
            raise TypeError(f"audio must be an AudioSpec or None, got {type(self.audio).__name__}")
        if checked["height"] is not None and checked["width"] is not None:
            check_output_size(checked["height"], checked["width"])
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def replace(self, **changes: Any) -> ReadOptions:
        """A copy with ``changes``, checked like a new one."""
        return dataclasses.replace(self, **changes)

    def decoding(self) -> ReadOptions:
        """The options that make a reader: without the reads' defaults (layout,
        audio), so reads that differ only in those share one (the pool's key)."""
        return self.replace(layout=DEFAULT_LAYOUT, audio=None)


DEFAULT = ReadOptions()


def options_from(options: ReadOptions | None, where: str, **given: Any) -> ReadOptions:
    """The options a call reads with: ``options`` when given (then the separate
    arguments must be left at their defaults), else those arguments, checked.

    ``given``: the call's separate arguments by ReadOptions field name
    (``num_threads`` may be ``"auto"``: ``Threads``)."""
    if options is None:
        return ReadOptions(**given)
    if not isinstance(options, ReadOptions):
        raise TypeError(f"{where}: options must be a ReadOptions, got {type(options).__name__}")
    also = sorted(name for name, value in given.items() if value != getattr(DEFAULT, name))
    if also:
        raise FluxonFsConfigError(f"{where}: pass options= or {', '.join(also)}=, not both "
                                  "(options.replace(...) changes a field)")
    return options


__all__ = ["ReadOptions", "Threads", "options_from"]
