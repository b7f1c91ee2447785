"""fluxon-video doctor: each link from this process to the bytes, checked in order.

the install (the compiled extension, the FFmpeg libraries, a decode in this
process) -> config -> identity -> KV (Redis) -> each export: its agents'
/healthz, a listing and a stat with the identity's token, one byte range
read. Every check prints a verdict and what it saw, a failure with its cause
(``... (ConnectionError: ...)``); the first failure of a chain says what to
look at. Without a config only the install is checked.
"""

from __future__ import annotations

import ctypes
import io
import os
import shutil
import ssl
import time
import urllib.error
import urllib.request
import wave
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fluxon_video.errors import FluxonFsError
from fluxon_video.fs.config import FluxonFsExport
from fluxon_video.fs.kv import redact
from fluxon_video.patcher import FluxonFsPatcher


class Failed(Exception):
    """A check's own verdict: its message is the line (causes appended)."""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    skipped: bool = False  # not run (no config): neither a pass nor a failure


def describe(exc: BaseException) -> str:
    """An error and its cause on one line: ``message (Type: cause)``; a cause
    the message already quotes is not repeated."""
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, (FluxonFsError, Failed)):
        text = f"{type(exc).__name__}: {text}"
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    said = str(cause) if cause is not None else ""
    if cause is not None and not (said and said in text):  # the first cause, once
        text += f" ({type(cause).__name__}: {said or type(cause).__name__})"
    return text


def _timed(name: str, call: Callable[[], str]) -> Check:
    t0 = time.perf_counter()
    try:
        detail = call()
    except Exception as exc:  # a verdict, never a traceback: the line says what failed
        return Check(name, False, describe(exc))
    return Check(name, True, f"{detail} ({(time.perf_counter() - t0) * 1e3:.0f} ms)")


# ---- the install ----

def _version_text(v: int) -> str:
    return f"{v >> 16}.{(v >> 8) & 0xff}.{v & 0xff}"


def _swresample_version(audio_module: object) -> str:
    """The libswresample the audio extension runs against: the shared library
    this process loaded for it (or the extension itself, if linked statically),
    asked by ctypes, since the extension does not report it."""
    candidates: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if "libswresample" in os.path.basename(path) and path not in candidates:
                    candidates.append(path)
    except OSError:  # not Linux
        pass
    candidates.append(getattr(audio_module, "__file__", "") or "")
    for path in candidates:
        try:
            function = ctypes.CDLL(path).swresample_version  # the copy loaded: same handle
        except (OSError, AttributeError):
            continue
        function.restype = ctypes.c_uint
        return _version_text(function())
    return "linked (its version is not visible on this platform)"


def library_versions() -> dict[str, str]:
    """The FFmpeg libraries the compiled extensions run against, libswresample
    (the audio's) included. FluxonFsUnavailableError without FFmpeg support."""
    from fluxon_video.native import require_audio, require_native

    _, decode = require_native("reporting library versions")
    audio = require_audio("reporting library versions")
    versions = dict(decode.library_versions())
    versions.setdefault("libswresample", _swresample_version(audio))
    return versions


