"""The relpath rule, one definition: what a path inside an export root may be."""

from __future__ import annotations

import os

from fluxon_video.errors import FluxonFsBadRequestError


def check_relpath(relpath: object) -> str:
    """relpath normalised (``./``, ``//`` and a trailing ``/`` removed) if it is a
    plain relative path inside a root, else BadRequest. ``..`` is refused."""
    if not isinstance(relpath, str) or not relpath:
        raise FluxonFsBadRequestError(f"relpath must be a non-empty string, got {relpath!r}")
    if "\x00" in relpath:
        raise FluxonFsBadRequestError(f"relpath {relpath!r} contains a NUL byte")
    if relpath.startswith("/") or os.path.isabs(relpath):
        raise FluxonFsBadRequestError(f"relpath {relpath!r} is absolute")
    parts = relpath.split("/")
    if ".." in parts:
        raise FluxonFsBadRequestError(f"relpath {relpath!r} leaves the export root")
    normal = "/".join(part for part in parts if part not in ("", "."))
    if not normal:
        raise FluxonFsBadRequestError(f"relpath {relpath!r} names no file")
    return normal
