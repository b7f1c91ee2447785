"""Markdown tables and the number formats the reports share ("–": no figure)."""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from pathlib import Path

DASH = "–"
KiB, MiB = 1 << 10, 1 << 20


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def num(value: float | None, digits: int = 2, grouped: bool = False) -> str:
    if value is None:
        return DASH
    return f"{value:,.{digits}f}" if grouped else f"{value:.{digits}f}"


def mib(value: float | None) -> str:
    return DASH if value is None else f"{value / MiB:.2f}"


def times(value: float | None, missing: str = DASH) -> str:
    """A ratio as "1.23×"."""
    return missing if value is None else f"{value:.2f}×"


def listing(pairs: Iterable[tuple[object, object]]) -> str:
    """"k v, k v": versions and the like, in one line."""
    return ", ".join(f"{k} {v}" for k, v in pairs)


def fill(template: str, **values: object) -> str:
    """bench/templates/<template>.md with its $names replaced (the reports' prose lives
    there, so that the code around it is only the figures)."""
    text = (Path(__file__).resolve().parent / "templates" / f"{template}.md").read_text()
    return string.Template(text).substitute(values)


def machine_line(m: dict) -> str:
    return f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, git {m['git']}"