def _generated_video(width: int = 32, height: int = 16, frames: int = 3) -> bytes:
    """A raw YUV4MPEG2 video, made here (no encoder, no ffmpeg CLI): frame k gray."""
    chroma = np.full((height // 2) * (width // 2) * 2, 128, np.uint8).tobytes()
    parts = [f"YUV4MPEG2 W{width} H{height} F25:1 Ip A1:1 C420jpeg\n".encode()]
    for k in range(frames):
        parts += [b"FRAME\n", np.full(width * height, 40 + 80 * k, np.uint8).tobytes(), chroma]
    return b"".join(parts)


def _generated_audio(rate: int = 8000) -> tuple[bytes, np.ndarray]:
    """A 16-bit PCM WAV file made with Python's wave module, and its samples."""
    samples = ((np.arange(rate // 10) * 37) % 20000 - 10000).astype("<i2")
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(samples.tobytes())
    return out.getvalue(), samples


def check_install() -> list[Check]:
    """The extension loads, the FFmpeg libraries it runs against, and a video
    and an audio file decoded in this process with no ffmpeg CLI."""
    import fluxon_video
    from fluxon_video.native import require_audio, require_native

    here = os.path.dirname(fluxon_video.__file__)
    try:
        require_native("decoding")
        require_audio("decoding")
    except FluxonFsError as exc:
        return [Check("extension", False, describe(exc))]
    checks = [Check("extension", True, f"fluxon_video {fluxon_video.__version__}: the compiled "
                                       f"extensions load from {here}")]
    checks.append(_timed("ffmpeg libs", lambda: ", ".join(
        f"{lib} {version}" for lib, version in library_versions().items())))

    def decode() -> str:
        from fluxon_video.opening import open_video

        with open_video(_generated_video()) as reader:
            shades = reader.read_frames_numpy([0, 1, 2]).mean(axis=(1, 2, 3))
        if len(shades) != 3 or not (shades[0] < shades[1] < shades[2]):
            raise Failed(f"a generated 3-frame video decoded wrong (mean shades {shades})")
        data, samples = _generated_audio()
        with open_video(data) as reader:
            got = reader.read_audio(0.0, 0.1).data
        if not np.array_equal(got, samples[None, :] / np.float32(32768)):
            raise Failed("a generated WAV file's samples decoded wrong")
        cli = shutil.which("ffmpeg")
        return ("decoded a generated video (3 frames) and WAV audio in this process, without "
                "the ffmpeg CLI (" + (f"{cli} is on PATH but unused" if cli else
                                      "none on PATH: not needed") + ")")

    checks.append(_timed("decode", decode))
    return checks


def check_kv(patcher: FluxonFsPatcher) -> Check:
    settings = patcher.config.client
    if not settings.redis_url:
        return Check("kv", True, "in-process piece store (no client.redis_url: nothing is "
                                 "shared between processes or nodes)")

    def probe() -> str:
        # The store itself, not the client's guard around it (which turns every
        # failure into a miss): its exception is the cause this line gives.
        store = patcher.client.kv.store
        key = f"fluxonfs:doctor:{time.time_ns()}"
        try:
            store.put(key, {"probe": b"ok"}, 10)
            store.delete(key)
        except Exception as exc:
            raise Failed(f"Redis {redact(','.join(settings.redis_urls))} refused a write or "
                          f"does not answer: check client.redis_url") from exc
        seal = patcher.client.seal
        return (f"Redis {redact(','.join(settings.redis_urls))} answers a write and a delete; "
                f"entries sealed ({seal.protection.value}) with key id {seal.current_key_id()}")
    return _timed("kv", probe)


def check_agents(patcher: FluxonFsPatcher, export: FluxonFsExport) -> list[Check]:
    bundle = patcher.config.client.agent_ca_bundle
    context = ssl.create_default_context(cafile=bundle) if bundle else None
    checks = []
    for url in export.agent_urls:
        def health(url: str = url) -> str:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=5,
                                            context=context) as answer:
                    if answer.read() != b"ok":
                        raise Failed(f"{url}/healthz did not answer ok")
            except urllib.error.URLError as exc:
                # urlopen wraps the socket's error: give it, not "<urlopen error ...>".
                reason = exc.reason if isinstance(exc.reason, BaseException) else exc
                raise Failed(f"{url} does not answer /healthz") from reason
            return f"{url} is up"
        checks.append(_timed(f"{export.name}: agent", health))
    if not export.agent_urls:
        checks.append(Check(f"{export.name}: agent", True,
                            f"served in this process from {export.root}"))
    return checks


def check_export(patcher: FluxonFsPatcher, export: FluxonFsExport) -> list[Check]:
    checks = check_agents(patcher, export)
    if not all(c.ok for c in checks):
        return checks
    found: list[str] = []

    def listing() -> str:
        first = next(iter(patcher.list_files(export.name)), None)
        if first is None:
            raise Failed(f"{export.name}: the export lists no file")
        found.append(first.relpath)
        return f"the token lists {export.name} (first file: {first.relpath})"

    checks.append(_timed(f"{export.name}: list", listing))
    if not found:
        return checks
    relpath = found[0]

    def stat() -> str:
        version = patcher.file_version(export.name, relpath)
        return f"{relpath}: {version.size} bytes"

    def read() -> str:
        data = patcher.read_range(export.name, relpath, 0, min(4096, patcher.file_version(
            export.name, relpath).size))
        return f"read {len(data)} bytes of {relpath}"

    checks.append(_timed(f"{export.name}: stat", stat))
    checks.append(_timed(f"{export.name}: read", read))
    return checks


def run_doctor(patcher: FluxonFsPatcher, export_names: list[str] | None = None) -> list[Check]:
    """The config's chain (after check_install, which needs no config)."""
    checks = [Check("config", True, f"{patcher.config.source or '(Python)'}: "
                                    f"{len(patcher.config.exports)} export(s), identities "
                                    f"{', '.join(patcher.config.identities) or 'none'}")]
    who = patcher.identity
    checks.append(Check("identity", who is not None,
                        f"acting as {who.name}" if who is not None else
                        "none: pass --identity or set FLUXON_VIDEO_IDENTITY"))
    checks.append(check_kv(patcher))
    if who is None:
        return checks
    for name in export_names or list(patcher.config.exports):
        checks += check_export(patcher, patcher.config.export(name))
    return checks
