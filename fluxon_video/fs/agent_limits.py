"""What bounds the agent's clients: the connection table and the failed-authentication throttle.

So that no client takes what the others need: connections cannot hold the
descriptors file work needs (ConnectionTable), and an address guessing
tokens is slowed down while a good client sharing it is still served
(AuthThrottle). The limits middleware in fs/agent.py applies both to each
request.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import resource
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cachetools

from fluxon_video import errors
from fluxon_video.fs.tokens import token_sha256
from fluxon_video.logs import RateLimited

log = logging.getLogger("fluxon_video.agent")
limited_log = RateLimited(log, interval_s=10.0)

# Connections (see ConnectionTable). From accept to a first request's headers, a
# TLS handshake included: a client that connects sends at once, so this only
# bounds connections that send nothing (or a byte at a time).
HEADER_TIMEOUT_S = 10.0
# Descriptors the default connection limit leaves for other things: stdio, the
# event loop's, the listener, logs, imports; and per I/O thread, one file
# operation's (the root, a directory on the way down, the file, a listing's scandir).
RESERVED_FDS = 16
FDS_PER_IO_THREAD = 4
MIN_CONNECTIONS = 16
MAX_DEFAULT_CONNECTIONS = 65536  # beyond this, memory rather than descriptors is the limit
# A new connection closes an idle one to make room only if it was idle this long
# (a real client sends its request as soon as it is connected).
EVICT_AFTER_S = 0.5
# After a failed accept() (EMFILE and the like): the connection waits in the backlog.
ACCEPT_RETRY_S = 0.5
# Failed authentications per client address (see AuthThrottle): a burst, then a rate.
AUTH_FAILURE_BURST = 20
AUTH_FAILURE_RATE = 5.0


# ---- failed authentications ----

@dataclass
class _Budget:
    """A client address's failed-authentication budget: a token bucket."""

    left: float  # failures it may still have before it is throttled
    at: float  # when ``left`` was last brought up to date


