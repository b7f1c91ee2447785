"""The package as users install it: built from a clean copy, installed outside the tree.

    python -m tests.install_check [--python PY ...] [--work DIR]

For each interpreter: copy the files git tracks into a scratch directory (no
build outputs, no .venv), build the sdist and, from it, the wheel with the
standard tooling (``python -m build``, in a build virtualenv that has the
build requirements), install the wheel into a second, fresh virtualenv, and
run ``installed_checks.py`` there from a directory outside the tree. The
wheel links the system's FFmpeg libraries (see the README's install
section); it needs no compiler to install.

Without --python: this interpreter's base Python and, when it is on the
machine (PATH or pyenv), Python 3.12, the two side by side. Prints one
line per step and the seconds it took; exits 1 if any step failed, with
its output.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD_REQUIREMENTS = ["setuptools>=77", "wheel", "Cython>=3.0", "pkgconfig>=1.5", "build>=1.0"]


def default_pythons() -> list[str]:
    found = [getattr(sys, "_base_executable", sys.executable)]
    candidates = [*sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))),
                  shutil.which("python3.12")]
    extra = next((c for c in candidates if c and _version(c) == "3.12"), None)
    if extra and _version(found[0]) != "3.12":
        found.append(extra)
    return found


def _version(python: str) -> str | None:
    """X.Y of an interpreter, None if it does not run (a pyenv shim of no version)."""
    done = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


class StepFailed(Exception):
    pass


def step(log: list[str], what: str, cmd: list[str], cwd: Path, env: dict | None = None) -> str:
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if done.returncode:
        log.append(f"  {what}: FAILED ({' '.join(cmd)})\n{done.stdout[-4000:]}\n"
                   f"{done.stderr[-4000:]}")
        raise StepFailed(what)
    log.append(f"  {what}: ok ({time.monotonic() - t0:.0f} s)")
    return done.stdout


def clean_copy(dest: Path) -> None:
    """The files git tracks, as they are in the working tree."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def check_python(python: str, work: Path, log: list[str]) -> None:
    version = _version(python)
    log.append(f"Python {version} ({python})")
    work = work / f"py{version}"
    src, dist, outside = work / "src", work / "dist", work / "elsewhere"
    for directory in (src, dist, outside):
        directory.mkdir(parents=True)
    clean_copy(src)
    builder, user = work / "build-env", work / "user-env"
    step(log, "build virtualenv", [python, "-m", "venv", str(builder)], work)
    step(log, "build requirements",
         [str(builder / "bin/pip"), "install", "-q", *BUILD_REQUIREMENTS], work)
    step(log, "sdist, then the wheel from it", [str(builder / "bin/python"), "-m", "build",
                                                "--no-isolation", "--outdir", str(dist), str(src)],
         work)
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == 1 and list(dist.glob("*.tar.gz")), sorted(dist.iterdir())
    step(log, "user virtualenv", [python, "-m", "venv", str(user)], work)
    step(log, f"pip install {wheels[0].name}",
         [str(user / "bin/pip"), "install", "-q", str(wheels[0])], outside)
    shutil.copy(ROOT / "tests" / "installed_checks.py", outside)
    log.append(step(log, "checks from outside the tree",
                    [str(user / "bin/python"), "installed_checks.py"], outside,
                    env={"PATH": f"{user / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": ""}
                    ).rstrip())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", help="an interpreter to check (repeat)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    args = parser.parse_args(argv)
    pythons = args.python or default_pythons()
    with tempfile.TemporaryDirectory(prefix="fluxon-install-") as scratch:
        work = args.work or Path(scratch)
        logs: list[list[str]] = [[] for _ in pythons]
        # One interpreter per core: each build compiles its extensions on one.
        with concurrent.futures.ThreadPoolExecutor(len(pythons)) as pool:
            runs = [pool.submit(check_python, py, work, log) for py, log in zip(pythons, logs)]
        failed = False
        for run, log in zip(runs, logs):
            print("\n".join(log), flush=True)
            if run.exception() is not None:
                failed = True
                if not isinstance(run.exception(), StepFailed):
                    print(f"  {type(run.exception()).__name__}: {run.exception()}")
        if failed:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
