"""Build of the Cython extensions that bind FFmpeg's libav* libraries.

FLUXON_VIDEO_WITHOUT_FFMPEG=1 builds the pure-Python package only; opening a
reader then raises FluxonFsUnavailableError (a build-time switch, not a second
read path).
"""
import os
import sys

from setuptools import Extension, setup

LIBAV_PACKAGES = ["libavformat", "libavcodec", "libavutil", "libswscale", "libswresample"]
# Lowest layer first: the byte source, the container, the pipeline, conversion,
# the decode paths, the decoder, the benchmark's floor, frames to model layout.
NATIVE_MODULES = ["_errors", "_avio", "_demux", "_pipeline", "_convert", "_decode_paths", "_decode",
                  "_audio", "_floor", "_layout"]
DEBIAN_PACKAGES = ("libavformat-dev libavcodec-dev libavutil-dev libswscale-dev "
                   "libswresample-dev pkg-config")


def _fail(message: str) -> None:
    sys.stderr.write(
        f"\nfluxon_video: {message}\n"
        f"  On Debian/Ubuntu: sudo apt-get install {DEBIAN_PACKAGES}\n"
        "  (or run `make build`, which installs them), or set FLUXON_VIDEO_WITHOUT_FFMPEG=1\n"
        "  to build without FFmpeg support.\n\n"
    )
    raise SystemExit(1)


def ffmpeg_extensions():
    try:
        import pkgconfig
    except ImportError:
        _fail("the build needs the `pkgconfig` Python package (pip install pkgconfig)")
    try:
        missing = [lib for lib in LIBAV_PACKAGES if not pkgconfig.exists(lib)]
    except OSError:  # no pkg-config binary at all
        missing = LIBAV_PACKAGES
    if missing:
        _fail(f"pkg-config cannot find the FFmpeg development files for {', '.join(missing)}.")
    from Cython.Build import cythonize

    flags = pkgconfig.parse(" ".join(LIBAV_PACKAGES))
    common = dict(
        include_dirs=["fluxon_video", *flags["include_dirs"]],
        library_dirs=flags["library_dirs"],
        libraries=flags["libraries"],
        define_macros=flags["define_macros"],
        extra_compile_args=["-O2", "-pthread", "-Wno-deprecated-declarations"],
        extra_link_args=["-pthread"],
    )
    # Each .pyx is one extension; the C helpers are linked into the one that uses them.
    c_helpers = {"_avio": ["fluxon_video/_pagecache.c"], "_pipeline": ["fluxon_video/_avlog.c", "fluxon_video/_framecheck.c"]}
    extensions = [
        Extension(f"fluxon_video.{name}", [f"fluxon_video/{name}.pyx", *c_helpers.get(name, [])],
                  **common)
        for name in NATIVE_MODULES
    ]
    return cythonize(extensions, compiler_directives={"language_level": 3,
                                                      "embedsignature": True})


without_ffmpeg = os.environ.get("FLUXON_VIDEO_WITHOUT_FFMPEG", "") not in ("", "0")
setup(ext_modules=[] if without_ffmpeg else ffmpeg_extensions())