def client_key(remote: str | None) -> str:
    """What the throttle counts a client by: its IP address, an IPv6 one by its /64
    (which one host usually holds whole: counting each address would give it 2**64
    budgets)."""
    try:
        ip = ipaddress.ip_address(remote or "")
    except ValueError:
        return remote or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class AuthThrottle:
    """Failed authentications per client address: ``burst`` at once, then ``per_s``
    per second; past that, the address's requests are answered 429 + Retry-After.

    Only failures (401 answers) spend the budget: an address that never failed
    is never throttled. Once one has failed, each of its requests is charged
    in advance and refunded unless it fails, so requests sent at once cannot
    overdraw the budget. A throttled address's requests are refused without
    their token being checked (a 429 that still told a right guess from a
    wrong one would not slow guessing down), except those carrying a token
    that authenticated recently from anywhere, which are neither charged nor
    refused: a good client sharing the address of a guessing one (NAT, the
    same host) keeps being served. Checking a token costs one SHA-256
    (fs/tokens.py).

    Addresses and good tokens (their SHA-256) are kept in LRU maps of bounded
    size: an attacker with more addresses than ``clients`` can make the agent
    forget one, which only resets that address's budget.
    """

    def __init__(self, burst: int = AUTH_FAILURE_BURST, per_s: float = AUTH_FAILURE_RATE,
                 clients: int = 65536, good_tokens: int = 4096, good_ttl_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.per_s, self.clock = burst, per_s, clock
        self._budgets: cachetools.LRUCache[str, _Budget] = cachetools.LRUCache(maxsize=clients)
        self._good: cachetools.TTLCache[bytes, bool] = cachetools.TTLCache(
            maxsize=good_tokens, ttl=good_ttl_s, timer=clock)

    def _budget(self, client: str) -> _Budget | None:
        budget = self._budgets.get(client)
        if budget is not None:
            now = self.clock()
            budget.left = min(self.burst, budget.left + (now - budget.at) * self.per_s)
            budget.at = now
        return budget

    def admit(self, client: str, token: str | None) -> tuple[bool, float | None]:
        """(charged, wait): wait is None to go ahead, else the seconds the address
        must wait (429); charged says a failure was charged in advance (settle())."""
        budget = self._budget(client)
        if budget is None or (token and token_sha256(token) in self._good):
            return False, None
        if budget.left >= 1:
            budget.left -= 1
            return True, None
        return False, (1 - budget.left) / self.per_s

    def settle(self, client: str, token: str | None, status: int, charged: bool) -> None:
        """The answer to a request admit() let through: a 401 is a failure."""
        if status == 401:
            if not charged:
                self._failed(client)
            return
        if charged:  # not a failure: give the advance back
            budget = self._budget(client)
            if budget is not None:
                budget.left = min(self.burst, budget.left + 1)
        if status == 200 and token:
            self._good[token_sha256(token)] = True

    def _failed(self, client: str) -> None:
        budget = self._budget(client)
        if budget is None:
            budget = self._budgets[client] = _Budget(float(self.burst), self.clock())
        budget.left = max(0.0, budget.left - 1)

    def forget_tokens(self) -> None:
        """After a reload: a token the new config dropped earns no exemption."""
        self._good.clear()


# ---- connections ----

@dataclass(eq=False)
class _Connection:
    """One accepted connection, as the ConnectionTable sees it."""

    deadline: float  # loop time by which its first request must have arrived
    admitted: bool = False  # counted against the limit: its requests are served
    handler: Any = None  # aiohttp's RequestHandler, once made (after a TLS handshake)
    making: asyncio.Task[None] | None = None  # until then, what makes it
    busy: int = 0  # requests being handled
    requests: int = 0  # requests seen
    proven: bool = False  # it had a request served: its client holds a good token
    closed: bool = False


class ConnectionTable:
    """Bounds the agent's connections, so that they can never take the
    descriptors file work needs (EMFILE, answered 404 before this existed).

    The agent accepts connections itself rather than through asyncio's server
    (``serve``), so every accepted socket is counted, TLS handshakes included:

    - ``limit`` connections are admitted (served) at once. Past it, an idle
      admitted connection is closed to make room, as nginx reuses keep-alive
      connections, so idle connections cannot keep out a client with a
      request to make. Idle: no request in progress and no bytes of one
      received (a TLS handshake in progress too); the one idle the longest
      goes first, among connections that
      never had a request served, then among those that had (so a client
      without a good token can only ever push out its own kind). A new
      connection makes room only from connections idle EVICT_AFTER_S or more
      (a real client sends as soon as it is connected); a request arriving on
      a connection not admitted yet, from any idle one. With none idle, that
      request is answered 503 + Retry-After and its connection closed;
    - ``cap`` (``limit`` plus a margin for those 503s) bounds the sockets
      open: there the agent accepts only once one closes (an idle one is
      closed to that end), later clients waiting in the listen backlog, and
      the descriptors left are the file work's;
    - a connection must send its first request's headers within
      ``header_timeout_s`` of its accept (TLS handshake included), or it is
      closed. Later idle time is aiohttp's keep-alive timeout.
    """

    def __init__(self, limit: int, header_timeout_s: float = HEADER_TIMEOUT_S,
                 cap: int | None = None,
                 on_close: Callable[[str], None] = lambda reason: None) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise errors.FluxonFsConfigError(f"max connections must be an int >= 1, got {limit!r}")
        if not header_timeout_s > 0:
            raise errors.FluxonFsConfigError(
                f"the header timeout must be > 0 s, got {header_timeout_s!r}")
        self.limit = limit
        self.cap = cap if cap is not None else limit + _margin(limit)
        self.header_timeout_s = header_timeout_s
        self.open = 0  # accepted and not closed yet
        self.admitted = 0
        self._on_close = on_close
        # Idle made connections -> the loop time they became idle, the longest idle
        # first: those never served (closed first to make room), and those served.
        self._idle_unproven: OrderedDict[_Connection, float] = OrderedDict()
        self._idle_proven: OrderedDict[_Connection, float] = OrderedDict()
        self._by_handler: dict[Any, _Connection] = {}
        self._room = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self, listener: socket.socket, protocol_factory: Callable[[], Any],
                    ssl_context: ssl.SSLContext | None) -> None:
        """Accept connections on listener until cancelled; protocol_factory makes
        aiohttp's protocol for each (the runner's server)."""
        loop = asyncio.get_running_loop()
        listener.setblocking(False)
        while True:
            await self._below_cap()
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as exc:
                await self._accept_failed(exc)
                continue
            self.open += 1
            entry = _Connection(deadline=loop.time() + self.header_timeout_s)
            self._admit(entry, EVICT_AFTER_S)  # else, when its first request comes
            entry.making = loop.create_task(
                self._connect(sock, entry, protocol_factory, ssl_context))
            self._idle_unproven[entry] = loop.time()
            self._tasks.add(entry.making)
            entry.making.add_done_callback(self._tasks.discard)
            # Let the connections made so far read their requests before the next accept.
            await asyncio.sleep(0)

    async def _below_cap(self) -> None:
        while self.open >= self.cap:
            self._room.clear()
            self._evict(EVICT_AFTER_S, admitted_only=False)
            try:  # a close, or time for a connection to become idle long enough
                await asyncio.wait_for(self._room.wait(), EVICT_AFTER_S)
            except asyncio.TimeoutError:
                pass

    async def _accept_failed(self, exc: OSError) -> None:
        if exc.errno == errno.ECONNABORTED:  # the client went away before the accept
            return
        # Out of descriptors (something other than connections holds them) or
        # memory: the client waits in the backlog until a retry.
        limited_log.warning("accept", "cannot accept a connection (%s); retrying in %.1f s",
                            exc.strerror or exc, ACCEPT_RETRY_S)
        await asyncio.sleep(ACCEPT_RETRY_S)

    async def _connect(self, sock: socket.socket, entry: _Connection,
                       protocol_factory: Callable[[], Any],
                       ssl_context: ssl.SSLContext | None) -> None:
        loop = asyncio.get_running_loop()
        handshake_s = max(entry.deadline - loop.time(), 0.001) if ssl_context else None
        try:
            await loop.connect_accepted_socket(
                lambda: _CountedProtocol(self, entry, protocol_factory()), sock,
                ssl=ssl_context, ssl_handshake_timeout=handshake_s)
        except Exception as exc:  # noqa: BLE001 - a failed or slow TLS handshake, a reset
            log.debug("connection dropped before it was made: %r", exc)
        finally:  # (cancelled: closed to make room, or the agent stopping)
            if entry.handler is None:
                sock.close()  # (asyncio closed it already, unless it failed before)
                self.closed(entry)

    def _admit(self, entry: _Connection, idle_s: float) -> bool:
        """Count entry against the limit, closing a connection idle for idle_s or
        more to make room if need be; False if it must wait."""
        if self.admitted >= self.limit and not self._evict(idle_s, admitted_only=True):
            return False
        entry.admitted = True
        self.admitted += 1
        return True

    def _evict(self, idle_s: float, admitted_only: bool) -> bool:
        """Close the connection idle the longest, if idle for idle_s or more; False if
        there is none. One that had a request served goes only when no idle one
        never had (if those are too recent, none goes: they will not be for long)."""
        now = asyncio.get_running_loop().time()
        for idle in (self._idle_unproven, self._idle_proven):
            entry, since = next(((e, t) for e, t in idle.items()  # the longest idle first
                                 if e.admitted or not admitted_only), (None, 0.0))
            if entry is None:
                continue
            if now - since < idle_s:
                return False
            del idle[entry]
            if entry.admitted:  # its place is the new one's from now
                entry.admitted = False
                self.admitted -= 1
            if entry.handler is not None:
                entry.handler.force_close()
            elif entry.making is not None:  # still in its TLS handshake
                entry.making.cancel()
            self._on_close("evicted")
            return True
        return False

    def _idle(self, entry: _Connection) -> OrderedDict[_Connection, float]:
        return self._idle_proven if entry.proven else self._idle_unproven

    def made(self, entry: _Connection, handler: Any) -> None:
        entry.handler = handler
        self._by_handler[handler] = entry
        loop = asyncio.get_running_loop()
        self._idle(entry).pop(entry, None)  # idle from now: its request comes next
        self._idle(entry)[entry] = loop.time()
        loop.call_at(entry.deadline, self._first_request_due, entry)

    def _first_request_due(self, entry: _Connection) -> None:
        if not entry.closed and entry.requests == 0:
            entry.handler.force_close()
            self._on_close("header_timeout")

    def received(self, entry: _Connection) -> None:
        """Bytes of a request arrived: not idle until it is answered."""
        self._idle(entry).pop(entry, None)

    def started(self, handler: Any) -> _Connection | None:
        """A request began on handler's connection (None: not one of the table's);
        if the connection is not admitted after this, the request gets a 503."""
        entry = self._by_handler.get(handler)
        if entry is not None:
            entry.busy += 1
            entry.requests += 1
            self._idle(entry).pop(entry, None)
            if not entry.admitted:
                self._admit(entry, 0.0)
        return entry

    def finished(self, entry: _Connection, served: bool) -> None:
        """The request begun with started() was answered; served: with a 200 that
        needed a good token."""
        entry.busy -= 1
        entry.proven = entry.proven or served
        if entry.busy == 0 and not entry.closed:
            self._idle(entry)[entry] = asyncio.get_running_loop().time()

    def closed(self, entry: _Connection) -> None:
        if entry.closed:
            return
        entry.closed = True
        self.open -= 1
        if entry.admitted:
            self.admitted -= 1
        self._idle(entry).pop(entry, None)
        self._by_handler.pop(entry.handler, None)
        self._room.set()


