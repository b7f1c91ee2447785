"""Listing an export, one page at a time (storage side; the agent's ``/v1/list``).

Entries come in a fixed order: a depth-first walk with each directory's
names sorted, so every relpath sorts as the tuple of its components. A page
ends with a continuation token, the last relpath it returned; the next page
walks down to that point again (listing only the directories on its path)
and goes on after it. Nothing is held between pages, so a million-file
export costs the agent one page of work per request.

Only what a stat would serve is listed: regular files inside the root. A
symlink is listed when it resolves to a regular file inside the root;
symlinked directories are not followed (no loops, no escapes).
"""

from __future__ import annotations

import fnmatch
import os
import stat as stat_mod
from collections.abc import Iterator
from dataclasses import dataclass

from fluxon_video.errors import FluxonFsBadRequestError, FluxonFsNotFoundError
from fluxon_video.fs.paths import check_relpath

MAX_PAGE = 10_000


@dataclass(frozen=True)
class FluxonFsFileEntry:
    """One listed file (or, in a non-recursive listing, directory)."""

    relpath: str
    size: int
    mtime_ns: int
    is_dir: bool = False

    def as_dict(self) -> dict[str, object]:
        return {"relpath": self.relpath, "size": self.size, "mtime_ns": self.mtime_ns,
                "is_dir": self.is_dir}


def _walk(root: str, directory: tuple[str, ...], after: tuple[str, ...], recursive: bool
          ) -> Iterator[FluxonFsFileEntry]:
    """Entries under root/directory in order, skipping everything up to ``after``."""
    path = os.path.join(root, *directory)
    try:
        with os.scandir(path) as scan:
            names = sorted(entry.name for entry in scan)
    except OSError:
        return  # vanished or unreadable: nothing to list there
    depth = len(directory)
    on_path = after[:depth] == directory and len(after) > depth
    for name in names:
        if on_path and name < after[depth]:
            continue
        full = os.path.join(path, name)
        try:
            st = os.lstat(full)
            if stat_mod.S_ISLNK(st.st_mode):
                target = os.path.realpath(full)
                if os.path.commonpath([root, target]) != root:
                    continue
                st = os.stat(target)
                if not stat_mod.S_ISREG(st.st_mode):
                    continue  # symlinked directories are not followed
        except (OSError, ValueError):
            continue
        parts = (*directory, name)
        if stat_mod.S_ISDIR(st.st_mode):
            if recursive:
                yield from _walk(root, parts, after if on_path and name == after[depth] else (),
                                 True)
            elif not (on_path and name <= after[depth]):
                yield FluxonFsFileEntry("/".join(parts), 0, st.st_mtime_ns, is_dir=True)
        elif stat_mod.S_ISREG(st.st_mode):
            if on_path and name == after[depth] and len(after) == depth + 1:
                continue  # the cursor itself was on the previous page
            yield FluxonFsFileEntry("/".join(parts), st.st_size, st.st_mtime_ns)


def list_page(export_name: str, root: str, prefix: str, recursive: bool, pattern: str | None,
              cursor: str | None, limit: int) -> tuple[list[FluxonFsFileEntry], str | None]:
    """(entries, next cursor or None) of one page under ``prefix``.

    ``prefix`` is a path prefix: a directory ("videos/") or the start of names
    ("videos/cam1_"). ``pattern`` is an fnmatch pattern on the whole relpath.
    """
    if not 0 < limit <= MAX_PAGE:
        raise FluxonFsBadRequestError(f"{export_name}: limit must be 1..{MAX_PAGE}, got {limit}")
    prefix = "" if prefix.strip("/") in ("", ".") else check_relpath(prefix)
    root = os.path.realpath(root)
    base = os.path.join(root, prefix) if prefix else root
    if prefix and os.path.isdir(base) and not os.path.islink(base):
        start, name_prefix = tuple(prefix.split("/")), prefix + "/"
    else:
        start, name_prefix = tuple(prefix.split("/")[:-1]), prefix
    if os.path.commonpath([root, os.path.realpath(os.path.join(root, *start))]) != root:
        raise FluxonFsNotFoundError(f"{export_name}:{prefix}: no such directory")
    after = tuple(check_relpath(cursor).split("/")) if cursor else start
    entries: list[FluxonFsFileEntry] = []
    for entry in _walk(root, start, after, recursive):
        if not entry.relpath.startswith(name_prefix):
            continue
        if pattern and not fnmatch.fnmatchcase(entry.relpath, pattern):
            continue
        entries.append(entry)
        if len(entries) == limit:
            return entries, entry.relpath
    return entries, None
