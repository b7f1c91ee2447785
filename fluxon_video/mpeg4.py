"""MPEG-4 part 2 (FFmpeg's ``mpeg4``): can its frame index be trusted?

The index takes frame ``i`` to be the packet with the i-th pts and starts
decoding at keyframes. AVI stores no pts, so the demuxer infers them from
the VOP coding types, one packet per frame. That holds, and a decode from a
keyframe gives what a decode from the start gives, only if:

- every packet holds exactly one VOP, and it is coded. DivX/Xvid "packed
  B-frames" put a P- and a B-VOP in one packet and leave a not-coded VOP
  (N-VOP) as a placeholder; user data ``DivX<version>b<build>p`` makes
  FFmpeg's decoder shift every such B-VOP by one packet, and a not-coded VOP
  decodes to no frame at all;
- every keyframe holds an I-VOP (the container's key flag is all the landing
  check sees);
- every keyframe carries the same stream headers (VOL, user data) and no
  other packet carries any: the decoder keeps what they said (time increment
  size, bug workarounds chosen from the encoder's user data) until new ones
  come, so a decode starting at a keyframe must find them there;
- the stream is progressive with a rectangular shape: interlaced B-VOPs use
  timing (FFmpeg's ``t_frame``) taken from the first B-VOP after a VOL, which
  is another one after a seek than from the start.

The reading follows FFmpeg 5.1's decoder (libavcodec/mpeg4videodec.c:
decode_vol_header, decode_user_data, decode_vop_header).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

START = b"\x00\x00\x01"
VOS, VOP, GOV, USER_DATA = 0xB0, 0xB6, 0xB3, 0xB2
VOL_CODES = range(0x20, 0x30)
I_VOP = 0
RECT_SHAPE = 0
# Studio profile has another VOL and VOP syntax: VO types 14 and 15, or a VOS
# profile_and_level 0xE1..0xE8 (profile 14, levels 1 to 8).
STUDIO_VO_TYPES = (14, 15)
STUDIO_PROFILE_LEVELS = range(0xE1, 0xE9)
EXTENDED_PAR = 15
VBV_PARAMETER_BITS = 79  # bit rate, buffer size, occupancy halves and their markers
# FFmpeg's DivX detection: sscanf "DivX%dBuild%d%c" or "DivX%db%d%c", packed if %c is 'p'.
DIVX_PACKED = re.compile(rb"DivX\s*[+-]?\d+(?:Build|b)\s*[+-]?\d+p")


class _Bits:
    """Big-endian bit reader; reading past the end raises EOFError."""

    def __init__(self, data: bytes) -> None:
        self.value = int.from_bytes(data, "big")
        self.left = 8 * len(data)

    def read(self, n: int) -> int:
        if n > self.left:
            raise EOFError
        self.left -= n
        return (self.value >> self.left) & ((1 << n) - 1)


def _units(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(start code, payload up to the next start code) of each unit in data."""
    at = data.find(START)
    while 0 <= at and at + 3 < len(data):
        end = data.find(START, at + 4)
        yield data[at + 3], data[at + 4:end if end >= 0 else len(data)]
        at = end


