"""Drop-ins for code written against other decoders: change one import line.

    import fluxon_video.compat.torchcodec as torchcodec    # was: import torchcodec
    from fluxon_video.compat.torchcodec.decoders import VideoDecoder, AudioDecoder
    from fluxon_video.compat.torchcodec.samplers import clips_at_random_indices
    import fluxon_video.compat.decord as decord            # was: import decord

Both read what the library they replace reads (a path, bytes, a seekable
binary file object; torchcodec's uint8 tensor too) and FluxonFS locations:
an ``s3://``/``gs://``/... URI or an absolute path under a configured
export's root, or ``EXPORT:RELPATH``, read through the agent and the shared
cache. Which FluxonFS to read comes from :func:`use` or, when it was not
called, from the config file ``$FLUXON_VIDEO_CONFIG`` (and the identity
``$FLUXON_VIDEO_IDENTITY``), as for the ``fluxon-video`` command line.

What differs from the originals, and why: docs/compat.md.
"""

from __future__ import annotations

from fluxon_video.compat._sources import configured_patcher, open_reader, use

__all__ = ["configured_patcher", "open_reader", "use"]
