"""Which batch a process reads next, from its batch sampler's order.

A DataLoader hands a worker one batch of indices at a time; what comes after
it is the sampler's to know. A sampler whose order follows from its seed and
epoch alone (``SameVideoBatchSampler``) can be drawn again in every worker,
and a worker then knows its own next batch: with ``W`` workers, the
DataLoader deals the batches round robin, so worker ``w`` reads batches
``w, w + W, w + 2W, ...`` (the main process, with no workers, reads them
all). The dataset reads that next batch's bytes while this one decodes.

A batch that is not in the plan (another sampler, an epoch the worker's
copy does not know) plans nothing: a lookahead never fetches bytes the
reads would not read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from fluxon_video.errors import FluxonFsConfigError
from fluxon_video.validation import positive_int


class PlannedSampler(Protocol):
    """A batch sampler that can list an epoch's batches without being iterated."""

    def planned_batches(self) -> list[list[int]]: ...

    def plan_version(self) -> Hashable: ...


def dataloader_worker() -> Any | None:
    """This process's DataLoader worker (torch's ``get_worker_info()``), None
    outside one (or without torch, an extra)."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:  # pragma: no cover - torch is an extra
        return None
    return get_worker_info()


def _readers_of_batches() -> int:
    """How many processes the batches are dealt to: the DataLoader's workers,
    or 1 outside a worker."""
    info = dataloader_worker()
    return 1 if info is None else info.num_workers


class BatchPlan:
    """The batches of one epoch and where this process is in them."""

    def __init__(self, sampler: PlannedSampler) -> None:
        self.sampler = sampler
        self._version: Hashable = None
        self._batches: list[tuple[int, ...]] = []
        self._where: dict[tuple[int, ...], list[int]] = {}
        self._last = -1
        self._expected: tuple[int, ...] | None = None
        # the last batch given was not the one planned for it: what was
        # fetched ahead is for a batch that is not coming next
        self.changed = False

    def after(self, batch: Sequence[int],
              on_change: Callable[[], object] | None = None) -> list[int] | None:
        """The batch this process reads after ``batch``, or None (the epoch's
        end, or ``batch`` is not one of the plan's); ``changed`` says whether
        ``batch`` was not the one planned, and then ``on_change`` is called
        (to drop what was fetched ahead for the planned one)."""
        given = tuple(int(i) for i in batch)
        self.changed = self._expected is not None and given != self._expected
        self._expected = None
        if self.changed and on_change is not None:
            on_change()
        version = self.sampler.plan_version()
        if version != self._version or not self._batches:
            self._batches = [tuple(b) for b in self.sampler.planned_batches()]
            self._where = {}
            for position, b in enumerate(self._batches):
                self._where.setdefault(b, []).append(position)
            self._version, self._last = version, -1
        positions = self._where.get(given)
        if not positions:
            return None
        # the same batch twice in an epoch: the first one after where we were
        here = next((p for p in positions if p > self._last), positions[0])
        self._last = here
        following = here + _readers_of_batches()
        if following >= len(self._batches):
            return None
        self._expected = self._batches[following]
        return list(self._expected)

    def __reduce__(self) -> tuple[Any, ...]:
        # a worker starts a plan of its own: it draws the order again from the
        # sampler (its seed, its epoch)
        return BatchPlan, (self.sampler,)


class SeededBatchSampler:
    """Batches of ``range(length)`` in an order drawn from ``(seed, epoch)`` alone,
    so a dataset can draw it again in every DataLoader worker and read each
    worker's next batch ahead (``dataset.plan_batches(sampler)``). Give it to
    the DataLoader as ``batch_sampler``, and call ``set_epoch(epoch)`` before
    each epoch (as with DistributedSampler): the same epoch repeats its order.
    ``shuffle`` False keeps the indices in order; ``drop_last`` drops a last
    batch shorter than ``batch_size``.

    Across ranks as DistributedSampler shards: every rank draws the same order
    (the same ``seed`` everywhere) and rank ``r`` of ``num_replicas`` takes
    indices ``r, r + num_replicas, ...`` of it, padded with the first indices
    again to a multiple of ``num_replicas`` (``drop_last``: cut instead), then
    batches them. ``num_replicas`` and ``rank`` default to torch.distributed's
    once it is initialised, else one replica."""

    def __init__(self, length: int, batch_size: int, *, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, num_replicas: int | None = None,
                 rank: int | None = None) -> None:
        self.length = positive_int("length", length)
        self.batch_size = positive_int("batch_size", batch_size)
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.num_replicas, self.rank = replicas(num_replicas, rank)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration draws."""
        self.epoch = int(epoch)

    def indices(self) -> np.ndarray:
        """This rank's indices for the current epoch, in order."""
        order = (np.random.default_rng([self.seed, self.epoch]).permutation(self.length)
                 if self.shuffle else np.arange(self.length))
        return shard(order, self.num_replicas, self.rank, self.drop_last)

    def planned_batches(self) -> list[list[int]]:
        order = self.indices()
        batches = [order[i:i + self.batch_size].tolist()
                   for i in range(0, len(order), self.batch_size)]
        if batches and self.drop_last and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def plan_version(self) -> tuple[int, int, bool, int, int, bool, int, int]:
        return (self.seed, self.epoch, self.shuffle, self.length, self.batch_size,
                self.drop_last, self.num_replicas, self.rank)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.planned_batches())

    def __len__(self) -> int:
        whole, rest = divmod(shard_length(self.length, self.num_replicas, self.drop_last),
                             self.batch_size)
        return whole + (1 if rest and not self.drop_last else 0)


def shard(order: np.ndarray, num_replicas: int, rank: int, drop_last: bool) -> np.ndarray:
    """Rank ``rank``'s part of ``order``, as DistributedSampler deals it: every
    ``num_replicas``-th element from ``rank``, the order first padded with its
    own first elements to a multiple of ``num_replicas`` (``drop_last``: cut)."""
    n = len(order)
    if drop_last:
        order = order[:n - n % num_replicas]
    elif n % num_replicas:
        order = np.concatenate([order, np.resize(order, num_replicas - n % num_replicas)])
    return order[rank::num_replicas]


def shard_length(n: int, num_replicas: int, drop_last: bool) -> int:
    """How many of ``n`` elements ``shard`` gives each rank."""
    return n // num_replicas if drop_last else -(-n // num_replicas)


def replicas(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """(num_replicas, rank): as given, else torch.distributed's once initialised
    (torch imported only then), else one replica."""
    if num_replicas is None or rank is None:
        dist = _distributed()
        if dist is not None:
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        elif num_replicas is None and rank is None:
            num_replicas, rank = 1, 0
        else:
            raise FluxonFsConfigError("give both num_replicas and rank, or neither (then "
                                      "torch.distributed's, once initialised, or one replica)")
    num_replicas = positive_int("num_replicas", num_replicas)
    if (isinstance(rank, (bool, np.bool_)) or not isinstance(rank, (int, np.integer))
            or not 0 <= rank < num_replicas):
        raise FluxonFsConfigError(f"rank must be an int in [0, {num_replicas}), got {rank!r}")
    return num_replicas, int(rank)


def _distributed() -> Any:
    """torch.distributed if torch is loaded and a process group is up, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = torch.distributed
    return dist if dist.is_available() and dist.is_initialized() else None
