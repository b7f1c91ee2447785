"""The declared Python range is the one the package works on and the suite tests."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Standard library modules the package may import, and the Python that added them.
NEWER_STDLIB = {"tomllib": (3, 11)}


def declared_floor() -> tuple[int, int]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r"\s*>=\s*(\d+)\.(\d+)\s*", spec)
    assert match, f"requires-python should be a plain floor '>=X.Y', got {spec!r}"
    return int(match[1]), int(match[2])


def test_the_declared_floor_is_the_python_the_suite_runs_on():
    # These machines run the lowest Python the package declares, so the floor
    # is what make test exercises.
    assert sys.version_info[:2] == declared_floor()


def test_the_floor_admits_every_newer_stdlib_module_the_package_imports():
    floor = declared_floor()
    imported = set()
    for path in (ROOT / "fluxon_video").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    assert "tomllib" in imported  # fs/config.py reads TOML with it
    for module, since in NEWER_STDLIB.items():
        if module in imported:
            assert floor >= since, f"the package imports {module} (Python {since}) " \
                                   f"but declares Python >= {floor}"
