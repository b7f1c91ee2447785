"""Image cameras' encoded frames, kept out of each process's memory.

LeRobot keeps a camera of ``dtype`` ``"image"`` as each row's image file
inside the data parquet, one row group per episode. Loaded whole, a
dataset's images would sit in every process (a GB of PNGs per DataLoader
worker, pickled to spawned ones), and a parquet row group cannot be read a
row at a time. So, as Hugging Face's ``datasets`` does for LeRobot, each
data file's image columns are copied once into an Arrow IPC file in a
node-local cache folder and memory-mapped: a node's processes share its
pages through the page cache, an item reads its own images' bytes only, and
a pickled dataset carries file names.

A cache file is named by the data file's version (``DatasetFiles.version``:
a changed file is a new name) and written under a temporary name, then
renamed, so a reader never sees half of one; the processes that need the
same one at once take turns on its lock file, so it is written once. The
folder is the user's alone (mode 0700).

Each use of a copy (a dataset built on it, a process mapping it) touches its
lock file, so ``prune`` (``fluxon-video image-cache prune``) can remove the
copies no job has used for a while. A copy removed under a running job stays
readable where it is mapped (the kernel keeps an unlinked file's pages); a
process that maps it afterwards writes it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fluxon_video.errors import FluxonFsConfigError, FluxonFsDecodeError
from fluxon_video.lerobot.files import DatasetFiles
from fluxon_video.lerobot.tables import pyarrow

# Bumped when what a cache file holds changes, so old ones are not read.
FORMAT = "fluxon-lerobot-images-1"
ROW_BITS = 32  # a cell: file number << ROW_BITS | row in the file


def default_cache_dir() -> Path:
    """``$FLUXON_VIDEO_CACHE/lerobot-images``, else ``$XDG_CACHE_HOME`` (or
    ``~/.cache``) ``/fluxon_video/lerobot-images``."""
    own = os.environ.get("FLUXON_VIDEO_CACHE")
    base = Path(own) if own else Path(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "fluxon_video"
    return base / "lerobot-images"


def cache_folder(folder: str | os.PathLike[str] | None = None) -> Path:
    """``folder`` (``~`` expanded), or ``default_cache_dir()`` when None."""
    return Path(folder).expanduser() if folder is not None else default_cache_dir()


def cell(file_no: int, row: int) -> int:
    """Where an image is: the data file's number in the store and its row there."""
    return file_no << ROW_BITS | row


class ImageStore:
    """The image columns ``keys`` of ``data_files`` (relpaths of ``files``):
    each file's written to ``cache_dir`` on construction unless it is there
    (a progress bar on a terminal), memory-mapped by each process at its first
    read."""

    def __init__(self, files: DatasetFiles, data_files: Sequence[str], keys: Sequence[str],
                 cache_dir: str | os.PathLike[str] | None = None) -> None:
        from tqdm import tqdm

        self.files, self.keys = files, list(keys)
        self.data_files = list(data_files)
        folder = cache_folder(cache_dir).absolute()  # workers may start elsewhere
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise FluxonFsConfigError(
                f"{folder}: the image cache folder cannot be made ({exc}); choose another with "
                "image_cache_dir= or $FLUXON_VIDEO_CACHE") from exc
        self.paths = [folder / self._name(relpath) for relpath in self.data_files]
        missing = [k for k, path in enumerate(self.paths) if not path.exists()]
        if missing:
            with tqdm(total=len(missing), unit="file", disable=None,
                      desc=f"fluxon_video: caching the image columns of {files}") as bar:
                for k in missing:
                    self._ensure(k)
                    bar.update(1)
        for path in self.paths:
            _mark_used(path)
        self._reset()

    def _reset(self) -> None:
        self._pid, self._lock = os.getpid(), threading.Lock()
        self._tables: dict[int, Any] = {}

    # ---- the cache files ----

    def _name(self, relpath: str) -> str:
        key = "\n".join([FORMAT, self.files.version(relpath), *self.keys])
        return f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.arrow"

    def _ensure(self, file_no: int) -> None:
        """Write copy ``file_no`` unless it is there."""
        path = self.paths[file_no]
        with _exclusive(path):  # another process may be writing it
            if not path.exists():
                self._write(self.data_files[file_no], path)

    def _write(self, relpath: str, path: Path) -> None:
        pa, pq = pyarrow()
        name = self.files.name(relpath)
        schema = pa.schema([pa.field(k, pa.large_binary()) for k in self.keys])
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            with self.files.open_binary(relpath) as source, pa.OSFile(tmp, "wb") as sink, \
                    pa.ipc.new_file(sink, schema) as writer:
                parquet = pq.ParquetFile(source)
                for group in range(parquet.num_row_groups):
                    table = parquet.read_row_group(group, columns=self.keys, use_threads=False)
                    batch = pa.record_batch([_encoded(pa, table.column(k)) for k in self.keys],
                                            schema=schema)
                    writer.write_batch(batch)
            os.replace(tmp, path)
        except (pa.ArrowException, OSError, KeyError) as exc:
            raise FluxonFsDecodeError(f"{name}: its image columns could not be copied into "
                                      f"{path.parent} ({exc})") from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _table(self, file_no: int) -> Any:
        if self._pid != os.getpid():
            self._reset()  # a parent's maps: this process maps its own
        with self._lock:
            table = self._tables.get(file_no)
            if table is None:
                table = self._tables[file_no] = self._map(file_no)
        return table

    def _map(self, file_no: int) -> Any:
        pa, _ = pyarrow()
        path = self.paths[file_no]
        if not path.exists():  # pruned since the dataset was built: write it again
            self._ensure(file_no)
        _mark_used(path)
        try:
            return pa.ipc.open_file(pa.memory_map(str(path))).read_all()
        except (pa.ArrowException, OSError) as exc:
            raise FluxonFsDecodeError(
                f"{path}: a cache of {self.files.name(self.data_files[file_no])}'s images "
                f"that cannot be read ({exc}); delete it to rebuild it") from exc

    # ---- reads ----

    def encoded(self, key: str, cells: Sequence[int]) -> list[bytes | None]:
        """The encoded image of each cell of column ``key`` (None: the row has none)."""
        out = []
        for c in cells:
            file_no, row = int(c) >> ROW_BITS, int(c) & ((1 << ROW_BITS) - 1)
            value = self._table(file_no).column(key)[row]
            out.append(value.as_py() if value.is_valid else None)
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tables"], state["_lock"] = {}, None  # maps and locks: per process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()


# ---- the folder's upkeep ----

@dataclass
class CachedCopy:
    """One copy in the cache folder: its file, size and when a job last used it."""

    path: Path
    size: int
    last_used: float  # seconds since the epoch


@dataclass
class PruneReport:
    """What ``prune`` removed, and what it kept (``busy``: being written, left)."""

    removed: list[CachedCopy] = field(default_factory=list)
    kept: list[CachedCopy] = field(default_factory=list)
    busy: list[CachedCopy] = field(default_factory=list)


def cached_copies(folder: str | os.PathLike[str] | None = None) -> list[CachedCopy]:
    """The copies in ``folder`` (default: ``default_cache_dir()``), least recently
    used first; none when the folder does not exist."""
    folder = cache_folder(folder)
    copies = []
    for path in folder.glob("*.arrow"):
        try:
            copies.append(CachedCopy(path, path.stat().st_size, _last_used(path)))
        except FileNotFoundError:  # removed meanwhile
            continue
    return sorted(copies, key=lambda c: c.last_used)


def prune(folder: str | os.PathLike[str] | None = None, unused_for_s: float = 30 * 86400,
          dry_run: bool = False) -> PruneReport:
    """Remove the copies in ``folder`` that no job has used for ``unused_for_s``
    seconds, with their lock files, and temporary files left as long ago by
    writes that never finished. A copy being written (its lock held) is left.
    ``dry_run``: report what would go, remove nothing.

    A job that uses a copy just as it goes loses nothing: where it is mapped
    it stays readable, and a process that maps it afterwards writes it again."""
    folder = cache_folder(folder)
    cutoff = time.time() - unused_for_s
    report = PruneReport()
    for copy in cached_copies(folder):
        if copy.last_used >= cutoff:
            report.kept.append(copy)
        elif dry_run:
            report.removed.append(copy)
        else:
            with _exclusive(copy.path, wait=False) as held:
                if not held:
                    report.busy.append(copy)
                    continue
                copy.path.unlink(missing_ok=True)
                copy.path.with_suffix(".lock").unlink(missing_ok=True)
            report.removed.append(copy)
    if not dry_run:
        _remove_leftovers(folder, cutoff)
    return report


def _remove_leftovers(folder: Path, cutoff: float) -> None:
    """Temporary files of writes that never finished and lock files without a
    copy, untouched since ``cutoff``; a lock held by a writer stays."""
    for path in folder.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_mtime < cutoff:
                path.unlink()
    for lock in folder.glob("*.lock"):
        copy = lock.with_suffix(".arrow")
        with contextlib.suppress(FileNotFoundError):
            if copy.exists() or lock.stat().st_mtime >= cutoff:
                continue
            with _exclusive(copy, wait=False) as held:
                if held:
                    lock.unlink()


def _last_used(path: Path) -> float:
    """When a job last used copy ``path``: its lock file's mtime (touched on each
    use), or the copy's own when it has none."""
    written = path.stat().st_mtime
    try:
        return max(written, path.with_suffix(".lock").stat().st_mtime)
    except FileNotFoundError:
        return written


def _mark_used(path: Path) -> None:
    """Touch copy ``path``'s lock file: it is in use (``prune`` keeps it)."""
    try:
        path.with_suffix(".lock").touch()
    except OSError:  # a folder this process may read and not write: nothing to mark
        pass


@contextlib.contextmanager
def _exclusive(path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold ``path``'s lock file: the processes of a node that build one copy at
    once (a DDP job's ranks) take turns, and the ones after the first find it
    written."""
    with open(path.with_suffix(".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:  # only without wait: another process holds it
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _encoded(pa: Any, column: Any) -> Any:
    """A chunked image column as its images' bytes (null where the row has none)."""
    images = column.combine_chunks()
    data = images.field("bytes").cast(pa.large_binary())
    if images.null_count:  # a null struct: its field's value is not the row's
        import pyarrow.compute as pc

        data = pc.if_else(images.is_valid(), data, pa.nulls(len(data), pa.large_binary()))
    return data
