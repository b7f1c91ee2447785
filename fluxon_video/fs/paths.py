"""The relpath rule, one definition: what a path inside an export root may be;
the lookup that opens one beneath the root without ever leaving it; and which
OS errors there are the host's trouble rather than the path's."""

from __future__ import annotations

import errno
import os
import stat as stat_mod
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from fluxon_video.errors import (FluxonFsBadRequestError, FluxonFsOverloadedError,
                                  FluxonFsPermissionError)

T = TypeVar("T")

# OS errors that say the storage host is out of something, not that the path is
# wrong: another replica, or this one later, can serve the request (a 503).
EXHAUSTED_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


def raise_if_exhausted(exc: OSError, name: str) -> None:
    """FluxonFsOverloadedError for an exhausted host; otherwise nothing (the caller maps exc)."""
    if exc.errno in EXHAUSTED_ERRNOS:
        raise FluxonFsOverloadedError(f"{name}: the storage host is out of resources "
                                      f"({os.strerror(exc.errno)})") from None


def check_relpath(relpath: object) -> str:
    """relpath normalised (``./``, ``//`` and a trailing ``/`` removed) if it is a
    plain relative path inside a root, else BadRequest. ``..`` is refused."""
    if not isinstance(relpath, str) or not relpath:
        raise FluxonFsBadRequestError(f"relpath must be a non-empty string, got {relpath!r}")
    if "\x00" in relpath:
        raise FluxonFsBadRequestError(f"relpath {relpath!r} contains a NUL byte")
    if "://" in relpath:
        # Normalised, s3://bucket/key would become the relpath s3:/bucket/key and be
        # "not found": say what it is, and what maps a URI to (export, relpath).
        raise FluxonFsBadRequestError(
            f"relpath {relpath!r} is a URI, not a path inside an export: "
            "FluxonFsPatcher.resolve(uri) gives its (export, relpath), and the patcher's "
            "calls take it as the relpath (fs/uris.py)")
    if relpath.startswith("/") or os.path.isabs(relpath):
        raise FluxonFsBadRequestError(f"relpath {relpath!r} is absolute")
    parts = relpath.split("/")
    if ".." in parts:
        raise FluxonFsBadRequestError(f"relpath {relpath!r} leaves the export root")
    normal = "/".join(part for part in parts if part not in ("", "."))
    if not normal:
        raise FluxonFsBadRequestError(f"relpath {relpath!r} names no file")
    return normal


# ---- opening beneath a root ----
#
# A relpath is resolved one component at a time from a descriptor of the root,
# each directory opened with O_NOFOLLOW relative to the one before (openat),
# so what was checked is what is opened: there is no path string for anyone to
# swap a component of between a check and an open. A symlink met on the way
# is read (readlinkat, relative to the directory held) and its target walked
# the same way, as openat2's RESOLVE_BENEATH would, except that an absolute
# target naming a place under the root is taken from the root.

MAX_SYMLINKS = 40  # the kernel's limit for one lookup: more is ELOOP, as a loop is
PATH_MAX = 4096  # a longer relpath is ENAMETOOLONG, as the kernel says of a long path
# A lookup (and a listing) holds a descriptor per directory level: a deeper
# path is ENAMETOOLONG (and not listed), so a hostile tree cannot cost the
# agent thousands of descriptors per request.
MAX_DEPTH = 64
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Leaf = Callable[[int, str], T]


def open_root(root: str) -> int:
    """A descriptor of the root directory, opened now: a root replaced since the
    last request (a new tree moved over it) is the one served."""
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_dir_nofollow(dir_fd: int, name: str) -> int:
    """name in dir_fd as a directory, never through a symlink (ENOTDIR or ELOOP then)."""
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def stat_leaf(dir_fd: int, name: str) -> os.stat_result:
    """A leaf for resolve_beneath: name's own stat in dir_fd, a symlink ELOOP (followed)."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat_mod.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    return st


def _outside(name: str) -> FluxonFsPermissionError:
    return FluxonFsPermissionError(f"{name}: resolves outside the export root")


def _components(path: str) -> list[str]:
    """path's components; a trailing '/' is a final '.', so it must name a directory."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    return [*parts, "."] if path.endswith(("/", "/.")) or not parts else parts


def _symlink_in_the_way(exc: OSError, dir_fd: int, name: str) -> str:
    """The target of name in dir_fd when exc (from opening it without following
    a symlink) is because it is one; else exc itself is raised."""
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
        raise exc
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:  # EINVAL: not a symlink; ENOENT: gone meanwhile
        raise exc from None


class _Lookup:
    """Where a lookup is: the directories from the root down to it, each held open.

    '..' closes the last one and goes back to the one before, never above the
    root; it is not opened as '..', which leads out of the root if a directory
    on the way was moved out of it meanwhile. A lookup holds one descriptor per
    level, so it may go at most MAX_DEPTH directories deep."""

    def __init__(self, root_fd: int, root: str, name: str) -> None:
        self.root = root
        self.name = name
        self.fds = [root_fd]  # fds[0] is the caller's, the rest are ours

    @property
    def fd(self) -> int:
        return self.fds[-1]

    def down(self, part: str) -> None:
        if len(self.fds) > MAX_DEPTH:
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        self.fds.append(open_dir_nofollow(self.fd, part))

    def up(self) -> None:
        if len(self.fds) == 1:
            raise _outside(self.name)
        os.close(self.fds.pop())

    def to_root(self) -> None:
        while len(self.fds) > 1:
            os.close(self.fds.pop())

    def under_root(self, target: str) -> str:
        """An absolute symlink target as a path from the root, if it names a place
        under the root (its real path or the configured one), else refused."""
        for root in (os.path.realpath(self.root), os.path.abspath(self.root)):
            if target == root or target.startswith(root.rstrip("/") + "/"):
                return target[len(root):]
        raise _outside(self.name)


def resolve_beneath(root_fd: int, root: str, relpath: str, name: str, leaf: Leaf[T]) -> T:
    """leaf(dir_fd, last component) at what relpath names beneath the root.

    leaf opens or stats the last component without following a symlink (an
    OSError ELOOP, or ENOTDIR for a directory, if it is one); a symlink, last
    or on the way, is followed beneath the root: '..' never leaves the root
    and an absolute target must name a place under it, else
    FluxonFsPermissionError ("resolves outside the export root"); more than
    MAX_SYMLINKS is ELOOP. Other OS errors propagate, for the caller to map.
    What leaf returns (a descriptor) is the caller's; everything else opened
    here is closed here. name (export:relpath) is for messages.
    """
    if len(os.fsencode(relpath)) >= PATH_MAX:
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
    lookup = _Lookup(root_fd, root, name)
    pending = deque(_components(relpath))
    links = 0
    try:
        while True:
            part = pending.popleft()
            if part == "..":
                lookup.up()
                if not pending:
                    pending.append(".")  # the directory itself is what is named
                continue
            if part == "." and pending:
                continue
            try:
                if not pending:
                    return leaf(lookup.fd, part)
                lookup.down(part)
                continue
            except OSError as exc:
                target = _symlink_in_the_way(exc, lookup.fd, part)
            links += 1
            if links > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
            if target.startswith("/"):
                target = lookup.under_root(target)
                lookup.to_root()
            pending.extendleft(reversed(_components(target)))
    finally:
        lookup.to_root()


def name_of(export: str, relpath: str = "") -> str:
    """How messages name a file (``export:relpath``), or the export itself when
    there is no relpath (a listing of its whole tree): never ``export:``."""
    return f"{export}:{relpath}" if relpath else export
