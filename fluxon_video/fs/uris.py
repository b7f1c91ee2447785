"""From a URI (what manifests hold) to the (export, relpath) that names the file.

Every export has a ``root``: a directory path on the storage host, or an
object-store URL (``s3://bucket/prefix``, ``gs://``, ``az://``,
``https://host/prefix``). A URI names a file of the export whose root it
starts with, at the relpath that follows the root:

    s3://videos/train/clips/a.mp4   root s3://videos/train  ->  ("train", "clips/a.mp4")
    /data/videos/cam1/b.mp4         root /data/videos       ->  ("local", "cam1/b.mp4")
    file:///data/videos/cam1/b.mp4  the same

The rules (docs/object-stores.md, "URIs"):

- What counts as a URI: a string starting ``scheme://`` (any scheme), or an
  absolute path (``/...``). ``file://`` URIs (empty host or ``localhost``)
  and absolute paths match directory roots only; other schemes match
  object-store roots of the same scheme (``s3a://`` is ``s3://``, as for
  obstore). Schemes compare case-insensitively, the rest as written: no
  percent-decoding, no query or fragment parsing, no symlink resolution
  (a directory root is on the agent's host, not necessarily this one).
- Paths compare by components: empty and ``.`` components (``//``, ``/./``)
  are dropped on both sides, so ``s3://videos/train/`` is the root
  ``s3://videos/train``; a ``..`` component is refused, never resolved.
- The root with the most components in common wins (nested roots: the
  inner one). Several exports with that same root (one tree, two access
  lists): the ones whose ``allow`` names the identity, if that leaves one;
  else it is ambiguous, and refused naming them: pass the export's name.
- With an export named (``resolve_uri(config, uri, export_name="train")``),
  the URI must lie under that export's root, and the relpath is taken from
  it: no ambiguity.
- A URI under no root is refused (FluxonFsBadRequestError) naming the
  exports whose roots come closest (most leading components in common).

The relpath returned is "" for the root itself (a listing of the whole
export), and keeps a trailing ``/`` the URI had (a listing prefix naming a
directory); file calls check it as any relpath (``fs/paths.check_relpath``).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

from fluxon_video.errors import FluxonFsBadRequestError
from fluxon_video.fs.config import FluxonFsConfig, FluxonFsExport

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# Schemes obstore reads as another's: one store, two spellings.
_ALIASES = {"s3a": "s3"}
# The most exports a refusal names as the closest.
_SHOWN = 3


def is_uri(text: object) -> bool:
    """Whether ``text`` is a URI (``scheme://...``) or an absolute path, which
    the resolver maps to (export, relpath), rather than a relpath."""
    return isinstance(text, str) and (bool(_SCHEME.match(text)) or text.startswith("/"))


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _parts(location: str) -> list[str] | None:
    """``location`` (a root or a URI) as comparable components: the scheme
    first (``file`` for a local path), then the authority (a bucket, a host)
    for a URL, then the path's components. None: a relative local path,
    which no URI can name."""
    found = _SCHEME.match(location)
    if found is None:
        return ["file", *_components(location)] if location.startswith("/") else None
    scheme = found.group(1).lower()
    scheme = _ALIASES.get(scheme, scheme)
    rest = location[found.end():]
    if scheme == "file":
        host, slash, path = rest.partition("/")
        if host not in ("", "localhost"):
            return ["file:" + host, *_components(path)]  # another host's: matches no root
        return ["file", *_components(slash + path)]
    return [scheme, *_components(rest)]


def _shown(export: FluxonFsExport) -> str:
    """The export's root for a message: a URL without user information."""
    found = _SCHEME.match(export.root)
    if found is None:
        return export.root
    parts = urllib.parse.urlsplit(export.root)
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _closest(uri_parts: list[str], exports: Iterable[FluxonFsExport]) -> str:
    """The exports whose roots share the most leading components with the URI,
    for a refusal; any exports at all when none shares its scheme."""
    scored = []
    for export in exports:
        root = _parts(export.root)
        scored.append((_common(uri_parts, root) if root is not None else 0, export))
    if not scored:
        return "no export is configured"
    best = max(score for score, _ in scored)
    near = sorted((e for score, e in scored if score == best), key=lambda e: e.name)
    listed = ", ".join(f"{e.name} ({_shown(e)})" for e in near[:_SHOWN])
    more = f" and {len(near) - _SHOWN} more" if len(near) > _SHOWN else ""
    if best == 0:
        return f"the exports' roots: {listed}{more}"
    return f"the closest: {listed}{more}"


def _relpath(uri: str, uri_parts: list[str], depth: int) -> str:
    relpath = "/".join(uri_parts[depth:])
    return relpath + "/" if relpath and uri.endswith("/") else relpath


def resolve_uri(config: FluxonFsConfig, uri: str, export_name: str | None = None,
                identity: str | None = None) -> tuple[str, str]:
    """(export name, relpath) of ``uri`` under the configured roots (see the
    module's rules). ``export_name``: the export it must be under; ``identity``:
    the name that settles a tie between exports sharing one root.
    FluxonFsBadRequestError when it is under no root (naming the closest),
    under the named export's root not, or under several exports' alike."""
    if not is_uri(uri):
        raise FluxonFsBadRequestError(
            f"{uri!r} is not a URI (scheme://...) or an absolute path; a relpath inside an "
            "export needs the export's name")
    uri_parts = _parts(uri)
    assert uri_parts is not None  # a URI or an absolute path
    if ".." in uri_parts:
        raise FluxonFsBadRequestError(f"{uri!r}: a '..' component is refused, not resolved")
    if "\x00" in uri:
        raise FluxonFsBadRequestError(f"{uri!r} contains a NUL byte")
    if export_name is not None:
        export = config.export(export_name)
        root = _parts(export.root)
        if root is None or uri_parts[:len(root)] != root:
            raise FluxonFsBadRequestError(
                f"{uri} is not under the root of export {export_name!r} ({_shown(export)}); "
                f"{_closest(uri_parts, config.exports.values())}")
        return export_name, _relpath(uri, uri_parts, len(root))
    matches: list[tuple[int, FluxonFsExport]] = []
    for export in config.exports.values():
        root = _parts(export.root)
        if root is not None and uri_parts[:len(root)] == root:
            matches.append((len(root), export))
    if not matches:
        raise FluxonFsBadRequestError(
            f"{uri} is under no export's root; {_closest(uri_parts, config.exports.values())}")
    depth = max(d for d, _ in matches)
    tied = [e for d, e in matches if d == depth]
    if len(tied) > 1 and identity is not None:
        allowed = [e for e in tied if identity in e.allow]
        tied = allowed or tied
    if len(tied) > 1:
        names = ", ".join(e.name for e in sorted(tied, key=lambda e: e.name))
        raise FluxonFsBadRequestError(
            f"{uri} is under the root of several exports ({names}: {_shown(tied[0])}); "
            "name the export (EXPORT:RELPATH, or export_name=)")
    return tied[0].name, _relpath(uri, uri_parts, depth)
