"""Test videos made at test time by the ffmpeg CLI, and reference frames from it.

Each clip is small (a few seconds of a lavfi test source) and made once per
test session, and so is each reference: the library's folder is shared by the
session's worker processes (pytest-xdist), which take a file lock to make a
file, so no clip is encoded twice. Reference frames come from the ffmpeg CLI
with the same scaler (bilinear, rgb24, passthrough timing): it links the same
libswscale as our extension, so the comparison is bit-exact.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import struct
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SRC = "testsrc2=size={w}x{h}:rate={fps}"


@dataclass(frozen=True)
class Clip:
    name: str
    width: int
    height: int
    seconds: float
    args: tuple[str, ...]  # encoder and muxer arguments
    fps: int = 24
    audio: bool = False
    video: bool = True
    pix_fmt: str = "yuv420p"
    derive_from: str | None = None  # stream-copy this clip instead of encoding a source
    pack_bframes: bool = False  # with derive_from (MPEG-4 part 2): DivX-style packed B-frames
    truncate_tail: int = 0  # bytes cut off the end of the file after muxing
    # With derive_from: a copy whose packets at these decode positions (first
    # video stream) have their first bytes overwritten, so the decoder rejects
    # them (an H.264/HEVC NAL length, a VP9 frame marker).
    damage: tuple[int, ...] = ()
    two_pass: bool = False  # encode twice (libvpx alternate reference frames need it)
    # With derive_from (MP4): a copy where the first sample from this decode
    # position on that is shown 3+ frames after it is decoded gets a
    # composition offset of one tick: its pts now puts it before frames the
    # decoder still outputs first (a lying timestamp, see lie_about_pts).
    pts_lie_from: int | None = None

    @property
    def broken(self) -> bool:
        """Made wrong on purpose: damaged packets or a lying timestamp."""
        return bool(self.damage) or self.pts_lie_from is not None


X264 = ("-c:v", "libx264", "-preset", "veryfast", "-bf", "3", "-g", "24", "-keyint_min", "24",
        "-sc_threshold", "0")
# Variable frame rate: 24 frames at 24 fps (0-1 s), 16 at 8 fps (1-3 s), then 12 fps to the end
# (every pts a multiple of 1/24 s, so no two frames share one). Passthrough keeps the timing.
VFR = ("-vf", "setpts='if(lt(N,24),N/24,if(lt(N,40),1+(N-24)/8,3+(N-40)/12))/TB'",
       "-fps_mode", "passthrough")

CLIPS = {c.name: c for c in [
    # H.264 with B-frames, moov first; also carries an audio track.
    Clip("h264_faststart.mp4", 256, 144, 3, X264 + ("-movflags", "+faststart"), audio=True),
    # The same codec with the index at the end of the file.
    Clip("h264_moov_end.mp4", 256, 144, 3, X264),
    # HEVC with open GOPs (x265 default), BT.709 tagged.
    Clip("hevc.mp4", 256, 144, 3, ("-c:v", "libx265", "-preset", "ultrafast", "-tag:v", "hvc1",
                                   "-x265-params", "keyint=24:min-keyint=24:bframes=3:log-level=error",
                                   "-colorspace", "bt709", "-color_primaries", "bt709",
                                   "-color_trc", "bt709")),
    Clip("vp9.webm", 256, 144, 3, ("-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8",
                                   "-g", "24", "-b:v", "300k")),
    Clip("av1.mkv", 256, 144, 2, ("-c:v", "libsvtav1", "-preset", "12", "-g", "24")),
    # MPEG-4 part 2 with B-frames in AVI: no pts for I- and P-frames (the demuxer infers them),
    # open GOPs (B-frames after a keyframe reference the previous GOP).
    Clip("mpeg4.avi", 256, 144, 3, ("-c:v", "mpeg4", "-bf", "2", "-g", "24", "-q:v", "5")),
    Clip("mpeg4_nobf.avi", 256, 144, 3, ("-c:v", "mpeg4", "-bf", "0", "-g", "24", "-q:v", "5")),
    # GOP 3 with 2 B-frames: keyframes follow each other in decode order (I0 I3 B1 B2 I6 ...).
    Clip("mpeg4_gop3.avi", 256, 144, 2, ("-c:v", "mpeg4", "-bf", "2", "-g", "3", "-q:v", "5")),
    # The same frames with DivX packed B-frames: packets are not frames.
    Clip("mpeg4_packed.avi", 256, 144, 0, (), derive_from="mpeg4.avi", pack_bframes=True),
    # H.264 with B-frames in AVI: nothing gives its presentation order but decoding.
    Clip("h264.avi", 256, 144, 2, X264),
    # Odd size, 4:4:4 chroma.
    Clip("odd_321x241.mp4", 321, 241, 2, X264, pix_fmt="yuv444p"),
    # 4:2:0 at a width that is not a multiple of 8: swscale's unscaled converter works in
    # 8-pixel blocks (tail and overrun).
    Clip("h264_340x194.mp4", 340, 194, 2, X264),
    # Full range (yuvj420p).
    Clip("fullrange.mp4", 256, 144, 2, X264 + ("-color_range", "pc"), pix_fmt="yuvj420p"),
    # Open GOPs in H.264: non-IDR keyframes whose leading B-frames reference the previous GOP.
    Clip("h264_open_gop.mp4", 256, 144, 3, ("-c:v", "libx264", "-preset", "veryfast", "-bf", "3",
                                            "-x264-params",
                                            "keyint=24:open-gop=1:b-adapt=0:b-pyramid=none")),
    # H.264 with B-frames in Matroska (block timestamps are pts; no sample table).
    Clip("h264_bframes.mkv", 256, 144, 3, X264),
    # An edit list that hides the first frames of a GOP (packets flagged discard).
    Clip("h264_editlist.mp4", 256, 144, 0, ("-ss", "0.55"), derive_from="h264_moov_end.mp4"),
    # Fragmented MP4 (CMAF / DASH / recorders): an empty moov, then a moof + mdat per GOP;
    # the sample tables are in the fragments. Carries audio too.
    Clip("h264_fragmented.mp4", 256, 144, 3,
         X264 + ("-movflags", "+frag_keyframe+empty_moov+default_base_moof"), audio=True),
    # MPEG-TS (broadcast, HLS segments): no index in the container, read sequentially.
    Clip("h264.ts", 256, 144, 2, X264),
    # Ogg (Theora + Vorbis): its demuxer checksums every page it reads.
    Clip("theora_vorbis.ogv", 256, 144, 2,
         ("-c:v", "libtheora", "-q:v", "6", "-g", "24", "-c:a", "libvorbis"), audio=True),
    # A longer, larger clip for GIL and throughput checks.
    Clip("long_640x360.mp4", 640, 360, 12, X264 + ("-movflags", "+faststart")),
    Clip("audio_only.m4a", 0, 0, 1, ("-c:a", "aac"), audio=True, video=False),
    # Variable frame rate (52 frames over 4 s; see VFR), in Matroska and in MP4.
    Clip("h264_vfr.mkv", 256, 144, 4, VFR + X264),
    Clip("h264_vfr.mp4", 256, 144, 4, VFR + X264),
    # Non-square pixels: sample aspect ratio 4:3, so 256x144 displays as 341.33x144.
    Clip("h264_sar4x3.mp4", 256, 144, 1, ("-vf", "setsar=4/3") + X264),
    # 90 frames, moov first, the last 300 bytes cut off: the last sample (in file order) is
    # incomplete and does not decode, so 89 frames decode where the sample table lists 90.
    Clip("h264_truncated.mp4", 256, 144, 3.75, X264 + ("-movflags", "+faststart"),
         truncate_tail=300),
    # VP8 with alternate reference frames: invisible frames in WebM blocks of their own
    # (same timestamp as the next frame), which the decoder consumes without output.
    Clip("vp8_altref.webm", 160, 96, 3, ("-c:v", "libvpx", "-b:v", "200k", "-auto-alt-ref", "1",
                                         "-lag-in-frames", "16", "-g", "60"), fps=30,
         two_pass=True),
    # Damaged streams (decode positions; h264_moov_end.mp4: GOP 24, keyframes at 0, 24, 48):
    # a reference P-frame, a non-reference B-frame, the second keyframe.
    Clip("damaged_h264_ref.mp4", 0, 0, 0, (), derive_from="h264_moov_end.mp4", damage=(5,)),
    Clip("damaged_h264_nonref.mp4", 0, 0, 0, (), derive_from="h264_moov_end.mp4", damage=(7,)),
    Clip("damaged_h264_key.mp4", 0, 0, 0, (), derive_from="h264_moov_end.mp4", damage=(24,)),
    Clip("damaged_hevc.mp4", 0, 0, 0, (), derive_from="hevc.mp4", damage=(30,)),
    Clip("damaged_vp9.webm", 0, 0, 0, (), derive_from="vp9.webm", damage=(33,)),
    Clip("lying_pts_h264.mp4", 0, 0, 0, (), derive_from="h264_moov_end.mp4", pts_lie_from=16),
]}


@dataclass
class MediaLibrary:
    root: Path
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _refs: dict = field(default_factory=dict)

    @contextlib.contextmanager
    def _making(self, out: Path):
        """Held while out is made: by one thread here, and one process of the session."""
        with self._lock, open(out.with_name(f".{out.name}.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def path(self, name: str) -> Path:
        clip = CLIPS[name]
        source = self.path(clip.derive_from) if clip.derive_from else None
        out = self.root / name
        if not out.exists():
            with self._making(out):
                if not out.exists():
                    make_clip(clip, out, source)
        return out

    def reference(self, name: str, height: int, width: int) -> np.ndarray:
        """Every frame of the clip, scaled like ours, from the ffmpeg CLI."""
        key = (name, height, width)
        cached = self._refs.get(key)
        if cached is not None:
            return cached
        path = self.path(name)
        saved = self.root / "refs" / f"{name}.{height}x{width}.npy"
        if not saved.exists():
            saved.parent.mkdir(exist_ok=True)
            with self._making(saved):
                if not saved.exists():
                    part = saved.with_name(saved.name + ".part.npy")
                    np.save(part, reference_frames(path, height, width))
                    os.replace(part, saved)
        frames = np.load(saved)
        frames.flags.writeable = False  # shared by every test that asks: nobody changes it
        return self._refs.setdefault(key, frames)


def make_clip(clip: Clip, out: Path, source: Path | None = None) -> None:
    cmd = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    part = str(out) + ".part" + out.suffix
    if source is not None and clip.damage:
        damage_packets(source, Path(part), clip.damage)
        os.replace(part, out)
        return
    if source is not None and clip.pts_lie_from is not None:
        lie_about_pts(source, Path(part), clip.pts_lie_from)
        os.replace(part, out)
        return
    if source is not None and clip.pack_bframes:
        pack_bframes(source, Path(part), clip.fps)
        os.replace(part, out)
        return
    if source is not None:
        subprocess.run([*cmd, *clip.args, "-i", str(source), "-c", "copy", part], check=True)
        os.replace(part, out)
        return
    if clip.video:
        cmd += ["-f", "lavfi", "-i",
                SRC.format(w=clip.width, h=clip.height, fps=clip.fps)]
    if clip.audio:
        cmd += ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000"]
    cmd += ["-t", str(clip.seconds)]
    if clip.video:
        cmd += ["-pix_fmt", clip.pix_fmt]
    if clip.audio and clip.video:
        cmd += ["-c:a", "aac", "-b:a", "32k"]
    env = {**os.environ, "SVT_LOG": "1"}  # the AV1 encoder prints its banner unless told
    if clip.two_pass:
        log = str(out) + ".passlog"
        subprocess.run([*cmd, *clip.args, "-pass", "1", "-passlogfile", log, "-f", "null", "-"],
                       check=True, env=env)
        cmd += ["-pass", "2", "-passlogfile", log]
    cmd += [*clip.args, str(out) + ".part" + out.suffix]
    subprocess.run(cmd, check=True, env=env)
    if clip.truncate_tail:
        os.truncate(part, os.path.getsize(part) - clip.truncate_tail)
    os.replace(part, out)


def damage_packets(source: Path, out: Path, positions: tuple[int, ...], middle: int = 0) -> None:
    """A copy of source with packets (decode positions of its first video
    stream) damaged: their first 4 bytes set to 0xff, or with ``middle``,
    that many bytes in the middle of each overwritten with a fixed pattern
    (inside the entropy-coded data, where a decoder may not notice)."""
    data = bytearray(source.read_bytes())
    packets = ffprobe_packets(source)
    for k in positions:
        pos = packets[k]["pos"]
        if middle:  # half the packet's size past where ffprobe says it is
            at = pos + packets[k]["size"] // 2
            data[at:at + middle] = bytes((37 * i + 11) & 0xFF for i in range(middle))
            continue
        if source.suffix in (".webm", ".mkv"):
            # Matroska gives where the block's content starts: skip its track
            # number (a vint), timecode and flags to reach the payload.
            pos += (9 - data[pos].bit_length()) + 3
        data[pos:pos + 4] = b"\xff\xff\xff\xff"
    out.write_bytes(bytes(data))


def lie_about_pts(source: Path, out: Path, first: int) -> None:
    """Rewrite one ctts entry of a single-track MP4 (see Clip.pts_lie_from)."""
    data = bytearray(source.read_bytes())
    at = data.index(b"ctts") + 4
    count = struct.unpack_from(">I", data, at + 4)[0]
    packets = ffprobe_packets(source)
    frame = min(p["dts"] - q["dts"] for p, q in zip(packets[1:], packets))
    sample = 0
    for e in range(count):
        entry = at + 8 + 8 * e
        samples, offset = struct.unpack_from(">Ii", data, entry)
        if sample >= first and samples == 1 and offset >= 3 * frame:
            struct.pack_into(">Ii", data, entry, 1, 1)
            out.write_bytes(bytes(data))
            return
        sample += samples
    raise AssertionError(f"{source}: no sample to lie about from {first} on")


VOP = b"\x00\x00\x01\xb6"
# A not-coded P-VOP at 24 fps (5-bit time increment): the placeholder of packed bitstreams.
NOT_CODED_P_VOP = VOP + bytes([0b01010000, 0b01001111])
DIVX_PACKED_USER_DATA = b"\x00\x00\x01\xb2DivX503b1393p"


def pack_bframes(source: Path, out: Path, fps: int) -> None:
    """A DivX-style packed copy of an MPEG-4 part 2 AVI (FFmpeg can only unpack).

    Each I/P-VOP that B-VOPs follow in decode order takes the first of them into
    its packet, the others move up one packet, and a not-coded VOP fills the
    place left; the first packet gets the user data that tells decoders so.
    Packets pass through the image2 muxer and demuxer: one file per packet.
    """
    cmd = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    with tempfile.TemporaryDirectory() as tmp:
        pattern = f"{tmp}/%05d.m4v"
        subprocess.run([*cmd, "-i", str(source), "-c", "copy", "-f", "image2", pattern], check=True)
        files = sorted(Path(tmp).glob("*.m4v"))
        packets = [f.read_bytes() for f in files]
        for f, data in zip(files, packed_bframes(packets), strict=True):
            f.write_bytes(data)
        subprocess.run([*cmd, "-f", "image2", "-framerate", str(fps), "-c:v", "mpeg4",
                        "-i", pattern, "-c", "copy", str(out)], check=True)


def packed_bframes(packets: list[bytes]) -> list[bytes]:
    def is_b(data: bytes) -> bool:
        return data[data.find(VOP) + 4] >> 6 == 2

    out: list[bytes] = []
    i = 0
    while i < len(packets):
        j = i + 1
        while j < len(packets) and is_b(packets[j]):
            j += 1
        b_vops = packets[i + 1:j]
        out += [packets[i] + b_vops[0], *b_vops[1:], NOT_CODED_P_VOP] if b_vops else [packets[i]]
        i = j
    first_vop = out[0].find(VOP)
    out[0] = out[0][:first_vop] + DIVX_PACKED_USER_DATA + out[0][first_vop:]
    return out


def reference_frames(path: Path, height: int, width: int, threads: int | None = None,
                     input_options: tuple[str, ...] = ()) -> np.ndarray:
    """Every frame by the ffmpeg CLI (``threads``: its decoder's thread count;
    ``input_options``: more options before ``-i``)."""
    threading = ["-threads", str(threads)] if threads else []
    raw = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", *threading, *input_options, "-i", str(path),
         "-map", "0:v:0", "-vf", f"scale={width}:{height}:flags=bilinear,format=rgb24",
         "-fps_mode", "passthrough", "-f", "rawvideo", "-"],
        check=True, capture_output=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, height, width, 3)


def reference_gray_samples(path: Path, pix_fmt: str, height: int, width: int) -> np.ndarray:
    """Every frame of a gray video by the ffmpeg CLI, its samples as coded: uint16
    (N, height, width) in ``pix_fmt`` (a little-endian gray format, the video's own)."""
    raw = subprocess.run(
        ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path), "-map", "0:v:0",
         "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", pix_fmt, "-"],
        check=True, capture_output=True).stdout
    return np.frombuffer(raw, "<u2").reshape(-1, height, width)


def ffprobe_frame_times(path: Path) -> np.ndarray:
    """Each frame's pts_time (seconds) of the first video stream, by ffprobe."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=pts_time",
         "-of", "json", str(path)], check=True, capture_output=True, text=True).stdout
    return np.array([float(f["pts_time"]) for f in json.loads(out)["frames"]])


def ffprobe_frame_count(path: Path) -> int:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames",
         "-show_entries", "stream=nb_read_frames", "-of", "json", str(path)],
        check=True, capture_output=True, text=True).stdout
    return int(json.loads(out)["streams"][0]["nb_read_frames"])


def ffprobe_packets(path: Path) -> list[dict]:
    """The first video stream's packets in decode order (pts, dts, pos, size, flags), by ffprobe."""
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_packets",
         "-show_entries", "packet=pts,dts,pos,size,flags", "-of", "json", str(path)],
        check=True, capture_output=True, text=True).stdout
    return [{**p, "pos": int(p["pos"]), "size": int(p["size"])}
            for p in json.loads(out)["packets"]]
