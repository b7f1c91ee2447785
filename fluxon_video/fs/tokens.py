"""Bearer tokens: the forms ``[identities]`` accepts, how strong one must be, how to make one.

An identity maps to one token entry or a list of them (several are valid at
once while a token is rotated)::

    [identities]
    trainer = "pWk2...43 characters...Q"                 # the token itself
    alice = "sha256:6b86b273ff34fce19d6b804eff5a3f57..."   # its SHA-256, hex
    bob = ["new-token...", "sha256:<hex of the old one>"]  # rotation: both work

A trainer sends its token, so its config needs the plain form (the first plain
entry of the identity is the one it sends). An agent only checks tokens, so its
config can hold the ``sha256:`` form alone: reading it then gives nobody a token.

Why SHA-256 and not scrypt or argon2: slow hashes exist for passwords people
choose (20-40 bits of entropy), where they make each guess of an offline
attacker expensive. The agent refuses tokens estimated under 128 bits
(:func:`entropy_bits`), and trying 2**127 inputs is out of reach however fast
the hash is. A slow hash would instead cost every request tens of milliseconds
of CPU (or need a cache of verified plain tokens in memory, which is what
hashing was meant to avoid). With SHA-256 the agent hashes the presented token
once (about a microsecond), finds the identity in a dict keyed by digest (O(1)
whatever the number of identities), and compares the digest found with
``hmac.compare_digest``. What the dict lookup's timing could leak is about
digests, not tokens: knowing the stored digest does not give a token that
hashes to it.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
import string
from collections.abc import Mapping, Sequence

from fluxon_video.errors import FluxonFsConfigError

HASH_PREFIX = "sha256:"
MIN_BITS = 128
# How `fluxon-video token new` makes a token: 32 random bytes, 43 urlsafe characters.
NEW_TOKEN_BYTES = 32
HOW_TO_MAKE_ONE = ("make one with `fluxon-video token new` (it prints a token for the trainers' "
                   "config and its sha256: form for the agent's)")

_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
# Hash forms people may try that the agent does not check: a clear error, not a token.
_OTHER_HASHES = re.compile(r"(scrypt|bcrypt|argon2(i|d|id)?|pbkdf2[\w-]*|sha1|sha224|sha384|"
                           r"sha512|sha3[\w-]*|blake2[bs]?|md5)[:$]", re.IGNORECASE)
# Alphabets a token's characters are judged against, smallest first: a token
# counts log2(size) bits per character of the first one holding all of them.
_ALPHABETS: list[tuple[int, frozenset[str]]] = [
    (10, frozenset(string.digits)),
    (16, frozenset("0123456789abcdef")),
    (16, frozenset("0123456789ABCDEF")),
    (36, frozenset(string.ascii_lowercase + string.digits)),
    (36, frozenset(string.ascii_uppercase + string.digits)),
    (62, frozenset(string.ascii_letters + string.digits)),
    # base64 or its urlsafe variant (either's two extra characters, '=' padding)
    (64, frozenset(string.ascii_letters + string.digits + "-_+/=")),
]
_PRINTABLE = 95  # printable ASCII: anything else a token may hold
# Fewer distinct characters than this and the token counts log2(distinct) bits
# per character: "aaaa..." or "abab..." is long but guessable. A random token
# of 128 bits has more (a 32-digit hex one has about 14 distinct characters).
_MIN_DISTINCT = 8


def new_token() -> str:
    """A fresh token: 32 random bytes from the OS, urlsafe base64 (43 characters, 256 bits)."""
    return secrets.token_urlsafe(NEW_TOKEN_BYTES)


def hash_token(token: str) -> str:
    """The ``sha256:<hex>`` form of a plain token, for an agent's ``[identities]``."""
    return HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


def is_hashed(entry: str) -> bool:
    return entry.startswith(HASH_PREFIX)


def entries(value: str | Sequence[str]) -> tuple[str, ...]:
    """An identity's token entries: one string, or a list of them (rotation)."""
    return (value,) if isinstance(value, str) else tuple(value)


def plain_tokens(value: str | Sequence[str]) -> tuple[str, ...]:
    return tuple(entry for entry in entries(value) if not is_hashed(entry))


