"""Operating the agent: /metrics, HTTPS, graceful SIGTERM (real agent processes on loopback)."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fluxon_video import errors
from fluxon_video.fs.agent import make_app, make_ssl_context
from fluxon_video.fs.agent_metrics import REFUSAL_REASONS
from fluxon_video.fs.config import load_config
from fluxon_video.fs.routes import AgentRoute
from fluxon_video.testing import LOOPBACK, AgentProcess, ServerStartError, wait_until
from tests.helpers import IDENTITIES, make_certificate, make_patcher

pytestmark = pytest.mark.timeout(120)

VIDEO = "bucket/videos/h264_faststart.mp4"
CLIP = "h264_faststart.mp4"


# ---- helpers ----

def get(url: str, token: str | None = IDENTITIES["alice"], context: ssl.SSLContext | None = None,
        **query: object) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers) of a GET; an HTTP error status is an answer, not an exception."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"{url}?{urlencode(query)}" if query else url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def scrape(agent: AgentProcess, context: ssl.SSLContext | None = None) -> dict[tuple, float]:
    """Every sample of the agent's /metrics: {(name, ((label, value), ...)): value}."""
    status, body, headers = get(agent.url + "/metrics", token=None, context=context)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples}


def sample(samples: dict[tuple, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def version_query(export_root: Path, relpath: str) -> dict[str, int]:
    st = (export_root / relpath).stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino}


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made now by the openssl CLI."""
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_agent(agent_config, tls_pair):
    with AgentProcess(agent_config, tls=tls_pair) as agent:
        yield agent


def route_to(url: str, ca_bundle: str | None = None) -> AgentRoute:
    return AgentRoute(url, timeout_s=5.0, connect_timeout_s=2.0, pool_size=2, ca_bundle=ca_bundle)


# ---- /metrics ----

def test_metrics_count_requests_bytes_latency_and_refusals(agent_config, export_root):
    with AgentProcess(agent_config) as agent:  # its own agent: counts start at zero
        version = version_query(export_root, VIDEO)
        for _ in range(2):
            assert get(agent.url + "/v1/stat", export="train", path=VIDEO)[0] == 200
        reads = [("train", 0, 1000), ("train", 5000, 4096), ("shared", 123, 777)]
        data = (export_root / VIDEO).read_bytes()
        for export, offset, length in reads:
            status, body, _ = get(agent.url + "/v1/read", export=export, path=VIDEO,
                                  offset=offset, length=length, **version)
            assert status == 200 and body == data[offset:offset + length]
        # Refusals, one of each kind the agent answers with but "internal".
        assert get(agent.url + "/v1/stat", token=IDENTITIES["bob"], export="train", path=VIDEO)[0] == 403
        assert get(agent.url + "/v1/stat", token=None, export="train", path=VIDEO)[0] == 401
        assert get(agent.url + "/v1/stat", export="train", path="bucket/none.mp4")[0] == 404
        assert get(agent.url + "/v1/read", export="train", path=VIDEO, offset="x", length=1,
                   **version)[0] == 400
        assert get(agent.url + "/v1/read", export="train", path=VIDEO, offset=0, length=1,
                   **{**version, "mtime_ns": version["mtime_ns"] + 1})[0] == 409
        # A path no route serves is counted under one label, not its own.
        assert get(agent.url + "/no/such/route/abc")[0] == 404

        first = scrape(agent)
        samples = scrape(agent)

    requests = "fluxon_agent_requests_total"
    assert sample(samples, requests, route="/v1/stat", status="200") == 2
    assert sample(samples, requests, route="/v1/read", status="200") == 3
    for route, status in [("/v1/stat", "403"), ("/v1/stat", "401"), ("/v1/stat", "404"),
                          ("/v1/read", "400"), ("/v1/read", "409"), ("unmatched", "404")]:
        assert sample(samples, requests, route=route, status=status) == 1, (route, status)
    assert sample(samples, requests, route="/healthz", status="200") >= 1  # the start-up check
    # A scrape is counted as a request (the first one shows in the second)...
    assert sample(first, requests, route="/metrics", status="200") == 0
    assert sample(samples, requests, route="/metrics", status="200") == 1
    assert not any(labels and dict(labels).get("route", "").startswith("/no/")
                   for _, labels in samples)

    # Bytes served: exactly the bytes read, by export.
    assert sample(samples, "fluxon_agent_served_bytes_total", export="train") == 1000 + 4096
    assert sample(samples, "fluxon_agent_served_bytes_total", export="shared") == 777

    # Refusals by reason; every reason is exported, even at 0.
    refusals = {reason: sample(samples, "fluxon_agent_refusals_total", reason=reason)
                for reason in REFUSAL_REASONS}
    assert refusals == {"bad_request": 1, "permission": 2, "not_found": 1, "changed": 1,
                        "internal": 0}
    assert all(("fluxon_agent_refusals_total", (("reason", r),)) in samples
               for r in REFUSAL_REASONS)

    # Latency histograms by route, with every request observed (and no scrape).
    hist = "fluxon_agent_request_duration_seconds"
    assert sample(samples, hist + "_count", route="/v1/read") == 5
    assert sample(samples, hist + "_count", route="/v1/stat") == 5
    assert sample(samples, hist + "_sum", route="/v1/read") > 0
    buckets = sorted((float(dict(labels)["le"]), value) for (name, labels), value in samples.items()
                     if name == hist + "_bucket" and dict(labels)["route"] == "/v1/read")
    assert buckets[-1] == (float("inf"), 5)
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:]))
    assert sample(samples, hist + "_count", route="/metrics") == 0

    # Nothing in flight between requests (a scrape does not count itself); the pool's size.
    assert sample(samples, "fluxon_agent_requests_in_flight") == 0
    assert sample(samples, "fluxon_agent_io_threads") == 32
    assert sample(samples, "fluxon_agent_io_threads_busy") == 0
    assert sample(samples, "fluxon_agent_io_queued") == 0
    assert sample(samples, "process_resident_memory_bytes") > 0


def test_metrics_bytes_served_match_what_a_patcher_read(agent_config, export_root, media):
    with AgentProcess(agent_config, ["--io-threads", "3"]) as agent:
        before = scrape(agent)
        patcher = make_patcher(agent.url, export_root)  # in-process KV: every piece once
        try:
            with patcher.open_video_reader("train", VIDEO, height=144, width=256) as reader:
                frames = reader.read_frames_numpy([0, 30, -1])
            stats = patcher.stats()
        finally:
            patcher.close()
        after = scrape(agent)
    expected = media.reference(CLIP, 144, 256)[[0, 30, -1]]
    assert np.array_equal(frames, expected)
    served = (sample(after, "fluxon_agent_served_bytes_total", export="train")
              - sample(before, "fluxon_agent_served_bytes_total", export="train"))
    reads = (sample(after, "fluxon_agent_requests_total", route="/v1/read", status="200")
             - sample(before, "fluxon_agent_requests_total", route="/v1/read", status="200"))
    assert stats.remote_bytes > 0
    assert served == stats.remote_bytes and reads == stats.remote_reads
    assert sample(after, "fluxon_agent_io_threads") == 3


def test_a_stat_with_its_head_is_one_version_and_counted_as_served(agent_config, export_root):
    data = (export_root / VIDEO).read_bytes()
    version = version_query(export_root, VIDEO)
    with AgentProcess(agent_config) as agent:
        for length in (1000, len(data) + 5):
            status, body, headers = get(agent.url + "/v1/stat", export="train", path=VIDEO,
                                        head=length)
            line, _, head = body.partition(b"\n")
            answered = json.loads(line)
            assert status == 200 and headers["Content-Type"] == "application/octet-stream"
            assert {k: answered[k] for k in version} == version
            assert answered["head"] == len(head) == min(length, len(data))
            assert head == data[:length]
        for bad in (0, -1, "x", 64 * 1024 * 1024 + 1):
            assert get(agent.url + "/v1/stat", export="train", path=VIDEO, head=bad)[0] == 400
        assert get(agent.url + "/v1/stat", token=IDENTITIES["bob"], export="train", path=VIDEO,
                   head=10)[0] == 403
        samples = scrape(agent)
    # The file's bytes, not the stat's line.
    assert sample(samples, "fluxon_agent_served_bytes_total", export="train") == 1000 + len(data)
    # And through the route, as a trainer asks it.
    with AgentProcess(agent_config) as agent:
        route = route_to(agent.url)
        try:
            st, head = route.stat_head("train", VIDEO, IDENTITIES["alice"], 4096)
        finally:
            route.close()
    assert head == data[:4096] and st.size == len(data) and st.inode == version["inode"]


def test_each_app_has_its_own_registry(agent_config):
    config = load_config(agent_config)
    first, second = make_app(config), make_app(config)  # no "duplicated timeseries"
    from fluxon_video.fs.agent import METRICS_KEY

    first[METRICS_KEY].requests.labels("/v1/stat", "200").inc()
    assert b'route="/v1/stat"' in first[METRICS_KEY].exposition()
    assert b'route="/v1/stat"' not in second[METRICS_KEY].exposition()


def test_an_unexpected_error_is_an_internal_refusal_logged_with_export_and_path(
        agent_config, monkeypatch, caplog):
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from fluxon_video.fs.agent import METRICS_KEY, STORAGE_KEY

    app = make_app(load_config(agent_config), threads=2)

    def explode(*args: object) -> None:
        raise RuntimeError("disk on fire at /host/secret/path")

    monkeypatch.setattr(app[STORAGE_KEY], "stat", explode)

    async def run() -> tuple[int, dict]:
        async with TestClient(TestServer(app)) as client:
            response = await client.get("/v1/stat", params={"export": "train", "path": VIDEO},
                                        headers={"Authorization": f"Bearer {IDENTITIES['alice']}"})
            return response.status, await response.json()

    with caplog.at_level("ERROR", logger="fluxon_video.agent"):
        status, body = asyncio.run(run())
    assert status == 500 and body["error"] == "internal" and "/host/" not in body["message"]
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for family in
               text_string_to_metric_families(app[METRICS_KEY].exposition().decode())
               for s in family.samples}
    assert sample(samples, "fluxon_agent_refusals_total", reason="internal") == 1
    assert sample(samples, "fluxon_agent_requests_total", route="/v1/stat", status="500") == 1
    assert f"export 'train', path '{VIDEO}'" in caplog.text and "disk on fire" in caplog.text


# ---- TLS ----

def test_https_round_trip_reads_exact_frames(tls_agent, export_root, media):
    assert tls_agent.url.startswith("https://")
    patcher = make_patcher(tls_agent.url, export_root,
                           client={"agent_ca_bundle": tls_agent.ca_bundle})
    try:
        metadata = patcher.video_metadata("train", VIDEO)
        with patcher.open_video_reader("train", VIDEO, height=144, width=256) as reader:
            frames = reader.read_frames_numpy([0, 5, 47, -1])
        stats = patcher.stats()
    finally:
        patcher.close()
    reference = media.reference(CLIP, 144, 256)
    assert metadata.num_frames == len(reference)
    assert np.array_equal(frames, reference[[0, 5, 47, -1]])
    # The bytes came over HTTPS from the agent (this small file's all with the
    # stat of the cold open: its first piece holds it whole).
    assert stats.remote_bytes > 0
    # And the agent's own routes over HTTPS, verified against the certificate.
    context = ssl.create_default_context(cafile=tls_agent.ca_bundle)
    assert get(tls_agent.url + "/healthz", token=None, context=context)[:2] == (200, b"ok")
    served = scrape(tls_agent, context)
    assert sample(served, "fluxon_agent_served_bytes_total", export="train") == stats.remote_bytes


def test_a_plain_http_client_gets_no_data_from_the_tls_agent(tls_agent):
    plain = tls_agent.url.replace("https://", "http://")
    with pytest.raises(errors.FluxonFsIOError, match="if it serves HTTPS.*https:// agent_url") \
            as caught:
        route_to(plain).stat("train", VIDEO, IDENTITIES["alice"])
    assert errors.FluxonFsIOError is type(caught.value)  # no answer at all
    # The raw bytes of a plain request (bearer token and all) get no HTTP answer back.
    with socket.create_connection((LOOPBACK, tls_agent.port), timeout=5) as sock:
        sock.sendall(f"GET /v1/stat?export=train&path={VIDEO} HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: Bearer {IDENTITIES['alice']}\r\n\r\n".encode())
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert b"HTTP/1.1 200" not in received and b"mtime_ns" not in received


def test_a_client_without_the_ca_fails_verification(tls_agent, tls_pair, tmp_path):
    # The system trust store: the message says what to configure.
    with pytest.raises(errors.FluxonFsIOError, match="TLS.*needs client.agent_ca_bundle"):
        route_to(tls_agent.url).stat("train", VIDEO, IDENTITIES["alice"])
    other_cert, _ = make_certificate(tmp_path)  # a CA that did not sign the agent's certificate
    with pytest.raises(errors.FluxonFsIOError, match="TLS.*check that client.agent_ca_bundle"):
        route_to(tls_agent.url, str(other_cert)).stat("train", VIDEO, IDENTITIES["alice"])
    # The right CA works on the same route class.
    assert route_to(tls_agent.url, str(tls_pair[0])).stat("train", VIDEO, IDENTITIES["alice"]).size > 0
    with pytest.raises(errors.FluxonFsConfigError, match="agent_ca_bundle"):
        route_to(tls_agent.url, str(tmp_path / "missing.pem"))
    with pytest.raises(errors.FluxonFsConfigError, match="agent_ca_bundle"):
        make_patcher(tls_agent.url, "/", client={"agent_ca_bundle": ""})


def test_tls_options_are_checked_before_serving(agent_config, tls_pair, tmp_path):
    cert, key = tls_pair
    with pytest.raises(errors.FluxonFsConfigError, match="--tls-cert needs --tls-key"):
        make_ssl_context(cert, None)
    with pytest.raises(errors.FluxonFsConfigError, match="--tls-key needs --tls-cert"):
        make_ssl_context(None, key)
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    with pytest.raises(errors.FluxonFsConfigError, match="cannot load the TLS certificate"):
        make_ssl_context(tmp_path / "junk.pem", key)
    other_cert, _ = make_certificate(tmp_path)
    with pytest.raises(errors.FluxonFsConfigError, match="cannot load"):  # key of another cert
        make_ssl_context(other_cert, key)
    assert make_ssl_context(None, None) is None
    # The real command refuses to start, with a clear message.
    for args, message in [(["--tls-cert", str(cert)], "--tls-cert needs --tls-key"),
                          (["--tls-cert", str(cert), "--tls-key", str(tmp_path / "nope.pem")],
                           "is not a file")]:
        agent = AgentProcess(agent_config, args)
        with pytest.raises(ServerStartError, match=message):
            agent.start(timeout=20)


# ---- graceful shutdown ----

def test_sigterm_lets_an_in_flight_read_finish(agent_config, export_root):
    agent = AgentProcess(agent_config, ["--inject-latency-ms", "500"]).start()
    try:
        version = version_query(export_root, VIDEO)
        expected = (export_root / VIDEO).read_bytes()[1000:1000 + 20_000]
        result: dict[str, object] = {}

        def slow_read() -> None:
            try:
                result["answer"] = get(agent.url + "/v1/read", export="train", path=VIDEO,
                                       offset=1000, length=20_000, **version)
            except Exception as exc:  # noqa: BLE001 - reported below
                result["error"] = exc
            result["done"] = time.monotonic()

        reader = threading.Thread(target=slow_read)
        reader.start()
        # SIGTERM once the agent is handling the read (a scrape does not count itself).
        wait_until(lambda: sample(scrape(agent), "fluxon_agent_requests_in_flight") == 1,
                   "the read in flight", timeout=10, interval=0.01)
        assert agent.proc is not None
        agent.proc.send_signal(signal.SIGTERM)

        def refused() -> bool:
            try:
                socket.create_connection((LOOPBACK, agent.port), timeout=1).close()
            except ConnectionRefusedError:
                return True
            return False

        wait_until(refused, "the listener to close", timeout=5, interval=0.01)
        refused_at = time.monotonic()
        reader.join(10)
        assert "error" not in result, result.get("error")
        status, body, _ = result["answer"]  # type: ignore[misc]
        assert status == 200 and body == expected
        assert refused_at < result["done"]  # no new connections while the read finished
        assert agent.proc.wait(10) == 0
    finally:
        agent.stop()
    log = agent.log.read_text()
    assert "shutting down: no new connections; 1 request(s) in flight will finish" in log
    assert log.rstrip().endswith("stopped")


def test_loopback_addresses():
    """run_agent warns when it serves plain HTTP on an address that is not loopback."""
    from fluxon_video.fs.agent import _is_loopback

    assert _is_loopback("127.0.0.1") and _is_loopback("::1") and _is_loopback("localhost")
    assert not _is_loopback("0.0.0.0") and not _is_loopback("10.1.2.3")
    assert not _is_loopback("storage-01")


def test_an_agent_on_a_port_in_use_says_so_and_exits_1(agent_config):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "fluxon_video", "agent", "--config",
                               str(agent_config), "--listen", f"127.0.0.1:{port}"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    assert f"fluxon-video: error: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr and "listening" not in done.stdout