class _CountedProtocol(asyncio.Protocol):
    """aiohttp's protocol for one connection, telling the table when it is made,
    receives and is lost: aiohttp has no hook for a connection's end."""

    def __init__(self, table: ConnectionTable, entry: _Connection, inner: Any) -> None:
        self._table, self._entry, self._inner = table, entry, inner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)
        self._table.made(self._entry, self._inner)

    def data_received(self, data: bytes) -> None:
        self._table.received(self._entry)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()  # type: ignore[no-any-return]

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            self._inner.connection_lost(exc)
        finally:
            self._table.closed(self._entry)


def _margin(limit: int) -> int:
    """Sockets a ConnectionTable holds past its limit, to answer them 503."""
    return max(8, limit // 16)


def default_max_connections(io_threads: int) -> int:
    """The connections RLIMIT_NOFILE leaves room for: the soft limit less
    RESERVED_FDS and FDS_PER_IO_THREAD per I/O thread, less the table's 503
    margin, between MIN_CONNECTIONS and MAX_DEFAULT_CONNECTIONS."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 30
    budget = soft - RESERVED_FDS - FDS_PER_IO_THREAD * io_threads
    limit = min(budget - 8, budget * 16 // 17)  # the largest with limit + _margin(limit) <= budget
    return max(MIN_CONNECTIONS, min(MAX_DEFAULT_CONNECTIONS, limit))
