"""How the benchmarks reach fluxon through FluxonFS: the agent's config, the patcher.

A scenario describes its store in a plain dict (``fx``: export, root,
agent_url, redis_url, identity, token, optional piece size and metadata-cache
settings) because it travels to child processes as JSON or a pickle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

IDENTITY, TOKEN = "bench", "bench-token"
# Export settings a scenario may set; the export's defaults otherwise.
OPTIONAL = ("piece_size", "metadata_cache_shared", "metadata_cache_ttl_ms")


def write_agent_config(path: Path, export: str, root: Path | str,
                       store_options: dict[str, Any] | None = None) -> Path:
    """The agent's TOML: one export of ``root`` that the bench identity may read (an
    object-store root with its ``store`` table: the agent holds the credentials)."""
    store_line = f"store = {toml_inline(store_options)}\n" if store_options else ""
    path.write_text(f'[identities]\n{IDENTITY} = "{TOKEN}"\n\n[[exports]]\n'
                    f'name = "{export}"\nroot = "{root}"\n'
                    f'allow = ["{IDENTITY}"]\n{store_line}')
    return path


def toml_inline(table: dict[str, Any]) -> str:
    """A flat dict of strings, numbers and booleans as a TOML inline table."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        return json.dumps(v)  # a JSON string or number is a TOML basic string or number
    return "{ " + ", ".join(f"{k} = {value(v)}" for k, v in table.items()) + " }"


def store(export: str, root: Path, agent_url: str, redis_url: Any, **optional: Any) -> dict:
    """The ``fx`` dict of a store."""
    return {"export": export, "root": str(root), "agent_url": agent_url,
            "redis_url": redis_url, "identity": IDENTITY, "token": TOKEN, **optional}


def make_patcher(fx: dict, **client: Any) -> Any:
    import fluxon_video as fv
    from fluxon_video.fs.config import ClientSettings, FluxonFsExport

    export = FluxonFsExport(fx["export"], fx["root"], agent_url=fx["agent_url"],
                            allow=[fx["identity"]], **{k: fx[k] for k in OPTIONAL if k in fx})
    return fv.FluxonFsPatcher(exports=[export], identities={fx["identity"]: fx["token"]},
                              client=ClientSettings(redis_url=fx["redis_url"], **client),
                              identity=fx["identity"])


def settle(patcher: Any, timeout_s: float = 120) -> None:
    """Wait for the backfill, so that every piece read so far is in the KV (the next
    reader's hits and misses are then the cache's, not the queue's)."""
    if not patcher.client.backfill.wait_idle(timeout=timeout_s):
        raise RuntimeError(f"backfill did not finish within {timeout_s:g} s")


def evict(fx: dict, relpath: str) -> None:
    """Drop every KV piece of one file (a cold start for it, others stay warm)."""
    import redis

    client = redis.Redis.from_url(fx["redis_url"])
    for pattern in (f"*:{relpath}:*", f"*:{relpath}"):  # pieces and stats; the index
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)
