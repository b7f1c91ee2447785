"""Build of the Cython extensions that bind FFmpeg's libav* libraries.

FLUXON_VIDEO_WITHOUT_FFMPEG=1 builds the pure-Python package only; opening a
reader then raises FluxonFsUnavailableError (a build-time switch, not a second
read path).
"""
import os
import sys

from setuptools import Extension, setup

LIBAV_PACKAGES = ["libavformat", "libavcodec", "libavutil", "libswscale"]
DEBIAN_PACKAGES = "libavformat-dev libavcodec-dev libavutil-dev libswscale-dev pkg-config"


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
    extensions = [
        Extension("fluxon_video._errors", ["fluxon_video/_errors.pyx"], **common),
        Extension("fluxon_video._avio",
                  ["fluxon_video/_avio.pyx", "fluxon_video/_pagecache.c"], **common),
        Extension("fluxon_video._demux", ["fluxon_video/_demux.pyx"], **common),
        Extension("fluxon_video._decode",
                  ["fluxon_video/_decode.pyx", "fluxon_video/_avlog.c"], **common),
    ]
    return cythonize(extensions, compiler_directives={"language_level": 3,
                                                      "embedsignature": True})


without_ffmpeg = os.environ.get("FLUXON_VIDEO_WITHOUT_FFMPEG", "") not in ("", "0")
setup(ext_modules=[] if without_ffmpeg else ffmpeg_extensions())
