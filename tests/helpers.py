"""Helpers shared by the test modules: identities, config text, patchers, sources, threads.

Test modules import from here (and from tests.media for the generated
videos); fixtures live in conftest.py. No test module imports another.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

import fluxon_video as fv
from fluxon_video.fs.config import ClientSettings, FluxonFsExport, RequestIdentity
from fluxon_video.sources import BytesRangeSource
from fluxon_video.testing import LOOPBACK

# Made once with `fluxon-video token new`: the agent refuses tokens under 128 bits.
IDENTITIES = {"alice": "ZWWr0thz8hKb6VViiiqQBjBM6zMkLttXSuBJfiFKJng",
              "bob": "wFc7gsXEqbFjuk_UvIg8qoGWUGFs-m3z_SAUOhplETw"}


# The secret that seals the tests' shared-KV entries (fs/kv_seal.py); Redis never sees it.
KV_KEY = "test-kv-key-9f3Kq2LmZx7Wv4Tn8Rb1Yc6Hd0Ja5Ue"


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made now by the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is not installed (Debian: apt-get install openssl)")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1",
                    "-subj", f"/CN={LOOPBACK}", "-addext", f"subjectAltName=IP:{LOOPBACK}"],
                   check=True, capture_output=True)
    return cert, key


def http_get(url: str, token: str = IDENTITIES["alice"], timeout: float = 10
             ) -> tuple[int, bytes]:
    """(status, body) of a GET with a bearer token, error statuses included."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


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
    client = {"kv_keys": (KV_KEY,), **(client or {})} if redis_url else (client or {})
    settings = ClientSettings(redis_url=redis_url, **client)
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


def check_rank_shards(shards: list[list[int]], drop_last: bool, dealt: int, total: int) -> None:
    """Ranks' shares as DistributedSampler deals ``range(total)``: equal lengths,
    ``dealt`` in all; with drop_last no element twice, else every element."""
    assert len({len(shard) for shard in shards}) == 1  # equal lengths
    everything = [i for shard in shards for i in shard]
    if drop_last:
        assert len(everything) == len(set(everything)) == dealt
    else:
        assert sorted(set(everything)) == list(range(total)) and len(everything) == dealt


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
