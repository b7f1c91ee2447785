"""What ``VideoClipDataset`` does with an item it cannot read: the ``on_error`` policy.

An item is *bad* when its read raises an error about the file itself, which
reading it again will not change:

- about the file (:data:`BAD_FILE_ERRORS`): it does not exist or is not a
  regular file (``FluxonFsNotFoundError``), or it cannot be demuxed or decoded,
  is damaged, or lacks the stream asked for (``FluxonFsDecodeError`` and its
  subclasses ``FluxonFsDamagedStreamError``, ``FluxonFsNoVideoStreamError``,
  ``FluxonFsNoAudioStreamError``). The file is then *known bad* in that
  process: it is never read again there;
- about the clip alone (:data:`BAD_CLIP_ERRORS`): ``FluxonFsAudioRangeError``
  (``AudioSpec(pad=False)`` and a clip whose span the audio stream does not
  cover). Only that item is replaced; the file's other clips are still read.

Everything else is raised whatever the policy: argument and configuration
errors (``TypeError``, ``FluxonFsConfigError``, ``FluxonFsBadRequestError``,
``FluxonFsFrameIndexError``), access refused (``FluxonFsPermissionError``: an
identity problem is every file's), and I/O that may recover
(``FluxonFsIOError``, ``FluxonFsTimeoutError``, ``FluxonFsOverloadedError``,
``FluxonFsFileChangedError``, ...): those reach the training loop once the
client's own retries and replica failover are spent, as without a policy.

``on_error="skip"`` replaces a bad item ``i`` (video ``v = i //
clips_per_video``, slot ``k = i % clips_per_video``) by item ``v' *
clips_per_video + k``, where ``v'`` is the first usable video of a sequence
drawn from a generator seeded by ``(seed, epoch, v)``: not ``v``, not known
bad, not already tried for this item. The sequence is fixed, so the
replacement is the same in every worker and on every rank whatever each has
found bad before; the clips of one bad video are replaced by clips of one
good video, so a ``SameVideoBatchSampler`` batch stays one video. After
:data:`MAX_REPLACEMENT_TRIES` failed reads for one item (a store that lost
every object looks like that, not one bad file) the read raises
:class:`FluxonFsNoReadableItemError`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from fluxon_video.errors import (
    FluxonFsAudioRangeError,
    FluxonFsConfigError,
    FluxonFsDecodeError,
    FluxonFsError,
    FluxonFsNotFoundError,
)
from fluxon_video.logs import get_logger

POLICIES = ("raise", "skip")
BAD_FILE_ERRORS: tuple[type[BaseException], ...] = (FluxonFsNotFoundError, FluxonFsDecodeError)
BAD_CLIP_ERRORS: tuple[type[BaseException], ...] = (FluxonFsAudioRangeError,)
# Reads of replacements that may fail for one item before the read gives up.
MAX_REPLACEMENT_TRIES = 16
# Draws from the replacement generator before it walks a permutation of the
# videos (which ends the sequence, so a dataset of bad files ends too).
_RANDOM_DRAWS = 32
# Keeps the replacement generator's streams apart from the clips' (seed, epoch, i).
_STREAM = 0x0BAD

OnError = str | Callable[[int, BaseException], dict]

log = get_logger("torch")


class FluxonFsNoReadableItemError(FluxonFsError, RuntimeError):
    """``on_error="skip"`` found no readable replacement for an item: every
    video was bad, or :data:`MAX_REPLACEMENT_TRIES` replacements in a row failed."""


def check_on_error(on_error: Any) -> OnError:
    if callable(on_error) or on_error in POLICIES:
        return on_error
    raise FluxonFsConfigError(f"on_error must be one of {POLICIES} or a callable "
                              f"(index, exception) -> item, got {on_error!r}")


def bad_kind(exc: BaseException) -> str | None:
    """"file", "clip" or None (not a bad item: raise it)."""
    if isinstance(exc, BAD_CLIP_ERRORS):
        return "clip"
    if isinstance(exc, BAD_FILE_ERRORS):
        return "file"
    return None


def unwrapped(exc: BaseException) -> BaseException:
    """The error a batched read raised, without the ``requests[...]`` label it added."""
    cause = exc.__cause__
    return cause if cause is not None and type(cause) is type(exc) else exc


def replacement_videos(seed: int, epoch: int, video: int, videos: int) -> Iterator[int]:
    """The candidate videos for the items of ``video``, in the order they are tried."""
    rng = np.random.default_rng([seed, epoch, video, _STREAM])
    for _ in range(_RANDOM_DRAWS):
        yield int(rng.integers(videos))
    yield from (int(v) for v in rng.permutation(videos))


class BadItems:
    """One process's record: the files known bad (and why), items replaced."""

    def __init__(self, export_name: str) -> None:
        self.export_name = export_name
        self.files: dict[str, BaseException] = {}
        self.items = 0
        self._unreported: list[str] = []
        self._lock = threading.Lock()

    def file_error(self, relpath: str) -> BaseException | None:
        return self.files.get(relpath)

    def add_file(self, relpath: str, exc: BaseException) -> None:
        """Remember a bad file; logs one line the first time this process sees it."""
        with self._lock:
            if relpath in self.files:
                return
            self.files[relpath] = _detached(exc)
            self._unreported.append(relpath)
        log.warning("bad file %s:%s, skipped from now on in this process (pid %d): %s: %s",
                    self.export_name, relpath, os.getpid(), type(exc).__name__, exc)

    def add_item(self) -> None:
        with self._lock:
            self.items += 1

    def take_new_files(self) -> list[str]:
        """Files found bad since the last call (what a batch's stats report)."""
        with self._lock:
            new, self._unreported = self._unreported, []
        return new


def _detached(exc: BaseException) -> BaseException:
    """The error without its traceback and chain, which hold the frames (and
    the arrays) of the read that raised it: what a known-bad file keeps."""
    try:
        copy = type(exc)(*exc.args)
    except Exception:  # an exception class with another signature
        copy = exc
    copy.__traceback__ = copy.__cause__ = copy.__context__ = None
    return copy


def log_clip(export_name: str, relpath: str, index: int, exc: BaseException) -> None:
    if log.isEnabledFor(logging.INFO):
        log.info("bad clip, item %d of %s:%s: %s: %s", index, export_name, relpath,
                 type(exc).__name__, exc)