class _Layer:
    """What the decoder knows from the stream headers it has read."""

    def __init__(self) -> None:
        self.time_increment_bits = 0  # 0: no VOL read yet

    def read_headers(self, data: bytes) -> str:
        """Read the headers in data (a decoder reads the first VOL of each
        packet only); a reason not to trust the stream, or ""."""
        vol_read = False
        for code, payload in _units(data):
            if code in VOL_CODES and not vol_read:
                vol_read = True
                try:
                    problem = self._read_vol(payload)
                except EOFError:
                    problem = "an MPEG-4 VOL header is cut short"
                if problem:
                    return problem
            elif code == VOS and payload[:1] and payload[0] in STUDIO_PROFILE_LEVELS:
                return "MPEG-4 part 2 studio profile"
            elif code == USER_DATA:
                text = payload[:255].split(b"\0")[0]
                if DIVX_PACKED.match(text):
                    return (f"MPEG-4 part 2 with packed B-frames (user data "
                            f"{text.decode('latin-1')!r}): packets are not frames")
        return ""

    def _read_vol(self, payload: bytes) -> str:
        bits = _Bits(payload)
        bits.read(1)  # random_accessible_vol
        if bits.read(8) in STUDIO_VO_TYPES:
            return "MPEG-4 part 2 studio profile"
        if bits.read(1):  # is_object_layer_identifier: verid, priority
            bits.read(7)
        if bits.read(4) == EXTENDED_PAR:
            bits.read(16)
        if bits.read(1):  # vol_control_parameters: chroma format, low delay
            bits.read(3)
            if bits.read(1):
                bits.read(VBV_PARAMETER_BITS)
        if bits.read(2) != RECT_SHAPE:
            return "MPEG-4 part 2 with a non-rectangular shape"
        bits.read(1)
        resolution = bits.read(16)
        if resolution == 0:
            return "an MPEG-4 VOL without a time increment resolution"
        self.time_increment_bits = max(1, (resolution - 1).bit_length())
        bits.read(1)
        if bits.read(1):  # fixed_vop_rate
            bits.read(self.time_increment_bits)
        bits.read(29)  # markers, width, height
        if bits.read(1):
            return "interlaced MPEG-4 part 2: B-frame timing depends on where decoding starts"
        return ""

    def read_vop(self, payload: bytes) -> tuple[int, bool] | None:
        """(coding type, vop_coded) of a VOP header, or None where FFmpeg would
        have to guess the time increment size."""
        if not self.time_increment_bits:
            return None
        bits = _Bits(payload)
        try:
            coding_type = bits.read(2)
            while bits.read(1):  # modulo_time_base
                pass
            bits.read(1 + self.time_increment_bits)  # marker, vop_time_increment
            if not bits.read(1):  # the marker FFmpeg checks to trust the size
                return None
            return coding_type, bool(bits.read(1))
        except EOFError:
            return None


def _split(head: bytes) -> tuple[bytes, bytes] | None:
    """A packet head's stream headers (the units before its VOP but the GOV,
    whose time code differs at every keyframe) and its VOP header."""
    vop = head.find(START + bytes([VOP]))
    if vop < 0:
        return None  # headers longer than the scan keeps
    headers = b"".join(START + bytes([code]) + payload
                       for code, payload in _units(head[:vop]) if code != GOV)
    return headers, head[vop + 4:]


def _packet_problem(layer: _Layer, n: int, vops: int, head: bytes, key: bool,
                    key_headers: bytes) -> str:
    if vops != 1:
        return f"MPEG-4 packet {n} holds {vops} VOPs: packets are not frames (packed B-frames?)"
    parts = _split(head)
    if parts is None:
        return f"MPEG-4 packet {n}: headers too long to check"
    headers, vop_header = parts
    if headers != (key_headers if key else b""):
        return (f"MPEG-4 packet {n} carries other stream headers than the first keyframe: "
                "a decode from a keyframe would not see the same ones")
    vop = layer.read_vop(vop_header)
    if vop is None:
        return f"MPEG-4 packet {n}: a VOP header the decoder would have to guess at"
    coding_type, coded = vop
    if not coded:
        return f"MPEG-4 packet {n} is a not-coded VOP, which decodes to no frame"
    if key and coding_type != I_VOP:
        return f"MPEG-4 packet {n} is flagged key but is not an I-VOP"
    return ""


def packing_problem(extradata: bytes, codec_tag: str, vops: Sequence[int],
                    heads: Sequence[bytes], keys: Sequence[bool]) -> str:
    """Why the index of this stream cannot be trusted, or "".

    vops, heads, keys: per packet in decode order, how many VOP start codes
    it holds, its first bytes (headers and the first VOP header), its key flag.
    """
    if codec_tag == "3IV1":
        return "3ivx MPEG-4 part 2 (FFmpeg reads its VOP times differently)"
    layer = _Layer()
    first_key = next((head for head, key in zip(heads, keys) if key), b"")
    key_headers = (_split(first_key) or (b"", b""))[0]
    problem = layer.read_headers(extradata) or layer.read_headers(key_headers)
    if problem:
        return problem
    for n, (count, head, key) in enumerate(zip(vops, heads, keys)):
        problem = _packet_problem(layer, n, count, head, bool(key), key_headers)
        if problem:
            return problem
    return ""
