"""Types of the compiled demuxer unit (_demux.pyx): the packet scan."""

from fluxon_video._avio import ByteSource
from fluxon_video.frame_index import FrameIndex

def scan_packets(source: ByteSource, name: str | None = None,
                 stream_index: int = -1) -> FrameIndex: ...
