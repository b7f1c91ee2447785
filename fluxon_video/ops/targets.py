"""Parsing what the command line names: EXPORT[:RELPATH], sizes, frame lists."""

from __future__ import annotations

from fluxon_video.errors import FluxonFsConfigError


def split_target(target: str) -> tuple[str, str]:
    """``EXPORT:RELPATH`` (or ``EXPORT``) -> (export, relpath or "")."""
    export, _, relpath = target.partition(":")
    if not export:
        raise FluxonFsConfigError(f"expected EXPORT[:PATH], got {target!r}")
    return export, relpath


def parse_size(text: str | None) -> tuple[int | None, int | None]:
    """``WxH`` -> (height, width); ``224x`` or ``x224`` keep the aspect; None: native."""
    if not text or text == "native":
        return None, None
    width, sep, height = text.lower().partition("x")
    try:
        if not sep or not (width or height):
            raise ValueError
        return (int(height) if height else None), (int(width) if width else None)
    except ValueError:
        raise FluxonFsConfigError(
            f"--size must be WxH (e.g. 224x224, 320x, x240) or native, got {text!r}") from None


def parse_numbers(text: str | None, kind: type, what: str) -> list:
    if not text:
        return []
    try:
        return [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise FluxonFsConfigError(f"{what} must be a comma-separated list, got {text!r}") from None
