"""Install what the benchmark needs into the running interpreter (``make bench`` calls it)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_OFFLINE = "2.13.0"  # the CPU build this project's machines keep on disk


def pip(*args: str) -> bool:
    return subprocess.run([sys.executable, "-m", "pip", *args]).returncode == 0


def imports(module: str) -> str | None:
    """The module's __version__ if it imports in a fresh interpreter, else None."""
    proc = subprocess.run([sys.executable, "-c", f"import {module}; print({module}.__version__)"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def install_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if not pip("install", "-q", *project["optional-dependencies"]["bench"]):
        sys.exit("bench: installing the bench extra failed")
    if not imports("spdl.io"):
        print("bench: spdl.io does not import (no FFmpeg shared libraries it can load?); "
              "SPDL is skipped")


def install_torchcodec() -> None:
    if imports("torchcodec"):
        return
    torch = imports("torch")
    if torch is None:
        with tempfile.TemporaryDirectory() as scratch:
            offline = subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-index",
                 "-d", scratch, f"torch=={TORCH_OFFLINE}"], capture_output=True).returncode == 0
        if not offline:
            print("bench: torch is not installed and not on local disk; torchcodec is skipped")
            return
        torch = TORCH_OFFLINE
    minor = torch.split("+")[0].split(".")[1]
    if not pip("install", "-q", f"torch=={torch.split('+')[0]}", f"torchcodec==0.{minor}.*"):
        print(f"bench: no torchcodec for torch {torch}; torchcodec is skipped")


if __name__ == "__main__":
    from harness import tool_parser

    tool_parser("install_peers.py").parse_args()
    install_extra()
    install_torchcodec()
