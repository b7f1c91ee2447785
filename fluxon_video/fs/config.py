"""Exports, identities and client settings, from TOML or from Python objects.

A config file looks like::

    [client]
    redis_url = "redis://127.0.0.1:6379/0"   # omit for the in-process piece store
    agent_timeout_s = 10.0

    [identities]                               # identity name -> bearer token
    trainer = "s3cret-trainer-token"

    [[exports]]
    name = "train-videos"
    root = "/data/videos"                      # on the agent host
    agent_url = "http://storage-01:8765"       # omit to serve in-process
    allow = ["trainer"]
    piece_size = 262080                       # one KV piece = one reader page (default)
    # agent_url = ["http://storage-01:8765", "http://storage-02:8765"]  # replicas
    kv_miss_policy = "RemoteRead"              # or "StageToKvThenRead"

Unknown keys and bad values raise FluxonFsConfigError naming the file and key.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from fluxon_video import defaults
from fluxon_video.errors import FluxonFsConfigError

MiB = 1 << 20


class MissPolicy(str, enum.Enum):
    """What a KV miss does (the export's ``kv_miss_policy``)."""

    RemoteRead = "RemoteRead"
    """Read the range from the agent; backfill the piece asynchronously if enabled."""
    StageToKvThenRead = "StageToKvThenRead"
    """Fetch the whole piece, store it in the KV, serve the range from it."""


# Roots that name an object store rather than a directory (fs/object_origin.py).
OBJECT_STORE_SCHEMES = ("s3://", "s3a://", "gs://", "az://", "abfs://", "abfss://", "azure://",
                        "http://", "https://")


class _FrozenOptions(dict):  # type: ignore[type-arg]
    """A store's options: a dict that hashes (an export is a frozen value)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))


@dataclass(frozen=True)
class RequestIdentity:
    """Who a request is made for: a name and the bearer token that proves it."""

    name: str
    token: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise FluxonFsConfigError("an identity needs a non-empty name")
        if not self.token or not isinstance(self.token, str):
            raise FluxonFsConfigError(f"identity {self.name!r} needs a non-empty token")


@dataclass(frozen=True)
class FluxonFsExport:
    """A named tree of files on a storage host, with its access list and cache settings."""

    name: str
    root: str
    # One agent URL, or several: replicas serving the same storage (failover).
    agent_url: str | tuple[str, ...] | None = None
    allow: tuple[str, ...] = ()
    cache_kv_key_prefix: str = "fluxonfs"
    cache_bytes_field_key: str = "bytes"
    cache_max_bytes: int = 64 << 30
    metadata_cache_ttl_ms: int = 5_000
    # On by default. Share agent-authorised stats through the KV for
    # metadata_cache_ttl_ms (per identity token): a warm open or video_metadata
    # in a new process is then one KV round trip and no agent request, and a
    # changed file (or a revoked identity) goes unnoticed that long everywhere,
    # as it already does in one process. Without a KV it changes nothing.
    metadata_cache_shared: bool = True
    async_backfill_enabled: bool = True
    piece_size: int = defaults.PAGE_SIZE
    kv_miss_policy: MissPolicy = MissPolicy.RemoteRead
    # Off by default. While no agent answers, keep serving KV bytes of a file
    # whose stat was authorised within this many seconds (see the README's
    # security note: a revoked identity or a changed file goes unnoticed that long).
    stale_if_error_s: float = 0.0
    # Seconds a KV entry lives (EXPIRE on write, pushed back on hits at most once
    # per half TTL); None: until Redis evicts it (see maxmemory-policy).
    cache_ttl_s: int | None = None
    # An object-store root (s3://bucket/prefix, gs://, az://, https://host/prefix):
    # the store's options as obstore names them (endpoint, region, access_key_id,
    # secret_access_key, allow_http ...; unset: the environment's credentials),
    # how long one request may take, and how often a failed one is retried
    # (with backoff). They live with whoever serves the export: the agent.
    store: Mapping[str, str | bool] = field(default_factory=dict, repr=False)  # secrets inside
    store_timeout_s: float = 30.0
    store_retries: int = 3
    # Trainer processes sharing a Redis KV fetch a piece they all miss once: the
    # first claims it (SET NX, this many ms at most), the others wait for its
    # entry. None: on for object-store roots (a request there costs money and
    # 20-100 ms), off for directories.
    single_flight_across_nodes: bool | None = None
    fetch_claim_ms: int = 5_000

    def __post_init__(self) -> None:
        where = f"export {self.name!r}"
        _require(isinstance(self.name, str) and self.name, f"{where}: name must be a non-empty string")
        _require(isinstance(self.root, str) and self.root,
                 f"{where}: root must be a path or an object-store URL")
        _require(isinstance(self.store, Mapping)
                 and all(isinstance(k, str) and isinstance(v, (str, bool))
                         for k, v in self.store.items()),
                 f"{where}: store must be a table of option names to strings or booleans")
        _require(not self.store or self.is_object_store,
                 f"{where}: store options need an object-store root ({', '.join(OBJECT_STORE_SCHEMES)})")
        object.__setattr__(self, "store", _FrozenOptions(self.store))
        _require(isinstance(self.store_timeout_s, (int, float))
                 and not isinstance(self.store_timeout_s, bool) and self.store_timeout_s > 0,
                 f"{where}: store_timeout_s must be a positive number")
        _require(_is_int(self.store_retries) and self.store_retries >= 0,
                 f"{where}: store_retries must be an int >= 0")
        _require(self.single_flight_across_nodes in (None, True, False),
                 f"{where}: single_flight_across_nodes must be true or false")
        _require(_is_int(self.fetch_claim_ms) and self.fetch_claim_ms > 0,
                 f"{where}: fetch_claim_ms must be a positive int")
        if isinstance(self.agent_url, (list, tuple)):
            _require(len(self.agent_url) > 0, f"{where}: agent_url is an empty list")
            object.__setattr__(self, "agent_url", tuple(self.agent_url))
        for url in self.agent_urls:
            _require(isinstance(url, str) and url.startswith(("http://", "https://")),
                     f"{where}: agent_url must be an http:// or https:// URL (or a list of "
                     f"them), got {url!r}")
        _require(self.cache_ttl_s is None or (_is_int(self.cache_ttl_s) and self.cache_ttl_s > 0),
                 f"{where}: cache_ttl_s must be a positive int (seconds), got {self.cache_ttl_s!r}")
        _require(isinstance(self.stale_if_error_s, (int, float))
                 and not isinstance(self.stale_if_error_s, bool) and self.stale_if_error_s >= 0,
                 f"{where}: stale_if_error_s must be a number >= 0")
        _require(isinstance(self.allow, (list, tuple)),
                 f"{where}: allow must be a list of identity names, got {self.allow!r}"
                 + (f' (write allow = ["{self.allow}"])' if isinstance(self.allow, str) else ""))
        object.__setattr__(self, "allow", tuple(self.allow))
        _require(all(isinstance(a, str) and a for a in self.allow),
                 f"{where}: allow must be a list of identity names")
        for key in ("cache_kv_key_prefix", "cache_bytes_field_key"):
            _require(isinstance(getattr(self, key), str) and getattr(self, key),
                     f"{where}: {key} must be a non-empty string")
        _require(_is_int(self.cache_max_bytes) and self.cache_max_bytes >= 0,
                 f"{where}: cache_max_bytes must be an int >= 0")
        _require(_is_int(self.metadata_cache_ttl_ms) and self.metadata_cache_ttl_ms >= 0,
                 f"{where}: metadata_cache_ttl_ms must be an int >= 0")
        _require(isinstance(self.metadata_cache_shared, bool),
                 f"{where}: metadata_cache_shared must be true or false")
        _require(isinstance(self.async_backfill_enabled, bool),
                 f"{where}: async_backfill_enabled must be true or false")
        _require(_is_int(self.piece_size) and 4096 <= self.piece_size <= 256 * MiB,
                 f"{where}: piece_size must be an int between 4096 and {256 * MiB}")
        try:
            object.__setattr__(self, "kv_miss_policy", MissPolicy(self.kv_miss_policy))
        except ValueError:
            raise FluxonFsConfigError(
                f"{where}: kv_miss_policy must be one of "
                f"{', '.join(p.value for p in MissPolicy)}, got {self.kv_miss_policy!r}") from None

    @property
    def in_process(self) -> bool:
        return self.agent_url is None

    @property
    def is_object_store(self) -> bool:
        return self.root.startswith(OBJECT_STORE_SCHEMES)

    @property
    def claims_fetches(self) -> bool:
        """Whether processes sharing a KV fetch a piece they all miss once."""
        if self.single_flight_across_nodes is None:
            return self.is_object_store
        return self.single_flight_across_nodes

    @property
    def agent_urls(self) -> tuple[str, ...]:
        if self.agent_url is None:
            return ()
        return (self.agent_url,) if isinstance(self.agent_url, str) else tuple(self.agent_url)


@dataclass(frozen=True)
class ClientSettings:
    """Settings of the FluxonFS client in the training process."""

    # One URL; with redis_cluster, one or more seed nodes of the cluster (a list).
    redis_url: str | tuple[str, ...] | None = None
    redis_cluster: bool = False
    redis_timeout_s: float = 0.25
    redis_retry_after_s: float = 2.0
    embedded_kv_max_bytes: int = 512 * MiB
    agent_timeout_s: float = 10.0
    agent_connect_timeout_s: float = 2.0
    agent_pool_size: int = 16
    agent_failover_skip_s: float = 10.0  # a replica that did not answer is tried last this long
    backfill_workers: int = 2
    backfill_queue_size: int = 256
    fetch_workers: int = 4
    readahead_pages: int = 2
    reader_cache_bytes: int = 64 * MiB
    agent_ca_bundle: str | None = None  # PEM CA certificates verifying https:// agents

    def __post_init__(self) -> None:
        if isinstance(self.redis_url, (list, tuple)):
            object.__setattr__(self, "redis_url", tuple(self.redis_url))
            _require(self.redis_cluster or len(self.redis_url) == 1,
                     "client.redis_url is a list of seed nodes only with redis_cluster = true")
        for url in self.redis_urls:
            _require(isinstance(url, str) and url.startswith(("redis://", "rediss://", "unix://")),
                     f"client.redis_url must be a redis://, rediss:// or unix:// URL (or, with "
                     f"redis_cluster, a list of them), got {url!r}")
        _require(isinstance(self.redis_cluster, bool), "client.redis_cluster must be true or false")
        _require(not self.redis_cluster or self.redis_urls,
                 "client.redis_cluster = true needs redis_url (one or more seed nodes)")
        for name in ("redis_timeout_s", "redis_retry_after_s", "agent_timeout_s",
                     "agent_connect_timeout_s", "agent_failover_skip_s"):
            value = getattr(self, name)
            _require(isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0,
                     f"client.{name} must be a positive number, got {value!r}")
        for name in ("embedded_kv_max_bytes", "agent_pool_size", "backfill_workers",
                     "backfill_queue_size", "fetch_workers", "reader_cache_bytes"):
            value = getattr(self, name)
            _require(_is_int(value) and value > 0, f"client.{name} must be a positive int, got {value!r}")
        _require(_is_int(self.readahead_pages) and self.readahead_pages >= 0,
                 f"client.readahead_pages must be an int >= 0, got {self.readahead_pages!r}")
        _require(self.agent_ca_bundle is None
                 or (isinstance(self.agent_ca_bundle, str) and self.agent_ca_bundle),
                 f"client.agent_ca_bundle must be the path of a PEM file, got "
                 f"{self.agent_ca_bundle!r}")


    @property
    def redis_urls(self) -> tuple[str, ...]:
        if self.redis_url is None:
            return ()
        return (self.redis_url,) if isinstance(self.redis_url, str) else tuple(self.redis_url)


@dataclass(frozen=True)
class FluxonFsConfig:
    exports: Mapping[str, FluxonFsExport]
    identities: Mapping[str, str] = field(default_factory=dict)  # name -> token
    client: ClientSettings = field(default_factory=ClientSettings)
    source: str = field(default="", compare=False)  # the file it was read from, for messages

    def check_served(self, exports: Iterable[FluxonFsExport]) -> None:
        """Refuse to serve an export whose root is not a directory here, or whose
        access list names an identity this config does not define."""
        where = f"{self.source}: " if self.source else ""
        names = list(self.exports)
        for export in exports:
            key = f"exports[{names.index(export.name)}] ({export.name})"
            if not export.is_object_store and not os.path.isdir(export.root):
                raise FluxonFsConfigError(f"{where}{key}: root {export.root!r} is not a directory "
                                          "on this host")
            unknown = [name for name in export.allow if name not in self.identities]
            if unknown:
                raise FluxonFsConfigError(
                    f"{where}{key}: allow names {', '.join(map(repr, unknown))}, which "
                    f"[identities] does not define")

    @classmethod
    def build(cls, exports: Iterable[FluxonFsExport], identities: Mapping[str, str] | None = None,
              client: ClientSettings | None = None) -> FluxonFsConfig:
        by_name: dict[str, FluxonFsExport] = {}
        for export in exports:
            if not isinstance(export, FluxonFsExport):
                raise FluxonFsConfigError(f"exports must be FluxonFsExport objects, got {export!r}")
            if export.name in by_name:
                raise FluxonFsConfigError(f"export {export.name!r} is defined twice")
            by_name[export.name] = export
        identities = dict(identities or {})
        tokens = list(identities.values())
        if len(set(tokens)) != len(tokens):
            raise FluxonFsConfigError("two identities share one token")
        for name, token in identities.items():
            RequestIdentity(name, token)  # validates both
        return cls(by_name, identities, client or ClientSettings())

    def export(self, name: str) -> FluxonFsExport:
        from fluxon_video.errors import FluxonFsNotFoundError

        try:
            return self.exports[name]
        except KeyError:
            raise FluxonFsNotFoundError(
                f"unknown export {name!r} (configured: {', '.join(sorted(self.exports)) or 'none'})"
            ) from None

    def identity(self, name: str) -> RequestIdentity:
        try:
            return RequestIdentity(name, self.identities[name])
        except KeyError:
            where = f"{self.source}'s " if self.source else "the config's "
            known = ", ".join(sorted(self.identities)) or "none"
            raise FluxonFsConfigError(f"unknown identity {name!r} ({where}[identities]: "
                                      f"{known})") from None


def load_config(path: str | os.PathLike[str]) -> FluxonFsConfig:
    """Read a TOML config file; errors name the file and the offending key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FluxonFsConfigError(f"{path}: config file not found") from None
    except UnicodeDecodeError as exc:
        raise FluxonFsConfigError(f"{path}: not a TOML file (not UTF-8 text: {exc.reason} "
                                  f"at byte {exc.start})") from None
    except OSError as exc:  # a directory, a permission refused
        raise FluxonFsConfigError(f"{path}: cannot read the config file "
                                  f"({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise FluxonFsConfigError(f"{path}: not valid TOML: {exc}") from None
    try:
        config = config_from_dict(data)
    except FluxonFsConfigError as exc:
        raise FluxonFsConfigError(f"{path}: {exc}") from None
    return dataclasses.replace(config, source=str(path))


def config_from_dict(data: Mapping[str, Any]) -> FluxonFsConfig:
    _check_keys("top level", data, {"client", "identities", "exports"})
    client = _build(ClientSettings, "client", data.get("client", {}))
    identities = data.get("identities", {})
    if not isinstance(identities, Mapping) or not all(isinstance(v, str) for v in identities.values()):
        raise FluxonFsConfigError("[identities] must map identity names to token strings")
    raw_exports = data.get("exports", [])
    if not isinstance(raw_exports, list):
        raise FluxonFsConfigError("exports must be an array of tables ([[exports]])")
    exports = [_build(FluxonFsExport, f"exports[{i}]", raw) for i, raw in enumerate(raw_exports)]
    return FluxonFsConfig.build(exports, identities, client)


def _build(cls: type, where: str, raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        raise FluxonFsConfigError(f"{where} must be a table")
    _check_keys(where, raw, {f.name for f in fields(cls)})
    required = [f.name for f in fields(cls) if f.init and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in raw]
    if missing:
        raise FluxonFsConfigError(f"{where}: missing required key(s) {', '.join(missing)}")
    return cls(**raw)


def _check_keys(where: str, raw: Mapping[str, Any], known: set[str]) -> None:
    unknown = sorted(set(raw) - known)
    if unknown:
        raise FluxonFsConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}")


def _require(condition: Any, message: str) -> None:
    if not condition:
        raise FluxonFsConfigError(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
