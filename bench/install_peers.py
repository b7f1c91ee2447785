"""Install what the benchmark needs into the running interpreter (``make bench`` calls it)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_OFFLINE = "2.13.0"  # the CPU build this project's machines keep on disk
# LeRobot as a bench peer (bench/lerobot.py): its own virtualenv, see install_lerobot().
LEROBOT_SPEC = "lerobot==0.6.1"
LEROBOT_DEPS = [  # lerobot 0.6.1's requirements for reading and writing datasets, minus torch
    "datasets>=4.8,<5", "pandas>=2,<3", "pyarrow>=21,<30", "av>=15,<16", "jsonlines>=4,<5",
    "huggingface-hub>=1.6,<2", "draccus>=0.11.6,<0.12", "einops>=0.8,<0.9",
    "opencv-python-headless>=4.9,<4.14", "Pillow>=10,<13", "safetensors>=0.4.3,<1",
    "packaging>=24.2,<26", "termcolor>=2.4,<4", "tqdm>=4.66,<5", "requests>=2.32,<3",
    "gymnasium>=1.1.1,<2", "numpy>=2,<2.3", "psutil"]


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


def backport_312(source: str) -> str:
    """Python 3.12 syntax LeRobot uses, rewritten for 3.11: ``type X = Y`` aliases become
    assignments, ``def f[T: B](...)`` and ``class C[A, B](Base)`` plain TypeVars and
    ``Generic[A, B]``. Nothing else changes."""
    params: list[str] = []

    def names(group: str) -> str:
        found = [p.split(":")[0].strip() for p in group.split(",") if p.strip()]
        params.extend(n for n in found if n not in params)
        return ", ".join(found)

    source = re.sub(r"^(\s*)type (\w+)(\s*)=", r"\1\2\3=", source, flags=re.M)
    source = re.sub(r"^(\s*def \w+)\[([^\]]*)\]\(",
                    lambda m: (names(m[2]), m[1] + "(")[1], source, flags=re.M)

    def cls(m: re.Match) -> str:
        generic = f"Generic[{names(m[3])}]"
        bases = m[4]
        return f"{m[1]}class {m[2]}({bases + ', ' if bases else ''}{generic}):"

    source = re.sub(r"^(\s*)class (\w+)\[([^\]]*)\](?:\(([^)]*)\))?:", cls, source,
                    flags=re.M)
    if params:
        lines = source.splitlines(keepends=True)
        at = max((i + 1 for i, line in enumerate(lines)
                  if line.startswith("from __future__")), default=0)
        decl = "from typing import Generic, TypeVar\n" + "".join(
            f"{n} = TypeVar({n!r})\n" for n in params)
        source = "".join(lines[:at]) + decl + "".join(lines[at:])
    return source


DAFT_SPEC = "daft==0.7.26"


def install_daft(python: Path) -> bool:
    """Daft (its LeRobot reader, which decodes with PyAV) beside LeRobot in its
    virtualenv, for bench/lerobot.py; False when it did not install."""
    if subprocess.run([str(python), "-c", "import daft.datasets.lerobot"], cwd="/",
                      capture_output=True).returncode == 0:
        return True
    return subprocess.run([str(python), "-m", "pip", "install", "-q", DAFT_SPEC]).returncode == 0


def install_lerobot(venv: Path) -> Path | None:
    """LeRobot 0.6.1 in a virtualenv of its own, for bench/lerobot.py.

    LeRobot needs Python >= 3.12 and torch < 2.12, but the only CPU build of torch this
    machine can install is torch 2.13.0 for CPython 3.11 (/opt/wheels; PyPI's Linux torch
    wheels are CUDA builds and the CPU index is out of reach). So the virtualenv runs
    this interpreter (3.11) with that torch, torchvision 0.28 and torchcodec 0.13 (the last
    CPU wheel), LeRobot installed without its pins (--no-deps --ignore-requires-python),
    its dependencies listed above, and the few files of LeRobot that use 3.12-only syntax
    rewritten by backport_312 (type aliases and generic parameters: annotations only), and
    torchvision's import made to skip its C ops' registrations (see below).
    Returns the virtualenv's python, or None when something failed (the bench then skips
    LeRobot and says why)."""
    venv = venv.absolute()
    python = venv / "bin" / "python"
    stamp = venv / ".fluxon-lerobot-installed"
    if stamp.exists():
        return python
    if not python.exists() and subprocess.run([sys.executable, "-m", "venv", str(venv)]).returncode:
        return None

    def vpip(*args: str) -> bool:
        return subprocess.run([str(python), "-m", "pip", "install", "-q", *args]).returncode == 0

    wheels = venv / "wheels"  # torch's CPU wheel from local disk only (never a CUDA build)
    if not any(wheels.glob("torch-*.whl")) and subprocess.run(
            [str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-index", "-d",
             str(wheels), f"torch=={TORCH_OFFLINE}"]).returncode:
        print(f"bench: torch {TORCH_OFFLINE} (CPU) is not on local disk; LeRobot is skipped")
        return None
    torch = str(next(wheels.glob("torch-*.whl")))
    minor = int(TORCH_OFFLINE.split(".")[1])
    if not (vpip(torch, f"torchvision==0.{minor + 15}.*", f"torchcodec==0.{minor}.*")
            and vpip("--no-deps", "--ignore-requires-python", LEROBOT_SPEC)
            and vpip(*LEROBOT_DEPS, torch)):
        print("bench: installing LeRobot failed; bench/lerobot.py skips it")
        return None
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True).stdout.strip()
    for path in sorted(Path(site, "lerobot").rglob("*.py")):
        source = path.read_text()
        try:
            ast.parse(source, feature_version=(3, 11))
        except SyntaxError:
            path.write_text(backport_312(source))
    # torchvision's Linux wheels are built against CUDA torch: its C ops do not load on the
    # CPU build, and registering their meta kernels then fails at import. LeRobot only
    # needs torchvision.transforms: skip the registrations when the ops are missing.
    init = Path(site, "torchvision", "__init__.py")
    text = init.read_text()
    old = "from torchvision import (\n    _autograd_registrations,\n    _meta_registrations,\n"
    if old in text:
        init.write_text(text.replace(old, "if extension._has_ops():\n    from torchvision import "
                                     "_autograd_registrations, _meta_registrations\n"
                                     "from torchvision import (\n"))
    if subprocess.run([str(python), "-c", "import lerobot.datasets.lerobot_dataset"],
                      cwd="/").returncode:
        print("bench: LeRobot does not import; bench/lerobot.py skips it")
        return None
    stamp.touch()
    return python


if __name__ == "__main__":
    from harness import tool_parser

    ap = tool_parser("install_peers.py")
    ap.add_argument("--lerobot-venv", type=Path, default=None,
                    help="only install LeRobot (bench/lerobot.py's peer) into this virtualenv")
    args = ap.parse_args()
    if args.lerobot_venv is not None:
        sys.exit(0 if install_lerobot(args.lerobot_venv) else 1)
    install_extra()
    install_torchcodec()
