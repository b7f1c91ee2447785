"""A drop-in for torchcodec's CPU decoders and samplers on fluxon_video.

    import fluxon_video.compat.torchcodec as torchcodec        # was: import torchcodec
    from fluxon_video.compat.torchcodec.decoders import VideoDecoder, AudioDecoder
    from fluxon_video.compat.torchcodec.samplers import clips_at_random_indices
    from fluxon_video.compat.torchcodec import Frame, FrameBatch, AudioSamples

The API of torchcodec 0.13 to 0.17 (decoders, samplers, frame containers,
stream metadata, the Resize and crop transforms); sources as fluxon_video.compat takes them,
FluxonFS locations included. Needs torch. What differs: docs/compat.md.
"""

from __future__ import annotations

from fluxon_video.compat.torchcodec import decoders, samplers, transforms
from fluxon_video.compat.torchcodec._frame import AudioSamples, Frame, FrameBatch

__all__ = ["AudioSamples", "Frame", "FrameBatch", "decoders", "samplers", "transforms"]
