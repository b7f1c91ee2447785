"""What every benchmark records with its figures: the machine and the versions."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run(*cmd: str) -> str:
    """A command's stdout, stripped; "?" when it cannot run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, OS and the git revision measured."""
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory = next((int(line.split()[1]) * 1024 for line in
                   Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:")), 0)
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(memory / (1 << 30), 1),
            "os": platform.platform(),
            "git": run("git", "-C", str(ROOT), "describe", "--always", "--dirty")}


def versions() -> dict[str, str]:
    """Python, numpy, fluxon_video and the libav* it runs on, the ffmpeg CLI, redis-server."""
    import numpy as np

    found = {"python": platform.python_version(), "numpy": np.__version__}
    try:
        found.update(fluxon_versions())
    except Exception:  # noqa: BLE001 - a build without FFmpeg still benchmarks its peers
        pass
    found["ffmpeg CLI"] = (run("ffmpeg", "-version").splitlines() or ["? ? ?"])[0].split()[2]
    redis_line = run("redis-server", "--version").split()
    found["redis-server"] = redis_line[2].removeprefix("v=") if len(redis_line) > 2 else "?"
    return found


def fluxon_versions() -> dict[str, str]:
    import fluxon_video
    from fluxon_video.native import require_native

    return {"fluxon_video": fluxon_video.__version__,
            **{f"fluxon's {k}": v for k, v in require_native()[1].library_versions().items()}}


def peer_versions(family: str, av_libs: tuple[str, ...] = ("libavcodec", "libswscale")
                  ) -> dict[str, str]:
    """A peer library's version (PyAV: and the ``av_libs`` it was built with)."""
    if family == "decord":
        import decord

        return {"decord": decord.__version__}
    if family == "spdl":
        from importlib.metadata import version

        return {"spdl-io": version("spdl-io")}
    if family == "torchcodec":
        import torch
        import torchcodec

        return {"torchcodec": torchcodec.__version__, "torch": torch.__version__}
    import av

    return {"av": av.__version__, **{f"av's {lib}": ".".join(map(str, v))
                                     for lib, v in av.library_versions.items() if lib in av_libs}}
