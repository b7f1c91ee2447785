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

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from fluxon_video.validation import positive_int


class PlannedSampler(Protocol):
    """A batch sampler that can list an epoch's batches without being iterated."""

    def planned_batches(self) -> list[list[int]]: ...

    def plan_version(self) -> Hashable: ...


def _readers_of_batches() -> int:
    """How many processes the batches are dealt to: the DataLoader's workers,
    or 1 outside a worker."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:  # pragma: no cover - torch is an extra
        return 1
    info = get_worker_info()
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
    batch shorter than ``batch_size``."""

    def __init__(self, length: int, batch_size: int, *, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False) -> None:
        self.length = positive_int("length", length)
        self.batch_size = positive_int("batch_size", batch_size)
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration draws."""
        self.epoch = int(epoch)

    def planned_batches(self) -> list[list[int]]:
        order = (np.random.default_rng([self.seed, self.epoch]).permutation(self.length)
                 if self.shuffle else np.arange(self.length))
        batches = [order[i:i + self.batch_size].tolist()
                   for i in range(0, self.length, self.batch_size)]
        if self.drop_last and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def plan_version(self) -> tuple[int, int, bool, int, int, bool]:
        return (self.seed, self.epoch, self.shuffle, self.length, self.batch_size,
                self.drop_last)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.planned_batches())

    def __len__(self) -> int:
        whole, rest = divmod(self.length, self.batch_size)
        return whole + (1 if rest and not self.drop_last else 0)
