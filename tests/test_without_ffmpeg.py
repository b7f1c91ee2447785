"""A build without FFmpeg support: the package imports, readers fail clearly.

The tree is copied without its compiled extensions, which is what
FLUXON_VIDEO_WITHOUT_FFMPEG=1 installs, and imported in a fresh interpreter.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy

import fluxon_video

PACKAGE = Path(fluxon_video.__file__).parent


def test_pure_python_package_imports_and_explains(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "fluxon_video",
                    ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    script = (
        "import fluxon_video, sys\n"
        f"assert fluxon_video.__file__.startswith({str(tmp_path)!r}), fluxon_video.__file__\n"
        "assert not fluxon_video.HAVE_FFMPEG\n"
        "try:\n"
        "    fluxon_video.decode_local_frames('x.mp4', [0], 8, 8)\n"
        "except fluxon_video.FluxonFsUnavailableError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    sys.exit('no error')\n"
    )
    # -S: no site processing, so the editable install's path hooks stay out;
    # numpy is still found through its own directory.
    numpy_dir = str(Path(numpy.__file__).parent.parent)
    result = subprocess.run([sys.executable, "-S", "-c", script], cwd=tmp_path,
                            capture_output=True, text=True,
                            env={"PYTHONPATH": f"{tmp_path}:{numpy_dir}"})
    assert result.returncode == 0, result.stderr
    assert "FFmpeg support" in result.stdout
    assert "libavformat-dev" in result.stdout
