"""Listing an export, one page at a time (storage side; the agent's ``/v1/list``).

Entries come in a fixed order: a depth-first walk with each directory's
names sorted, so every relpath sorts as the tuple of its components. A page
ends with a continuation token, the last relpath it returned; the next page
walks down to that point again (listing only the directories on its path)
and goes on after it. Nothing is held between pages, so a million-file
export costs the agent one page of work per request.

Only what a stat would serve is listed: regular files inside the root. A
symlink is listed when it resolves to a regular file inside the root;
symlinked directories are not followed (no loops, no escapes). The walk holds
a descriptor of each directory on its path and opens the next one beneath it
with O_NOFOLLOW, as stat and read do (fs/paths.py): a directory swapped for a
symlink while a page is walked is skipped, never entered.

A pattern is compiled here, once per distinct pattern in a small cache of our
own: fnmatch's keeps 32768 compiled patterns, a client's to choose.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import stat as stat_mod
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import cachetools

from fluxon_video.errors import (
    FluxonFsBadRequestError,
    FluxonFsError,
    FluxonFsNotFoundError,
)
from fluxon_video.fs.paths import (
    MAX_DEPTH,
    check_relpath,
    name_of,
    open_dir_nofollow,
    open_root,
    raise_if_exhausted,
    resolve_beneath,
    stat_leaf,
)

MAX_PAGE = 10_000
# A pattern or prefix longer than this is refused: a real one is a few dozen
# characters, and compiling a hostile 8 KiB one costs tens of milliseconds.
MAX_PATTERN_CHARS = 1024
MAX_PREFIX_CHARS = 4096  # as a relpath (fs/paths.PATH_MAX)
PATTERN_CACHE_SIZE = 256

_patterns: cachetools.LRUCache[str, Callable[[str], re.Match[str] | None]] = \
    cachetools.LRUCache(maxsize=PATTERN_CACHE_SIZE)
_patterns_lock = threading.Lock()  # the agent lists from a pool of threads


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


def pattern_matcher(pattern: str, where: str) -> Callable[[str], re.Match[str] | None]:
    """The match function of an fnmatch pattern (case-sensitive, ``*`` crosses
    ``/``); a pattern longer than MAX_PATTERN_CHARS is BadRequest."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise FluxonFsBadRequestError(
            f"{where}: pattern is {len(pattern)} characters, at most {MAX_PATTERN_CHARS}")
    with _patterns_lock:
        match = _patterns.get(pattern)
    if match is None:  # compiled outside the lock: two threads may both compile it
        match = re.compile(fnmatch.translate(pattern)).match
        with _patterns_lock:
            _patterns[pattern] = match
    return match


def _entry_stat(root_fd: int, root: str, dir_fd: int, parts: tuple[str, ...]
                ) -> os.stat_result | None:
    """What a stat of parts (in dir_fd) would serve: a directory's or regular file's
    own stat, or a symlink's target's if it is a regular file beneath the root; else None."""
    try:
        st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        if stat_mod.S_ISLNK(st.st_mode):
            relpath = "/".join(parts)
            st = resolve_beneath(root_fd, root, relpath, relpath, stat_leaf)
            if not stat_mod.S_ISREG(st.st_mode):
                return None  # symlinked directories are not followed
    except (OSError, FluxonFsError) as exc:  # gone, unreadable, a loop, or leading out
        _unless_exhausted(exc)
        return None
    return st


def _unless_exhausted(exc: BaseException) -> None:
    """What the walk skips (a file gone or unreadable) must not hide a host out of
    descriptors: that page would silently lack entries."""
    if isinstance(exc, OSError) and not isinstance(exc, FluxonFsError):
        raise_if_exhausted(exc, "listing")


def _walk(root_fd: int, root: str, dir_fd: int, directory: tuple[str, ...],
          after: tuple[str, ...], recursive: bool) -> Iterator[FluxonFsFileEntry]:
    """Entries under directory (open as dir_fd) in order, skipping everything up to ``after``."""
    try:
        names = sorted(os.listdir(dir_fd))
    except OSError as exc:
        _unless_exhausted(exc)
        return  # vanished or unreadable: nothing to list there
    depth = len(directory)
    on_path = after[:depth] == directory and len(after) > depth
    for name in names:
        if on_path and name < after[depth]:
            continue
        parts = (*directory, name)
        st = _entry_stat(root_fd, root, dir_fd, parts)
        if st is None:
            continue
        if stat_mod.S_ISDIR(st.st_mode):
            if recursive:
                if depth < MAX_DEPTH:  # deeper than a stat may go (fs/paths.py)
                    yield from _walk_into(root_fd, root, dir_fd, parts,
                                          after if on_path and name == after[depth] else ())
            elif not (on_path and name <= after[depth]):
                yield FluxonFsFileEntry("/".join(parts), 0, st.st_mtime_ns, is_dir=True)
        elif stat_mod.S_ISREG(st.st_mode):
            if on_path and name == after[depth] and len(after) == depth + 1:
                continue  # the cursor itself was on the previous page
            yield FluxonFsFileEntry("/".join(parts), st.st_size, st.st_mtime_ns)