def check_entries(name: str, value: object) -> tuple[str, ...]:
    """Validate an identity's entries; returns them as a tuple. Errors name the identity."""
    where = f"[identities] {name}"
    if not isinstance(name, str) or not name:
        raise FluxonFsConfigError("[identities]: an identity needs a non-empty name")
    if isinstance(value, str):
        found: tuple[object, ...] = (value,)
    elif isinstance(value, (list, tuple)) and value:
        found = tuple(value)
    else:
        raise FluxonFsConfigError(f"{where}: a token is a string, or a list of them while one is "
                                  f"rotated (got {type(value).__name__})")
    for i, entry in enumerate(found):
        key = where if len(found) == 1 else f"{where}[{i}]"
        if not isinstance(entry, str) or not entry:
            raise FluxonFsConfigError(f"{key}: a token must be a non-empty string")
        if is_hashed(entry):
            if not _HEX_DIGEST.fullmatch(entry[len(HASH_PREFIX):]):
                raise FluxonFsConfigError(f"{key}: a sha256: token is 'sha256:' and 64 hex "
                                          f"digits ({HOW_TO_MAKE_ONE})")
        elif _OTHER_HASHES.match(entry):
            raise FluxonFsConfigError(f"{key}: only the sha256:<64 hex digits> hash form is "
                                      f"accepted ({HOW_TO_MAKE_ONE})")
        elif not all("!" <= c <= "~" for c in entry):
            # It travels in an HTTP header, which the agent strips of surrounding spaces.
            raise FluxonFsConfigError(f"{key}: a token is printable ASCII without spaces")
    return tuple(found)  # type: ignore[arg-type]


def entropy_bits(token: str) -> float:
    """An estimate of a token's entropy from its length and alphabet, in bits.

    Each character counts log2 of the size of the smallest alphabet holding all
    of the token's characters: digits (10), hex (16), lower- or uppercase
    letters and digits (36), letters and digits (62), base64 or urlsafe base64
    (64), printable ASCII (95). Hex with '-' separators (a UUID) counts 4 bits
    per hex digit and nothing for the dashes. Repeating does not make a token
    strong: a token that is a shorter string repeated (twice or more) counts as
    that string, and one of fewer than 8 distinct characters counts
    log2(distinct) per character.

    It tells short, repeated and few-letter tokens from random ones, and says
    nothing of a chosen one: "correcthorsebatterystaplecorrecthorse" passes.
    Tokens from ``fluxon-video token new`` have 256 bits.
    """
    if not token:
        return 0.0
    period = _period(token)
    if period <= len(token) // 2:
        token = token[:period]
    chars = set(token)
    if len(chars) < _MIN_DISTINCT:
        return len(token) * math.log2(len(chars)) if len(chars) > 1 else 0.0
    if "-" in chars and chars - {"-"} <= set(string.hexdigits):
        return 4.0 * (len(token) - token.count("-"))
    size = next((size for size, alphabet in _ALPHABETS if chars <= alphabet), _PRINTABLE)
    return len(token) * math.log2(size)


def _period(text: str) -> int:
    """The smallest p with text[i] == text[i + p] throughout (KMP's prefix function)."""
    border = [0] * len(text)
    for i in range(1, len(text)):
        k = border[i - 1]
        while k and text[i] != text[k]:
            k = border[k - 1]
        border[i] = k + 1 if text[i] == text[k] else k
    return len(text) - border[-1]


def check_strength(token: str, key: str) -> None:
    """Refuse a token estimated under MIN_BITS; the message never shows the token."""
    bits = entropy_bits(token)
    if bits < MIN_BITS:
        raise FluxonFsConfigError(
            f"{key}: the token is too weak to guard an agent: about {bits:.0f} bits of entropy "
            f"(estimated from its {len(token)} characters and their alphabet), at least "
            f"{MIN_BITS} needed; {HOW_TO_MAKE_ONE}")


class TokenTable:
    """Identity by token, for the agent's checks: SHA-256 digests, looked up in O(1).

    Plain and ``sha256:`` entries land in the same table, so both are checked
    the same way. Built from one config and never changed: a reload builds a
    new one.
    """

    def __init__(self, identities: Mapping[str, str | Sequence[str]]) -> None:
        self._by_digest: dict[bytes, tuple[bytes, str]] = {}
        for name, value in identities.items():
            for entry in entries(value):
                digest = _digest(entry)
                other = self._by_digest.get(digest)
                if other is not None and other[1] != name:
                    raise FluxonFsConfigError(
                        f"[identities]: two identities share one token ({other[1]}, {name})")
                self._by_digest[digest] = (digest, name)

    def identify(self, token: str | None) -> str | None:
        """The name of the identity holding ``token``, or None."""
        if not token:
            return None
        digest = token_sha256(token)
        found = self._by_digest.get(digest)
        if found is None:
            return None
        stored, name = found
        # The dict matched digests already (a timing there tells of digests, not
        # tokens); the final word is a constant-time comparison all the same.
        return name if hmac.compare_digest(stored, digest) else None


def token_sha256(token: str) -> bytes:
    """The SHA-256 of a token a request presented, what the agent's checks compare."""
    # surrogatepass: whatever a header decoded to hashes, rather than raising.
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def _digest(entry: str) -> bytes:
    if is_hashed(entry):
        return bytes.fromhex(entry[len(HASH_PREFIX):])
    return hashlib.sha256(entry.encode()).digest()
