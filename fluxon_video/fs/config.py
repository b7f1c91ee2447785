"""Exports, identities and client settings, from TOML or from Python objects.

A config file looks like::

    [client]
    redis_url = "redis://127.0.0.1:6379/0"   # omit for the in-process piece store
    agent_timeout_s = 10.0

    [identities]                               # identity name -> bearer token(s)
    trainer = "<43 characters from `fluxon-video token new`>"
    # agent only: its sha256: form; a list while rotating (fs/tokens.py)
    # trainer = ["<new token>", "sha256:<hex of the old one>"]

    [[exports]]
    name = "train-videos"
    root = "/data/videos"                      # on the agent host
    agent_url = "https://storage-01:8765"      # omit to serve in-process
    allow = ["trainer"]
    piece_size = 262080                       # one KV piece = one reader page (default)
    # agent_url = ["https://storage-01:8765", "https://storage-02:8765"]  # replicas
    kv_miss_policy = "RemoteRead"              # or "StageToKvThenRead"

Unknown keys and bad values raise FluxonFsConfigError naming the file and key.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import logging
import os
import tomllib
import urllib.parse
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from fluxon_video import defaults
from fluxon_video.errors import FluxonFsConfigError
from fluxon_video.fs import tokens

log = logging.getLogger("fluxon_video.config")

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
        if tokens.is_hashed(self.token):
            raise FluxonFsConfigError(
                f"identity {self.name!r}: its token is a sha256: hash, which an agent checks but "
                "a trainer cannot send; a trainer's [identities] needs the plain token")


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
    # While no agent answers (and only then), keep serving KV bytes of a file
    # whose stat an agent authorised for this identity within this many seconds:
    # this process's own, or one shared through the KV by another process or node.
    # 0: off. A revoked identity or a changed file goes unnoticed that long while
    # the agents are away (docs/security.md); a KV miss still waits for an agent.
    stale_if_error_s: float = 300.0
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
    # A file of KV keys (one per line) for this export's entries instead of the
    # client's: an export with an audience of its own (docs/security.md).
    kv_key_file: str | None = None

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
        _require(self.kv_key_file is None or (isinstance(self.kv_key_file, str)
                                              and self.kv_key_file),
                 f"{where}: kv_key_file must be the path of a file")
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
    # A KV whose reads average more than this and more than the origin's (agent or
    # store) is bypassed like one that fails, then measured again (redis_retry_after_s).
    redis_slow_ms: float = 50.0
    embedded_kv_max_bytes: int = 512 * MiB
    agent_timeout_s: float = 10.0
    agent_connect_timeout_s: float = 2.0
    agent_pool_size: int = 16
    agent_failover_skip_s: float = 10.0  # a replica that did not answer is tried last this long
    # While no agent_url replica answers (refused, reset, timed out, 503), a call
    # tries them again with backoff for this long before it fails: an agent
    # restart costs a wait, not the run. 0: fail at once.
    agent_retry_window_s: float = 30.0
    backfill_workers: int = 2
    backfill_queue_size: int = 256
    fetch_workers: int = 4
    readahead_pages: int = 2
    reader_cache_bytes: int = 64 * MiB
    agent_ca_bundle: str | None = None  # PEM CA certificates verifying https:// agents
    # Off: an http:// agent_url off loopback is refused, as the bearer token would
    # cross the network in clear (FluxonFsConfig checks it; docs/security.md).
    allow_insecure_http: bool = False
    # The secrets sealing KV entries (fs/kv_seal.py), first seals, all open: inline
    # (keep the file private), or a file of one per line; unset, $FLUXON_KV_KEYS.
    # A shared Redis needs them; the in-process store makes its own.
    kv_keys: tuple[str, ...] = ()
    kv_key_file: str | None = None
    kv_protection: str = "encrypt"  # or "mac": bytes readable in Redis, never forgeable
    redis_ca_bundle: str | None = None  # PEM CA certificates verifying rediss:// servers

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
        _require(isinstance(self.allow_insecure_http, bool),
                 "client.allow_insecure_http must be true or false")
        _require(not self.redis_cluster or self.redis_urls,
                 "client.redis_cluster = true needs redis_url (one or more seed nodes)")
        _require(len({url.split("://")[0] for url in self.redis_urls}) <= 1,
                 "client.redis_url: the seed nodes mix redis:// and rediss:// (a cluster speaks "
                 "TLS on every node or on none)")
        for name in ("redis_timeout_s", "redis_retry_after_s", "redis_slow_ms", "agent_timeout_s",
                     "agent_connect_timeout_s", "agent_failover_skip_s"):
            value = getattr(self, name)
            _require(isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0,
                     f"client.{name} must be a positive number, got {value!r}")
        _require(isinstance(self.agent_retry_window_s, (int, float))
                 and not isinstance(self.agent_retry_window_s, bool)
                 and 0 <= self.agent_retry_window_s < float("inf"),
                 f"client.agent_retry_window_s must be a number >= 0 (0: no retry), got "
                 f"{self.agent_retry_window_s!r}")
        for name in ("embedded_kv_max_bytes", "agent_pool_size", "backfill_workers",
                     "backfill_queue_size", "fetch_workers", "reader_cache_bytes"):
            value = getattr(self, name)
            _require(_is_int(value) and value > 0, f"client.{name} must be a positive int, got {value!r}")
        _require(_is_int(self.readahead_pages) and self.readahead_pages >= 0,
                 f"client.readahead_pages must be an int >= 0, got {self.readahead_pages!r}")
        for name in ("agent_ca_bundle", "redis_ca_bundle", "kv_key_file"):
            value = getattr(self, name)
            _require(value is None or (isinstance(value, str) and value),
                     f"client.{name} must be the path of a file, got {value!r}")
        _require(isinstance(self.kv_keys, (list, tuple))
                 and all(isinstance(k, str) for k in self.kv_keys),
                 "client.kv_keys must be a list of key strings")
        object.__setattr__(self, "kv_keys", tuple(self.kv_keys))
        _require(self.kv_protection in ("encrypt", "mac"),
                 f'client.kv_protection must be "encrypt" or "mac", got {self.kv_protection!r}')


    @property
    def redis_urls(self) -> tuple[str, ...]:
        if self.redis_url is None:
            return ()
        return (self.redis_url,) if isinstance(self.redis_url, str) else tuple(self.redis_url)


@dataclass(frozen=True)
class FluxonFsConfig:
    exports: Mapping[str, FluxonFsExport]
    # name -> its token, its "sha256:<hex>" form, or a list of them while a token is
    # rotated (fs/tokens.py). A str stays a str, a list becomes a tuple.
    identities: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    client: ClientSettings = field(default_factory=ClientSettings)
    source: str = field(default="", compare=False)  # the file it was read from, for messages

    def __post_init__(self) -> None:
        self._check_agent_urls()

    def _check_agent_urls(self) -> None:
        """Refuse an http:// agent off loopback: every request would carry its
        bearer token across the network in clear text."""
        if self.client.allow_insecure_http:
            return
        where = f"{self.source}: " if self.source else ""
        for i, export in enumerate(self.exports.values()):
            for url in export.agent_urls:
                if url.startswith("http://") and not is_loopback_url(url):
                    raise FluxonFsConfigError(
                        f"{where}exports[{i}] ({export.name}): agent_url {url!r} would send "
                        "bearer tokens in clear text over the network; use https:// (the agent's "
                        "--tls-cert/--tls-key), or set allow_insecure_http = true in [client] "
                        "for a network you trust")

    def check_served(self, exports: Iterable[FluxonFsExport], *,
                     over_network: bool = True) -> None:
        """Refuse to serve an export whose root is not a directory here, or whose
        access list names an identity this config does not define; over the
        network (the agent), also refuse a token too weak to guard it.

        Exports served in-process pass over_network=False: the process checking
        the token holds the config with every token, so no boundary depends on it.
        """
        where = f"{self.source}: " if self.source else ""
        names = list(self.exports)
        for export in exports:
            key = f"exports[{names.index(export.name)}] ({export.name})"
            if not export.is_object_store and not os.path.isdir(export.root):
                raise FluxonFsConfigError(f"{where}{key}: root {export.root!r} is not a directory "
                                          "on this host")
            if export.is_object_store:
                _check_store_options(export, f"{where}{key}")
            unknown = [name for name in export.allow if name not in self.identities]
            if unknown:
                raise FluxonFsConfigError(
                    f"{where}{key}: allow names {', '.join(map(repr, unknown))}, which "
                    f"[identities] does not define")
        if over_network:
            self.check_token_strength()

    def check_token_strength(self) -> None:
        """Refuse plain tokens estimated under 128 bits (tokens.entropy_bits). A
        sha256: entry cannot be judged: it is taken to hash a token made so."""
        where = f"{self.source}: " if self.source else ""
        for name, value in self.identities.items():
            found = tokens.entries(value)
            for i, entry in enumerate(found):
                if not tokens.is_hashed(entry):
                    key = f"[identities] {name}" + (f"[{i}]" if len(found) > 1 else "")
                    tokens.check_strength(entry, f"{where}{key}")

    @classmethod
    def build(cls, exports: Iterable[FluxonFsExport],
              identities: Mapping[str, str | Iterable[str]] | None = None,
              client: ClientSettings | None = None) -> FluxonFsConfig:
        by_name: dict[str, FluxonFsExport] = {}
        for export in exports:
            if not isinstance(export, FluxonFsExport):
                raise FluxonFsConfigError(f"exports must be FluxonFsExport objects, got {export!r}")
            if export.name in by_name:
                raise FluxonFsConfigError(f"export {export.name!r} is defined twice")
            by_name[export.name] = export
        given = dict(identities or {})
        checked = {name: tokens.check_entries(name, value) for name, value in given.items()}
        # A str stays the str it was (config.identities["x"] is the token, as before).
        shaped = {name: found[0] if isinstance(given[name], str) else found
                  for name, found in checked.items()}
        tokens.TokenTable(shaped)  # refuses two identities sharing one token
        return cls(by_name, shaped, client or ClientSettings())

    def export(self, name: str) -> FluxonFsExport:
        from fluxon_video.errors import FluxonFsNotFoundError

        try:
            return self.exports[name]
        except KeyError:
            raise FluxonFsNotFoundError(
                f"unknown export {name!r} (configured: {', '.join(sorted(self.exports)) or 'none'})"
            ) from None

    def identity(self, name: str) -> RequestIdentity:
        """Who a trainer makes requests as: the name and the first plain token it has."""
        where = f"{self.source}'s " if self.source else "the config's "
        try:
            value = self.identities[name]
        except KeyError:
            known = ", ".join(sorted(self.identities)) or "none"
            raise FluxonFsConfigError(f"unknown identity {name!r} ({where}[identities]: "
                                      f"{known})") from None
        plain = tokens.plain_tokens(value)
        if not plain:
            raise FluxonFsConfigError(
                f"identity {name!r} has only sha256: tokens in {where}[identities]: an agent "
                "checks those, but a trainer sends its token, so a trainer's config needs the "
                "plain token (`fluxon-video token new` prints both forms)")
        return RequestIdentity(name, plain[0])


def is_loopback_url(url: str) -> bool:
    """Whether url's host is this machine: localhost, 127.0.0.0/8 or ::1 (no DNS lookup)."""
    host = urllib.parse.urlsplit(url).hostname  # lowercased, without IPv6 brackets
    if host is None:
        return False
    if host in ("localhost", "localhost."):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # any other name: it may resolve anywhere
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1
    return address.is_loopback


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
    _warn_if_exposed(path, config)
    return dataclasses.replace(config, source=str(path))


