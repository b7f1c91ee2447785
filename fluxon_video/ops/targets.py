"""Parsing what the command line names: EXPORT[:RELPATH] or a URI, sizes, frame lists."""

from __future__ import annotations

from typing import Any

from fluxon_video.errors import FluxonFsConfigError
from fluxon_video.fs.uris import is_uri


def split_target(target: str) -> tuple[str, str]:
    """``EXPORT:RELPATH`` (or ``EXPORT``) -> (export, relpath or "")."""
    export, _, relpath = target.partition(":")
    if not export:
        raise FluxonFsConfigError(f"expected EXPORT[:PATH] or a URI, got {target!r}")
    return export, relpath


def resolve_target(patcher: Any, target: str) -> tuple[str, str]:
    """What a command names -> (export, relpath or ""): ``EXPORT[:RELPATH]``, a
    URI (``s3://bucket/prefix/key``, ``file:///...``) or an absolute path,
    mapped by the configured roots (fs/uris.py), or ``EXPORT:URI`` (the URI
    under that export's root)."""
    if is_uri(target):
        return patcher.resolve(target)
    export, relpath = split_target(target)
    if is_uri(relpath):
        return patcher.resolve(relpath, export)
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
