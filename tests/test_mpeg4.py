"""The MPEG-4 part 2 check behind the trust of its frame index (fluxon_video/mpeg4.py),
on packet heads taken from FFmpeg's encoder (256x144 at 24 fps, VOL in every keyframe)."""

from __future__ import annotations

from fluxon_video.mpeg4 import packing_problem

HEADERS = bytes.fromhex("000001b0f1000001b5a913000001000000012008d48d0800c508041214103f"
                        "000001b24c61766335392e33372e313030")
INTERLACED_HEADERS = HEADERS.replace(bytes.fromhex("041214103f"), bytes.fromhex("04121c103f"))
GOV = bytes.fromhex("000001b3001007")
I_VOP = bytes.fromhex("000001b61060ad84690780")
P_VOP = bytes.fromhex("000001b651f05414f54e56")
B_VOP = bytes.fromhex("000001b690e0a49d123456")
NOT_CODED_P_VOP = bytes.fromhex("000001b6504f")  # vop_coded 0
DIVX_PACKED = b"\x00\x00\x01\xb2DivX503b1393p"


def check(heads, keys=None, extradata=b"", tag="FMP4"):
    keys = keys if keys is not None else [i == 0 for i in range(len(heads))]
    vops = [head.count(b"\x00\x00\x01\xb6") for head in heads]
    return packing_problem(extradata, tag, vops, heads, keys)


def gop(headers=HEADERS):
    return [headers + GOV + I_VOP, P_VOP, B_VOP, B_VOP, P_VOP, B_VOP]


def test_one_coded_vop_per_packet_with_headers_at_every_keyframe_passes():
    assert check(gop() + gop(), [True] + [False] * 5 + [True] + [False] * 5) == ""
    # Headers in the extradata only (a global header) are seen by every decode.
    assert check([GOV + I_VOP, P_VOP, B_VOP] * 2, [True, False, False] * 2,
                 extradata=HEADERS) == ""


def test_packed_b_frames_are_caught_by_their_user_data_and_their_packets():
    packed = [HEADERS + DIVX_PACKED + GOV + I_VOP, P_VOP + B_VOP, B_VOP, NOT_CODED_P_VOP]
    assert "packed B-frames (user data 'DivX503b1393p')" in check(packed)
    assert "packed B-frames" in check(packed[:1], extradata=DIVX_PACKED)
    unmarked = [HEADERS + GOV + I_VOP, P_VOP + B_VOP, B_VOP, NOT_CODED_P_VOP]
    assert "packet 1 holds 2 VOPs" in check(unmarked)
    assert "holds 0 VOPs" in check([HEADERS + GOV + I_VOP, b""])


def test_a_not_coded_vop_is_not_a_frame():
    assert "packet 2 is a not-coded VOP" in check(gop()[:2] + [NOT_CODED_P_VOP])


def test_headers_a_decode_from_a_keyframe_would_miss_are_caught():
    # The VOL only in the first keyframe: a decode from the second lacks it.
    heads = gop() + [GOV + I_VOP, P_VOP]
    assert "other stream headers than the first keyframe" in check(
        heads, [True] + [False] * 5 + [True, False])
    assert "packet 1 carries other stream headers" in check([HEADERS + GOV + I_VOP,
                                                             HEADERS + P_VOP])


def test_keyframes_must_be_i_vops():
    assert "flagged key but is not an I-VOP" in check([HEADERS + GOV + I_VOP, HEADERS + GOV + P_VOP],
                                                      [True, True])


def test_what_the_decoder_reads_otherwise_is_not_trusted():
    assert "interlaced" in check(gop(INTERLACED_HEADERS))
    assert "3ivx" in check(gop(), tag="3IV1")
    assert "studio profile" in check(gop(HEADERS.replace(b"\xb0\xf1", b"\xb0\xe1")))
    # No VOL anywhere: FFmpeg would guess the time increment size.
    assert "would have to guess" in check([GOV + I_VOP, P_VOP])
    # A VOP beyond what the scan keeps of a packet (MPEG4_HEAD_MAX).
    assert "headers too long" in packing_problem(b"", "FMP4", [1], [HEADERS], [True])
