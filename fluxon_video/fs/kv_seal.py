"""Sealed KV entries: what Redis holds can be neither forged nor, encrypted, read.

Anyone who can reach Redis can write to it; with a checksum anyone can
recompute, a forged entry (another video's bytes under this key) would be
served as this file's. Every entry (piece, index blob, shared stat) is
therefore sealed with a secret that only the trainers hold (a key file, the
environment or their config; never Redis):

    encrypt (default)  AES-256-GCM, a random 96-bit nonce per entry, the
                       entry's own key (and, for a blob, its file version) as
                       associated data: Redis holds only ciphertext
    mac                HMAC-SHA256 over the entry's key and its bytes: the
                       bytes stay readable to Redis clients, forging fails

The working key of an export is derived from the secret (HKDF-SHA256, the
export name as context), so one secret serves every export; an export that
needs its own audience takes a key file of its own. Each entry names the
secret that sealed it by a key id (a fingerprint, never the secret): a
process accepts every secret of its keyring and seals with the first, so a
secret is rotated with two valid at once.

An entry sealed with a key this process does not hold, or written in the old
unsealed format, is a plain miss (read again and overwritten); one that
names a held key and fails its check is corrupt (counted, deleted).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fluxon_video.errors import FluxonFsConfigError

Fields = Mapping[str, bytes]

# The entry format this module writes; entries without it are the old format.
FORMAT = b"2"
KEYS_ENV = "FLUXON_KV_KEYS"
NONCE_BYTES = 12
TAG_BYTES = 16
# A secret must carry at least this much entropy: 22 URL-safe base64
# characters (132 bits), what `fluxon-video token new` prints is 43.
MIN_SECRET_CHARS = 22


class Verdict(enum.Enum):
    """What opening an entry found."""

    OK = "ok"
    ABSENT = "absent"
    FOREIGN = "foreign"  # old format, or sealed with a key we do not hold: a miss
    CORRUPT = "corrupt"  # sealed with a key we hold, and fails: counted and deleted


class Protection(str, enum.Enum):
    """How KV entries are sealed (``[client] kv_protection``)."""

    encrypt = "encrypt"
    mac = "mac"


def key_id(secret: bytes) -> bytes:
    """A secret's public name in entries: 8 hex digits that reveal nothing of it."""
    return hmac.digest(secret, b"fluxon-kv key id", "sha256")[:4].hex().encode()


def parse_secrets(lines: Sequence[str], where: str) -> tuple[bytes, ...]:
    """Secrets from text (one per line or item; blank lines and #comments skipped)."""
    out = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) < MIN_SECRET_CHARS or len(set(line)) < 8:
            raise FluxonFsConfigError(
                f"{where}: a KV key must carry at least 128 bits of entropy (22+ random "
                "characters); make one with `fluxon-video token new`")
        out.append(line.encode())
    return tuple(out)


