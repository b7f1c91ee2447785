"""mypy --strict over the public modules and the compiled units' stubs ([tool.mypy] in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def mypy(tmp_path: Path, *files: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           *files], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_public_modules_type_check_strictly(tmp_path):
    done = mypy(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


def test_a_type_error_in_a_public_module_fails_the_check(tmp_path):
    """The check can fail: the same settings on a wrong module report it."""
    bad = tmp_path / "wrong.py"
    bad.write_text("from fluxon_video.options import ReadOptions\n"
                   "def height(options: ReadOptions) -> str:\n"
                   "    return options.height\n")
    done = mypy(tmp_path, str(bad))
    assert done.returncode == 1 and "Incompatible return value type" in done.stdout, done.stdout


def test_every_compiled_unit_has_a_stub():
    units = {p.stem for p in (ROOT / "fluxon_video").glob("_*.pyx")}
    assert units == {p.stem for p in (ROOT / "fluxon_video").glob("_*.pyi")}
