"""torchcodec.transforms: the decoder transforms ``Resize``, ``CenterCrop``, ``RandomCrop``.

``VideoDecoder(..., transforms=[Resize((h, w)), CenterCrop((ch, cw))])``:
a Resize (first, at most one) is done by the decoder with the bilinear
scaler, as the ffmpeg CLI's ``scale=w:h:flags=bilinear`` (torchcodec's own
Resize is not that scaler: docs/compat.md); the crops are cut from the
scaled RGB frames (CenterCrop half offsets to even, as FFmpeg's lrint),
RandomCrop at offsets drawn from torch's generator when the decoder is made
(top, then left: torchcodec's draws). torchvision's v2 transforms of those
names are taken too.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["CenterCrop", "DecoderTransform", "RandomCrop", "Resize"]


class DecoderTransform:
    """Base of the transforms a decoder applies while decoding."""


class _Sized(DecoderTransform):
    """A transform to ``size`` = (height, width)."""

    def __init__(self, size: Sequence[int]) -> None:
        if len(size) != 2:
            raise ValueError(f"{type(self).__name__} transform must have a (height, width) "
                             f"pair for the size, got {size}.")
        self.size = size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={list(self.size)})"


class Resize(_Sized):
    """Resize each frame to ``size`` = (height, width), bilinear."""


class CenterCrop(_Sized):
    """The centre ``size`` = (height, width) of each frame."""


class RandomCrop(_Sized):
    """A ``size`` = (height, width) window of each frame, at one random place
    per decoder (drawn when the decoder is made)."""