def _walk_into(root_fd: int, root: str, dir_fd: int, parts: tuple[str, ...],
               after: tuple[str, ...]) -> Iterator[FluxonFsFileEntry]:
    """The recursive walk of the directory parts[-1] in dir_fd: opened without
    following a symlink, so one swapped in since its stat is skipped."""
    try:
        child = open_dir_nofollow(dir_fd, parts[-1])
    except OSError as exc:
        _unless_exhausted(exc)
        return
    try:
        yield from _walk(root_fd, root, child, parts, after, True)
    finally:
        os.close(child)


def _is_symlink(dir_fd: int, name: str) -> bool:
    try:
        return stat_mod.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_dirs(root_fd: int, parts: tuple[str, ...], where: str) -> int:
    """The directory parts name, opened from root_fd a component at a time without
    following a symlink: a symlinked directory on the way is FluxonFsNotFoundError,
    any other failure the OSError."""
    fd = open_dir_nofollow(root_fd, ".")
    try:
        for part in parts:
            try:
                child = open_dir_nofollow(fd, part)
            except OSError:
                if _is_symlink(fd, part):
                    raise FluxonFsNotFoundError(
                        f"{where}: no such directory (symlinked directories are not followed)"
                    ) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_start(root_fd: int, prefix: str, where: str
                ) -> tuple[int | None, tuple[str, ...], str]:
    """(descriptor of the directory to walk, None if there is none; its components;
    the start every listed relpath must have). A prefix naming a directory lists
    it, any other the names in its parent that start with it."""
    parts = tuple(prefix.split("/")) if prefix else ()
    if parts:
        with contextlib.suppress(OSError):  # not a directory (or a symlink): a name prefix
            return _open_dirs(root_fd, parts, where), parts, prefix + "/"
    try:
        return _open_dirs(root_fd, parts[:-1], where), parts[:-1], prefix
    except FluxonFsError:
        raise
    except OSError:
        return None, parts[:-1], prefix  # no such directory: nothing to list


def list_page(export_name: str, root: str, prefix: str, recursive: bool, pattern: str | None,
              cursor: str | None, limit: int) -> tuple[list[FluxonFsFileEntry], str | None]:
    """(entries, next cursor or None) of one page under ``prefix``.

    ``prefix`` is a path prefix: a directory ("videos/") or the start of names
    ("videos/cam1_"). ``pattern`` is an fnmatch pattern on the whole relpath.
    """
    if not 0 < limit <= MAX_PAGE:
        raise FluxonFsBadRequestError(f"{export_name}: limit must be 1..{MAX_PAGE}, got {limit}")
    if len(prefix) > MAX_PREFIX_CHARS:
        raise FluxonFsBadRequestError(
            f"{export_name}: prefix is {len(prefix)} characters, at most {MAX_PREFIX_CHARS}")
    prefix = "" if prefix.strip("/") in ("", ".") else check_relpath(prefix)
    where = name_of(export_name, prefix)
    match = pattern_matcher(pattern, where) if pattern else None
    after = tuple(check_relpath(cursor).split("/")) if cursor else None
    root_fd = open_root(root)
    try:
        start_fd, start, name_prefix = _open_start(root_fd, prefix, where)
        if start_fd is None:
            return [], None
        try:
            with contextlib.closing(_walk(root_fd, root, start_fd, start, after or start,
                                          recursive)) as walk:
                return _page(walk, name_prefix, match, limit)
        finally:
            os.close(start_fd)
    finally:
        os.close(root_fd)


def _page(walk: Iterator[FluxonFsFileEntry], name_prefix: str,
          match: Callable[[str], re.Match[str] | None] | None, limit: int
          ) -> tuple[list[FluxonFsFileEntry], str | None]:
    """The first ``limit`` entries of walk that start with name_prefix and match."""
    entries: list[FluxonFsFileEntry] = []
    for entry in walk:
        if not entry.relpath.startswith(name_prefix):
            continue
        if match is not None and match(entry.relpath) is None:
            continue
        entries.append(entry)
        if len(entries) == limit:
            return entries, entry.relpath
    return entries, None