def _warn_if_exposed(path: Path, config: FluxonFsConfig) -> None:
    """Log a warning when a file holding secrets is open to its group or others.

    A warning, not a refusal: a Kubernetes secret volume is 0644 by default and
    a container may be its only reader; whoever deploys knows. The agent logs
    it at start; sha256: tokens are not secrets in this sense (fs/tokens.py).
    """
    held = [f"[identities] {name}" for name, value in config.identities.items()
            if tokens.plain_tokens(value)]
    if getattr(config.client, "kv_keys", ()):
        held.append("client.kv_keys")
    held += [f"exports[{i}].store {key}" for i, export in enumerate(config.exports.values())
             for key in export.store if any(w in key for w in ("secret", "token", "password"))]
    if not held:
        return
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return
    if mode & 0o077:
        message = (f"{path} holds secrets ({', '.join(held)}) and its mode {mode:04o} lets users "
                   "other than its owner read or change it: chmod 600 it; an agent's "
                   "[identities] can hold sha256: hashes instead of tokens (`fluxon-video token "
                   "new`)")
        log.warning("%s", message)
        # Logging is silent until the application sets it up (logs.py), and a trainer
        # rarely does: a Python warning shows it anyway, once per file and caller.
        warnings.warn(f"fluxon_video: {message}", UserWarning, stacklevel=3)


def config_from_dict(data: Mapping[str, Any]) -> FluxonFsConfig:
    _check_keys("top level", data, {"client", "identities", "exports"})
    client = _build(ClientSettings, "client", data.get("client", {}))
    identities = data.get("identities", {})
    if not isinstance(identities, Mapping) or not all(isinstance(v, (str, list))
                                                      for v in identities.values()):
        raise FluxonFsConfigError("[identities] must map identity names to a token string, or "
                                  "a list of them while one is rotated")
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


def _check_store_options(export: FluxonFsExport, key: str) -> None:
    """Refuse store options obstore does not know for the root's store (a typo:
    ``endpont``), by opening the store as serving it will (no request is made)."""
    from fluxon_video.fs.object_origin import ObjectStoreOrigin  # obstore: only when used

    try:
        ObjectStoreOrigin(export)
    except FluxonFsConfigError as exc:
        reason = str(exc).removeprefix(f"export {export.name!r}: ")
        raise FluxonFsConfigError(f"{key}: {reason}") from None


def _require(condition: Any, message: str) -> None:
    if not condition:
        raise FluxonFsConfigError(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
