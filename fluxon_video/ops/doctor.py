"""fluxon-video doctor: each link from this process to the bytes, checked in order.

config -> identity -> KV (Redis) -> each export: its agents' /healthz, a
listing and a stat with the identity's token, one byte range read. Every
check prints a verdict and what it saw; the first failure of a chain says
what to look at.
"""

from __future__ import annotations

import ssl
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from fluxon_video.errors import FluxonFsError
from fluxon_video.fs.config import FluxonFsExport
from fluxon_video.fs.kv import redact
from fluxon_video.patcher import FluxonFsPatcher


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def _timed(name: str, call: Callable[[], str]) -> Check:
    t0 = time.perf_counter()
    try:
        detail = call()
    except (FluxonFsError, OSError) as exc:
        return Check(name, False, str(exc))
    return Check(name, True, f"{detail} ({(time.perf_counter() - t0) * 1e3:.0f} ms)")


def check_kv(patcher: FluxonFsPatcher) -> Check:
    settings = patcher.config.client
    if not settings.redis_url:
        return Check("kv", True, "in-process piece store (no client.redis_url: nothing is "
                                 "shared between processes or nodes)")

    def probe() -> str:
        kv = patcher.client.kv
        key = f"fluxonfs:doctor:{time.time_ns()}"
        if not kv.put(key, {"probe": b"ok"}, 10):
            raise OSError(f"Redis {redact(','.join(settings.redis_urls))} refused a write or "
                          "does not answer: check client.redis_url")
        kv.delete(key)
        seal = patcher.client.seal
        return (f"Redis {redact(','.join(settings.redis_urls))} answers a write and a delete; "
                f"entries sealed ({seal.protection.value}) with key id {seal.current_key_id()}")
    return _timed("kv", probe)


def check_agents(patcher: FluxonFsPatcher, export: FluxonFsExport) -> list[Check]:
    bundle = patcher.config.client.agent_ca_bundle
    context = ssl.create_default_context(cafile=bundle) if bundle else None
    checks = []
    for url in export.agent_urls:
        def health(url: str = url) -> str:
            with urllib.request.urlopen(url + "/healthz", timeout=5, context=context) as answer:
                if answer.read() != b"ok":
                    raise OSError(f"{url}/healthz did not answer ok")
            return f"{url} is up"
        checks.append(_timed(f"{export.name}: agent", health))
    if not export.agent_urls:
        checks.append(Check(f"{export.name}: agent", True,
                            f"served in this process from {export.root}"))
    return checks


def check_export(patcher: FluxonFsPatcher, export: FluxonFsExport) -> list[Check]:
    checks = check_agents(patcher, export)
    if not all(c.ok for c in checks):
        return checks
    found: list[str] = []

    def listing() -> str:
        first = next(iter(patcher.list_files(export.name)), None)
        if first is None:
            raise OSError(f"{export.name}: the export lists no file")
        found.append(first.relpath)
        return f"the token lists {export.name} (first file: {first.relpath})"

    checks.append(_timed(f"{export.name}: list", listing))
    if not found:
        return checks
    relpath = found[0]

    def stat() -> str:
        version = patcher.file_version(export.name, relpath)
        return f"{relpath}: {version.size} bytes"

    def read() -> str:
        data = patcher.read_range(export.name, relpath, 0, min(4096, patcher.file_version(
            export.name, relpath).size))
        return f"read {len(data)} bytes of {relpath}"

    checks.append(_timed(f"{export.name}: stat", stat))
    checks.append(_timed(f"{export.name}: read", read))
    return checks


def run_doctor(patcher: FluxonFsPatcher, export_names: list[str] | None = None) -> list[Check]:
    checks = [Check("config", True, f"{patcher.config.source or '(Python)'}: "
                                    f"{len(patcher.config.exports)} export(s), identities "
                                    f"{', '.join(patcher.config.identities) or 'none'}")]
    who = patcher.identity
    checks.append(Check("identity", who is not None,
                        f"acting as {who.name}" if who is not None else
                        "none: pass --identity or set FLUXON_VIDEO_IDENTITY"))
    checks.append(check_kv(patcher))
    if who is None:
        return checks
    for name in export_names or list(patcher.config.exports):
        checks += check_export(patcher, patcher.config.export(name))
    return checks
