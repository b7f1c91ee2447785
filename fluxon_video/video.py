"""The public facade the design names: everything a data loader needs."""

from fluxon_video.errors import *  # noqa: F401,F403
from fluxon_video.audio import AudioSamples, AudioSpec, AVClip
from fluxon_video.errors import __all__ as _error_names
from fluxon_video.fs.config import (
    ClientSettings,
    FluxonFsConfig,
    FluxonFsExport,
    MissPolicy,
    RequestIdentity,
    load_config,
)
from fluxon_video.frames import Frame, FrameBatch
from fluxon_video.fs.listing import FluxonFsFileEntry
from fluxon_video.metadata import FluxonFsAudioMetadata, FluxonFsVideoMetadata
from fluxon_video.options import ReadOptions
from fluxon_video.patcher import FluxonFsPatcher
from fluxon_video.pool import (
    FluxonFsVideoReaderPool,
    FluxonFsVideoReadRequest,
    FluxonFsVideoReadResult,
)
from fluxon_video.reader import FluxonFsVideoReader
from fluxon_video.stats import FluxonFsProcessStats, FluxonFsVideoReadStats

__all__ = [
    *_error_names,
    "AVClip",
    "Frame",
    "AudioSamples",
    "AudioSpec",
    "ClientSettings",
    "FluxonFsAudioMetadata",
    "FluxonFsConfig",
    "FluxonFsExport",
    "FluxonFsFileEntry",
    "FluxonFsPatcher",
    "FluxonFsVideoMetadata",
    "FluxonFsVideoReader",
    "FluxonFsVideoReaderPool",
    "FluxonFsVideoReadRequest",
    "FluxonFsVideoReadResult",
    "FluxonFsProcessStats",
    "FluxonFsVideoReadStats",
    "FrameBatch",
    "MissPolicy",
    "ReadOptions",
    "RequestIdentity",
    "load_config",
]
