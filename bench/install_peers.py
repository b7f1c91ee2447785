"""Install what the benchmark needs into the running interpreter (``make bench`` calls it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_OFFLINE = "2.13.0"  # the CPU build this project's machines keep on disk
# LeRobot as a bench peer (the lerobot suite): its own virtualenv, see install_lerobot().
LEROBOT_SPEC = "lerobot==0.6.1"


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


DAFT_SPEC = "daft==0.7.26"


def install_daft(python: Path) -> bool:
    """Daft (its LeRobot reader, which decodes with PyAV) beside LeRobot in its
    virtualenv, for the lerobot suite; False when it did not install."""
    if subprocess.run([str(python), "-c", "import daft.datasets.lerobot"], cwd="/",
                      capture_output=True).returncode == 0:
        return True
    return subprocess.run([str(python), "-m", "pip", "install", "-q", DAFT_SPEC]).returncode == 0


def python312() -> str | None:
    """A CPython 3.12 interpreter that runs (LeRobot asks for >= 3.12), or None. A pyenv
    shim on PATH may not run (3.12 installed but not selected): pyenv's own copy then."""
    candidates = [shutil.which("python3.12")]
    root = subprocess.run(["pyenv", "root"], capture_output=True, text=True) \
        if shutil.which("pyenv") else None
    if root is not None and root.returncode == 0:
        candidates += sorted(map(str, Path(root.stdout.strip(), "versions").glob(
            "3.12*/bin/python3.12")), reverse=True)
    return next((c for c in candidates if c and subprocess.run(
        [c, "-c", "import venv"], capture_output=True).returncode == 0), None)


def install_lerobot(venv: Path) -> Path | None:
    """LeRobot 0.6.1 as its users install it, ``pip install 'lerobot[dataset,training]'``,
    in a virtualenv of its own on CPython 3.12, for the lerobot suite and
    bench/lerobot_train.py.

    Its pins (torch < 2.12, torchcodec < 0.12) take PyPI's torch 2.11, a CUDA build (about
    5.5 GB in the virtualenv), which runs on the CPU; torchcodec 0.11 is a CPU build. This
    project's own tests and peers keep the CPU torch 2.13 in ``.venv``. Returns the
    virtualenv's python, or None when something failed (the bench then says why)."""
    venv = venv.absolute()
    python = venv / "bin" / "python"
    stamp = venv / ".fluxon-lerobot-installed"
    if stamp.exists() and stamp.read_text() == LEROBOT_SPEC:
        return python
    base = python312()
    if base is None:
        print("bench: LeRobot needs Python >= 3.12 and none is on PATH or in pyenv")
        return None
    if venv.exists():  # an older layout (3.11 with a back-ported LeRobot): start again
        shutil.rmtree(venv)
    if subprocess.run([base, "-m", "venv", str(venv)]).returncode or subprocess.run(
            [str(python), "-m", "pip", "install", "-q",
             LEROBOT_SPEC.replace("==", "[dataset,training]==")]).returncode:
        print("bench: installing LeRobot failed; the lerobot suite skips it")
        return None
    if subprocess.run([str(python), "-c", "import lerobot.datasets.lerobot_dataset"],
                      cwd="/").returncode:
        print("bench: LeRobot does not import; the lerobot suite skips it")
        return None
    stamp.write_text(LEROBOT_SPEC)
    return python


if __name__ == "__main__":
    from harness import tool_parser

    ap = tool_parser("install_peers.py")
    ap.add_argument("--lerobot-venv", type=Path, default=None,
                    help="only install LeRobot (the lerobot suite's peer) into this virtualenv")
    args = ap.parse_args()
    if args.lerobot_venv is not None:
        sys.exit(0 if install_lerobot(args.lerobot_venv) else 1)
    install_extra()
    install_torchcodec()