def load_secrets(inline: Sequence[str], key_file: str | None, where: str,
                 env: Mapping[str, str] = os.environ) -> tuple[bytes, ...]:
    """The keyring from the config's inline keys, else its key file, else $FLUXON_KV_KEYS."""
    if inline:
        return parse_secrets(inline, f"{where}.kv_keys")
    if key_file:
        try:
            text = Path(key_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise FluxonFsConfigError(f"{where}.kv_key_file {key_file!r}: cannot read it "
                                      f"({reason})") from None
        found = parse_secrets(text.splitlines(), f"{where}.kv_key_file {key_file!r}")
        if not found:
            raise FluxonFsConfigError(f"{where}.kv_key_file {key_file!r} holds no key")
        return found
    if env.get(KEYS_ENV):
        return parse_secrets(env[KEYS_ENV].split(","), f"${KEYS_ENV}")
    return ()


@dataclass(frozen=True)
class Opened:
    """An entry's verified bytes (None unless OK) and what was found."""

    data: bytes | None
    verdict: Verdict


_ABSENT = Opened(None, Verdict.ABSENT)
_FOREIGN = Opened(None, Verdict.FOREIGN)
CORRUPT = _CORRUPT = Opened(None, Verdict.CORRUPT)


class EntrySealer:
    """Seals and opens KV entries for every export, with one keyring.

    ``secrets`` maps an export name to its keyring (first seals, all open);
    ``default`` is every other export's. Thread-safe; rebuilt per process.
    """

    def __init__(self, default: Sequence[bytes], protection: Protection,
                 per_export: Mapping[str, Sequence[bytes]] | None = None) -> None:
        self.protection = Protection(protection)
        self._rings = {name: tuple(ring) for name, ring in (per_export or {}).items()}
        self._default = tuple(default)
        self._derived: dict[tuple[bytes, str], bytes] = {}
        self._ciphers: dict[tuple[bytes, str], AESGCM] = {}
        self._lock = threading.Lock()

    @classmethod
    def ephemeral(cls) -> EntrySealer:
        """For a store no other process sees: a random key that dies with the process."""
        return cls([secrets.token_urlsafe(32).encode()], Protection.mac)

    def _ring(self, export: str) -> tuple[bytes, ...]:
        ring = self._rings.get(export, self._default)
        if not ring:
            raise FluxonFsConfigError(f"export {export!r}: no KV key to seal its entries with")
        return ring

    def current_key_id(self, export: str | None = None) -> str:
        """The id of the secret sealing new entries (of export, or the client-wide one)."""
        ring = self._rings.get(export, self._default) if export else self._default
        return key_id(ring[0]).decode() if ring else "(per export)"

    def identity_tag(self, export: str, token: str) -> str:
        """32 hex digits naming a token in KV keys: a MAC under the export's current
        key, so that only the trainers can tell which entries share an identity."""
        working = self._working_key(key_id(self._ring(export)[0]), export)
        assert working is not None
        return hmac.digest(working, b"fluxon-kv who\x00" + token.encode(), "sha256")[:16].hex()

    def _working_key(self, kid: bytes, export: str) -> bytes | None:
        """The export's key under the secret named kid; None if we hold no such secret."""
        cached = self._derived.get((kid, export))
        if cached is not None:
            return cached
        secret = next((s for s in self._ring(export) if key_id(s) == kid), None)
        if secret is None:
            return None
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                       info=b"fluxon-kv v2 export\x00" + export.encode()).derive(secret)
        with self._lock:
            self._derived[(kid, export)] = derived
        return derived

    def _cipher(self, kid: bytes, export: str, key: bytes) -> AESGCM:
        cipher = self._ciphers.get((kid, export))
        if cipher is None:
            cipher = AESGCM(key)
            with self._lock:
                self._ciphers[(kid, export)] = cipher
        return cipher

    @staticmethod
    def _context(key: str, bound: str) -> bytes:
        """What the seal binds the bytes to: the entry's key and, for a blob, its version."""
        key_bytes, bound_bytes = key.encode(), bound.encode()
        return (b"fluxon-kv v2\x00" + len(key_bytes).to_bytes(4, "big") + key_bytes
                + bound_bytes)

    def seal(self, export: str, key: str, data: bytes, bytes_field: str,
             bound: str = "") -> dict[str, bytes]:
        """The entry to store under key: data sealed with the export's current key."""
        kid = key_id(self._ring(export)[0])
        working = self._working_key(kid, export)
        assert working is not None
        context = self._context(key, bound)
        if self.protection is Protection.encrypt:
            nonce = os.urandom(NONCE_BYTES)
            sealed = self._cipher(kid, export, working).encrypt(nonce, data, context)
            return {bytes_field: sealed, "v": FORMAT, "kid": kid, "nonce": nonce}
        mac = hmac.new(working, context, hashlib.sha256)
        mac.update(data)
        return {bytes_field: data, "v": FORMAT, "kid": kid, "mac": mac.digest()}

    def open(self, export: str, key: str, fields: Fields | None, bytes_field: str,
             bound: str = "", expected_len: int | None = None) -> Opened:
        """The entry's bytes if it was sealed for key (and bound) with a key we hold."""
        if not fields:
            return _ABSENT
        if fields.get("v") != FORMAT:
            return _FOREIGN
        try:
            kid, data = bytes(fields["kid"]), fields[bytes_field]
        except KeyError:
            return _CORRUPT
        working = self._working_key(kid, export)
        if working is None:
            return _FOREIGN
        context = self._context(key, bound)
        if "nonce" in fields:
            if expected_len is not None and len(data) != expected_len + TAG_BYTES:
                return _CORRUPT
            try:
                plain = self._cipher(kid, export, working).decrypt(bytes(fields["nonce"]),
                                                                   bytes(data), context)
            except (InvalidTag, ValueError):
                return _CORRUPT
            return Opened(plain, Verdict.OK)
        if "mac" not in fields or (expected_len is not None and len(data) != expected_len):
            return _CORRUPT
        mac = hmac.new(working, context, hashlib.sha256)
        mac.update(data)
        if not hmac.compare_digest(mac.digest(), bytes(fields["mac"])):
            return _CORRUPT
        return Opened(bytes(data), Verdict.OK)
