"""Helpers shared by the test modules: identities, config text, patchers, sources, threads.

Test modules import from here (and from tests.media for the generated
videos); fixtures live in conftest.py. No test module imports another.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import fluxon_video as fv
from fluxon_video.fs.config import ClientSettings, FluxonFsExport, RequestIdentity
from fluxon_video.sources import BytesRangeSource

IDENTITIES = {"alice": "token-alice", "bob": "token-bob"}


def agent_config_text(root: Path) -> str:
    """TOML with IDENTITIES and two exports of ``root``: train (alice) and shared (alice, bob)."""
    identities = "\n".join(f'{name} = "{token}"' for name, token in IDENTITIES.items())
    return (f"[identities]\n{identities}\n\n"
            f'[[exports]]\nname = "train"\nroot = "{root}"\nallow = ["alice"]\n\n'
            f'[[exports]]\nname = "shared"\nroot = "{root}"\nallow = ["alice", "bob"]\n')


def make_patcher(agent_url: str | None, root, redis_url: str | None = None,
                 identity: str | RequestIdentity = "alice", client: dict | None = None,
                 **export_options) -> fv.FluxonFsPatcher:
    """A patcher with the exports of agent_config_text; agent_url None serves them in-process."""
    exports = [FluxonFsExport(name, str(root), agent_url=agent_url, allow=allow, **export_options)
               for name, allow in (("train", ["alice"]), ("shared", ["alice", "bob"]))]
    settings = ClientSettings(redis_url=redis_url, **(client or {}))
    return fv.FluxonFsPatcher(exports=exports, identities=IDENTITIES, client=settings,
                              identity=identity)


class RaisingSource(BytesRangeSource):
    """Raises RaisingSource.Boom for any read reaching past ``fail_from``."""

    class Boom(RuntimeError):
        pass

    def __init__(self, data: bytes, fail_from: int) -> None:
        super().__init__(data, "raising")
        self.fail_from = fail_from

    def read_range(self, offset: int, length: int) -> bytes:
        if offset + length > self.fail_from:
            raise self.Boom(f"storage exploded at {offset}")
        return super().read_range(offset, length)


def run_in_threads(worker: Callable[[int], object], count: int) -> list[BaseException]:
    """Run worker(0..count-1) on count threads; return what they raised."""
    failures: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            worker(i)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            failures.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures
