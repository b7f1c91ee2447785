"""What the DataLoader benchmark's workers run: the datasets (fluxon's, forced to the
plan's clips, and the peers'), a collate that says when its worker came up, and a meter
of the CPU other work took during an epoch."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from contenders import DecordHandle, TorchcodecHandle
from fluxon_video.torch import VideoClipDataset
from passes import error_text

SIZE = 224


class PlannedClips(VideoClipDataset):
    """VideoClipDataset whose item i is the plan's clip i (instead of a seeded draw)."""

    def __init__(self, *args: Any, plan: list[list[Any]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plan = plan

    def clip_with_times(self, i: int) -> tuple[str, list[int], None]:
        relpath, indices = self.plan[i]
        return relpath, list(indices), None


class PeerClips(Dataset):
    """A peer on the local files: a new reader per item, or (share_open) per video per batch.

    A failing read does not stop the epoch: the item carries zero frames and
    the error, and the row is flagged.
    """

    def __init__(self, peer: str, root: Path, plan: list[list[Any]], threads: int,
                 share_open: bool) -> None:
        self.peer, self.root, self.plan = peer, root, plan
        self.threads, self.share_open = threads, share_open

    def __len__(self) -> int:
        return len(self.plan)

    def read(self, relpath: str, indices: list[int]) -> torch.Tensor:
        handle = (DecordHandle if self.peer == "decord" else TorchcodecHandle)(
            self.root / relpath, SIZE, SIZE, self.threads)
        return torch.from_numpy(handle.read(indices))

    def items(self, items: Sequence[int]) -> list[dict[str, Any]]:
        """share_open: one reader and one read (the sorted union of the clips' indices) per
        video of the batch, split back into clips; else one reader and one read per item."""
        groups: dict[Any, list[int]] = {}
        for i in items:
            groups.setdefault(self.plan[i][0] if self.share_open else i, []).append(i)
        out: dict[int, dict[str, Any]] = {}
        for members in groups.values():
            relpath = self.plan[members[0]][0]
            union = sorted({f for i in members for f in self.plan[i][1]})
            error = ""
            try:
                frames = self.read(relpath, union)
                if tuple(frames.shape) != (len(union), SIZE, SIZE, 3):
                    raise ValueError(f"frames of shape {tuple(frames.shape)}")
            except Exception as exc:  # noqa: BLE001 - a failing peer is a finding
                error = f"{relpath}: {error_text(exc, 160)}"
                frames = torch.zeros((len(union), SIZE, SIZE, 3), dtype=torch.uint8)
            at = {f: k for k, f in enumerate(union)}
            for i in members:
                indices = self.plan[i][1]
                out[i] = {"frames": frames[[at[f] for f in indices]], "relpath": relpath,
                          "indices": torch.as_tensor(indices, dtype=torch.int64),
                          "error": error}
        return [out[i] for i in items]

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items([int(i)])[0]

    def __getitems__(self, items: Sequence[int]) -> list[dict[str, Any]]:
        return self.items([int(i) for i in items])


# ---- worker bookkeeping ----

_WORKER_UP: float | None = None


def note_worker_up(worker_id: int) -> None:
    global _WORKER_UP
    _WORKER_UP = time.monotonic()


class TimedCollate:
    """The inner collate, plus when this worker came up (time.monotonic, system-wide)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.inner(items)
        batch["worker"] = {"pid": os.getpid(), "up": _WORKER_UP}
        return batch


class CpuMeter:
    """How busy the machine was with work that is not this benchmark's, during an epoch:
    system-wide busy CPU time minus this process, its reaped children (the epoch's
    workers are joined when it ends) and the agent and redis-server."""

    def __init__(self, pids: list[int]) -> None:
        import psutil

        self.servers = [psutil.Process(pid) for pid in pids]
        self.psutil = psutil

    def sample(self) -> tuple[float, float]:
        t = self.psutil.cpu_times()
        busy = sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "steal", 0.0) \
            - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        own = os.times()
        ours = own.user + own.system + own.children_user + own.children_system
        for proc in self.servers:
            try:
                c = proc.cpu_times()
                ours += c.user + c.system
            except self.psutil.Error:
                pass
        return busy, ours

    def other_cores(self, before: tuple[float, float], seconds: float) -> float:
        busy, ours = self.sample()
        return max(0.0, (busy - before[0]) - (ours - before[1])) / seconds
