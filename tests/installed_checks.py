"""Run inside a fresh virtualenv that installed the wheel, from outside the tree.

Imports every module, asks every CLI command for --help, and reads real
frames (a clip the ffmpeg CLI makes here) through the local reader and
through an in-process FluxonFS export, checked against the CLI's frames.
Prints one line per check; any failure raises.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import fluxon_video as fv

H, W = 36, 64
COMMANDS = ["ls", "stat", "index", "warm", "read", "demo", "doctor", "agent", "versions"]


def check_installed_not_the_tree() -> None:
    path = Path(fv.__file__).resolve()
    assert "site-packages" in path.parts, path
    print(f"fluxon_video {fv.__version__} from {path.parent}")


def check_every_module_imports() -> None:
    names = [m.name for m in pkgutil.walk_packages(fv.__path__, "fluxon_video.")]
    # The [torch] extra's module, and the CLI's entry point (running it is the CLI check).
    optional = {"fluxon_video.torch", "fluxon_video.__main__"}
    # torchcodec's drop-in returns torch tensors, as torchcodec does: without
    # torch installed, its modules fail on exactly that import and nothing else.
    needs_torch = "fluxon_video.compat.torchcodec"
    have_torch = importlib.util.find_spec("torch") is not None
    imported = 0
    for name in names:
        if name in optional:
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if have_torch or exc.name != "torch" or not name.startswith(needs_torch):
                raise
            continue
        imported += 1
    assert "fluxon_video.ops.bulk" in names and "fluxon_video._decode" in names, names
    assert "fluxon_video.lerobot.dataset" in names and "fluxon_video.compat.decord" in names
    print(f"{imported} modules import" + ("" if have_torch else " (no torch: not "
                                           f"{needs_torch})"))


def check_the_cli_helps() -> None:
    for args in ([], *([c] for c in COMMANDS)):
        out = subprocess.run(["fluxon-video", *args, "--help"], capture_output=True, text=True,
                             check=True).stdout
        assert "usage: fluxon-video" in out, (args, out)
    versions = subprocess.run(["fluxon-video", "versions"], capture_output=True, text=True,
                              check=True).stdout
    assert "libavcodec" in versions, versions
    print(f"fluxon-video --help and {len(COMMANDS)} commands' --help")


def cli_frames(path: Path) -> np.ndarray:
    raw = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path),
                          "-vf", f"scale={W}:{H}:flags=bilinear,format=rgb24",
                          "-f", "rawvideo", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, H, W, 3)


def check_real_reads(tmp: Path) -> None:
    root = tmp / "root"
    root.mkdir()
    clip = root / "clip.mp4"
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i",
                    "testsrc2=size=160x96:rate=24", "-t", "2", "-c:v", "libx264", "-bf", "3",
                    "-g", "12", "-pix_fmt", "yuv420p", str(clip)], check=True)
    expected = cli_frames(clip)
    indices = [0, 13, len(expected) - 1]
    frames, _ = fv.decode_local_frames(str(clip), indices, H, W)
    assert np.array_equal(frames, expected[indices])
    export = fv.FluxonFsExport("data", str(root), allow=["me"])
    with fv.FluxonFsPatcher(exports=[export], identities={"me": "token"}, identity="me") as p:
        with p.open_video_reader("data", "clip.mp4", H, W) as reader:
            assert len(reader) == len(expected)
            assert np.array_equal(reader.read_frames_numpy(indices), expected[indices])
    print(f"frames {indices} equal the ffmpeg CLI's (local file and FluxonFS export)")


def main() -> None:
    check_installed_not_the_tree()
    check_every_module_imports()
    check_the_cli_helps()
    with tempfile.TemporaryDirectory() as tmp:
        check_real_reads(Path(tmp))
    print(f"all checks passed on Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
