"""An agent outage does not end a run (issue 35, item 1): calls wait out a restart
(``client.agent_retry_window_s``), failing over across replicas, and a warm file
stays readable while no agent answers when an agent authorised its version within
``stale_if_error_s``, in this process or, through the shared KV, in another."""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from fluxon_video import errors
from fluxon_video.fs.kv import stat_key
from fluxon_video.fs.routes import AgentRoute, ReplicatedRoute
from fluxon_video.testing import LOOPBACK, AgentProcess
from tests.helpers import IDENTITIES, make_certificate, make_patcher

H, W = 32, 48
WARM = ["bucket/videos/h264_faststart.mp4", "bucket/videos/hevc.mp4"]
COLD = "bucket/videos/vp9.webm"  # never read before the outage
# Short, so that the stats the warm-up authorised are past it when the agent goes.
TTL_MS = 200
DOWN_S = 2.5


def reference(media, relpath: str) -> np.ndarray:
    return media.reference(relpath.rsplit("/", 1)[1], H, W)


def warm(agent, export_root, redis_url, relpaths) -> None:
    """Every piece and the frame index of each file into the KV, and its shared stat,
    by a trainer that is gone by the time the agent is (close() waits for its writes)."""
    with make_patcher(agent.url, export_root, redis_url, metadata_cache_ttl_ms=TTL_MS) as warmer:
        for relpath in relpaths:
            warmer.warm_file("train", relpath)
            warmer.video_metadata("train", relpath)
        assert warmer.client.backfill.wait_idle()


def _ready() -> bool:
    return True


def _read_as_newcomer(patcher_bytes: bytes, clips: list[tuple[str, list[int]]]
                      ) -> tuple[list[np.ndarray], int]:
    """In a process that has never had a client: a new patcher reads clips
    (frames, bytes that came from an agent)."""
    patcher = pickle.loads(patcher_bytes)
    frames, remote = [], 0
    with patcher:
        for relpath, indices in clips:
            with patcher.open_video_reader("train", relpath, H, W) as reader:
                frames.append(reader.read_frames_numpy(indices))
                remote += reader.last_stats.remote_bytes
    return frames, remote


# ---- the scenario ----

def test_an_agent_restart_under_a_dataloader_loses_no_item_and_a_newcomer_reads_warm_files(
        media, agent_config, export_root, redis_url):
    """SIGTERM, then a restart about 2.5 s later, under a running DataLoader with 2
    workers, with the default client settings: the items read while the agent is
    away (warm ones at once, the cold video's once it is back) all arrive and are
    exact; a process that starts during the outage reads warm clips without it."""
    pytest.importorskip("torch")  # here, so that the newcomer's process never imports it
    from torch.utils.data import DataLoader

    from fluxon_video.torch import VideoClipDataset

    for relpath in WARM + [COLD]:
        reference(media, relpath)  # the ffmpeg CLI runs before, not during, the outage
    spawn = multiprocessing.get_context("spawn")
    with AgentProcess(agent_config) as agent, \
            ProcessPoolExecutor(1, mp_context=spawn) as newcomer:
        newcomer.submit(_ready).result(timeout=120)  # started, imports done, no client yet
        warm(agent, export_root, redis_url, WARM)
        with make_patcher(agent.url, export_root, redis_url, metadata_cache_ttl_ms=TTL_MS
                          ) as patcher:
            dataset = VideoClipDataset(patcher, "train", WARM + [COLD], clip_len=4, stride=3,
                                       clips_per_video=3, height=H, width=W, seed=5)
            loader = DataLoader(dataset, batch_size=1, shuffle=False, num_workers=2,
                                multiprocessing_context="fork")
            newcomer_clips = [(WARM[0], [0, 17, 40]), (WARM[1], [3, 33, 70])]
            outage: dict[str, object] = {}

            def agent_comes_back() -> None:
                # The newcomer starts while the agent is away; the agent comes back
                # once it is done and DOWN_S have passed.
                try:
                    job = newcomer.submit(_read_as_newcomer, pickle.dumps(patcher),
                                          newcomer_clips)
                    outage["newcomer"] = job.result(timeout=60)
                except BaseException as exc:  # noqa: BLE001 - reported by the test
                    outage["newcomer"] = exc
                outage["newcomer_done"] = time.monotonic()
                time.sleep(max(0.0, outage["stopped"] + DOWN_S - time.monotonic()))
                outage["restarting"] = time.monotonic()
                agent.start()

            restarter = threading.Thread(target=agent_comes_back)
            items, arrived = [], []
            try:
                for epoch in range(2):
                    dataset.set_epoch(epoch)
                    for k, batch in enumerate(loader):
                        items.append((batch["relpath"][0], batch["indices"][0].tolist(),
                                      batch["frames"][0].numpy()))
                        arrived.append(time.monotonic())
                        if epoch == 0 and k == 0:
                            agent.stop()  # SIGTERM; later items are dispatched after it
                            outage["stopped"] = time.monotonic()
                            restarter.start()
            finally:
                if "stopped" in outage:
                    restarter.join(60)
                agent.start()

    assert len(items) == 2 * len(dataset) == 18
    for relpath, indices, frames in items:
        np.testing.assert_array_equal(frames, reference(media, relpath)[indices],
                                      err_msg=f"{relpath} {indices}")
    # Items 5 and up were handed to the workers after the stop (a DataLoader hands
    # out one index per batch it yields): the last warm one came before the agent
    # was back (a stale stat), the cold video's first had to wait for it.
    last_warm, first_cold = 5, 6
    assert items[last_warm][0] == WARM[1] and items[first_cold][0] == COLD
    assert arrived[last_warm] < outage["restarting"] < arrived[first_cold]
    # The newcomer read exact frames without an agent: it was back only after.
    result = outage["newcomer"]
    assert not isinstance(result, BaseException), result
    frames, remote = result
    for (relpath, indices), got in zip(newcomer_clips, frames):
        np.testing.assert_array_equal(got, reference(media, relpath)[indices])
    assert remote == 0 and outage["newcomer_done"] <= outage["restarting"]


# ---- the bounds: the retry window, stale_if_error_s ----

def test_an_agent_gone_longer_than_the_window_is_a_clear_error(media, agent_config, export_root,
                                                                redis_url, redis_server):
    window = 1.5
    with AgentProcess(agent_config) as agent:
        warm(agent, export_root, redis_url, WARM[:1])
        # The shared stat outlives its TTL in Redis: stale_if_error_s (300 s by default).
        r = redis_server.client()
        stats = [key for key in r.scan_iter("fluxonfs:stat:*")]
        assert stats and all(290 < r.ttl(key) <= 300 for key in stats)
        agent.stop()
        time.sleep(TTL_MS / 1000)

        def open_and_read(relpath: str, **options) -> tuple[np.ndarray, float]:
            client = {"agent_retry_window_s": window, **options.pop("client", {})}
            t0 = time.monotonic()
            with make_patcher(agent.url, export_root, redis_url, metadata_cache_ttl_ms=TTL_MS,
                              client=client, **options) as fresh:
                with fresh.open_video_reader("train", relpath, H, W) as reader:
                    return reader.read_frames_numpy([0, 40]), time.monotonic() - t0

        # A file no agent authorised lately: the window, then the error, saying so.
        t0 = time.monotonic()
        with pytest.raises(errors.FluxonFsIOError,
                           match=rf"train:{COLD}: agent {agent.url} unreachable .*Connection "
                                 r"refused.*; no agent answered for 1\.\d s "
                                 r"\(client\.agent_retry_window_s = 1\.5\)"):
            open_and_read(COLD)
        assert window <= time.monotonic() - t0 < window + 3

        # A warm file: served at once from the shared stat (default stale_if_error_s),
        # even with a window far longer than the test.
        frames, took = open_and_read(WARM[0], client={"agent_retry_window_s": 60})
        np.testing.assert_array_equal(frames, reference(media, WARM[0])[[0, 40]])
        assert took < 5

        # Off where the operator says so, and bounded: the window, then the error.
        for stale_s in (0, 0.1):
            t0 = time.monotonic()
            with pytest.raises(errors.FluxonFsIOError, match=r"unreachable.*no agent answered"):
                open_and_read(WARM[0], stale_if_error_s=stale_s)
            assert window <= time.monotonic() - t0 < window + 3

        # Only for the identity an agent authorised: alice's stat entry copied under
        # bob's key (bob may not read "train") fails its seal and is never served.
        (alices,) = stats
        with make_patcher(None, export_root, redis_url) as trainer:  # the tags need the KV key
            bobs = stat_key("fluxonfs", "train", WARM[0],
                            trainer.client.seal.identity_tag("train", IDENTITIES["bob"]))
        r.hset(bobs, mapping=r.hgetall(alices))
        with pytest.raises(errors.FluxonFsIOError, match=r"unreachable.*no agent answered"):
            open_and_read(WARM[0], identity="bob")
        assert not r.exists(bobs)  # deleted as forged


def test_a_process_serves_its_own_stale_stat_at_once_and_waits_for_a_kv_miss(
        media, agent_config, export_root, redis_url):
    """One process, the agent stopped and started again: a warm read does not wait
    (its own stat, authorised within stale_if_error_s), a read of bytes not in the
    KV waits for the agent and gets them."""
    relpath = WARM[0]
    ref = reference(media, relpath)
    with AgentProcess(agent_config) as agent:
        with make_patcher(agent.url, export_root, redis_url, metadata_cache_ttl_ms=TTL_MS,
                          piece_size=4096, async_backfill_enabled=False,
                          client={"readahead_pages": 0}) as patcher:
            with patcher.open_video_reader("train", relpath, H, W) as reader:
                reader.read_frames_numpy([0, 1])
                agent.stop()
                time.sleep(TTL_MS / 1000)
                t0 = time.monotonic()
                np.testing.assert_array_equal(reader.read_frames_numpy([0, 1]), ref[[0, 1]])
                assert time.monotonic() - t0 < 1.5  # the page cache and a stale stat
                back = threading.Timer(1.0, agent.start)
                back.start()
                try:
                    t0 = time.monotonic()
                    middle = reader.read_frames_numpy([40])  # pages never read
                    waited = time.monotonic() - t0
                finally:
                    back.join()
                np.testing.assert_array_equal(middle, ref[[40]])
                assert waited >= 0.9 and reader.last_stats.remote_bytes > 0


# ---- the route: backoff across replicas, one warning, answers are final ----

def test_calls_wait_out_an_outage_of_every_replica_with_one_warning(agent_config, export_root,
                                                                    caplog):
    """The route a trainer builds for two replicas, with the default settings."""
    token = IDENTITIES["alice"]
    video = "bucket/videos/hevc.mp4"
    with AgentProcess(agent_config) as first, AgentProcess(agent_config) as second, \
            make_patcher([first.url, second.url], export_root) as patcher:
        route = patcher.client._checkpid().routes["train"]
        size = route.stat("train", video, token).size
        caplog.set_level(logging.INFO, logger="fluxon_video.routes")
        first.stop()
        second.stop()
        answers: list[object] = []

        def call() -> None:
            try:
                answers.append(route.stat("train", video, token).size)
            except Exception as exc:  # noqa: BLE001 - reported below
                answers.append(exc)

        threads = [threading.Thread(target=call) for _ in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        assert not answers  # every call is waiting
        second.start()  # only the second replica comes back
        for thread in threads:
            thread.join(30)
        assert answers == [size] * 4
        # However many calls and rounds: one warning for the outage, one per replica
        # failing over, one info line when an agent answers again.
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        outage = [m for m in warnings if "retrying for up to 30 s" in m]
        assert len(outage) == 1 and "unreachable" in outage[0], warnings
        assert len(warnings) == 3 and sum("cannot serve now" in m for m in warnings) == 2
        back = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO
                and "answers again" in r.getMessage()]
        assert len(back) == 1 and second.url in back[0], back

        # Answers are final, outage or not: never retried, never waited for.
        for bad_token, path, error in [("x" * 43, video, errors.FluxonFsAuthenticationError),
                                       (token, "bucket/none.mp4", errors.FluxonFsNotFoundError)]:
            t0 = time.monotonic()
            with pytest.raises(error):
                route.stat("train", path, bad_token)
            assert time.monotonic() - t0 < 1.0


class _Busy:
    """A real HTTP server that answers every request 503 with Retry-After: 1."""

    def __init__(self) -> None:
        outer = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.requests += 1
                body = b'{"error": "unavailable", "message": "connection table full"}'
                self.send_response(503)
                self.send_header("Retry-After", "1")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_503_is_waited_for_as_long_as_it_asks_within_the_window(agent_config, tmp_path):
    busy = _Busy()
    try:
        route = ReplicatedRoute([AgentRoute(busy.url, 5.0, 1.0, 2)], skip_s=10,
                                retry_window_s=2.5)
        t0 = time.monotonic()
        with pytest.raises(errors.FluxonFsOverloadedError,
                           match=r"connection table full.*no agent answered for 2\.\d s") as caught:
            route.stat("train", "bucket/videos/hevc.mp4", IDENTITIES["alice"])
        took = time.monotonic() - t0
        assert caught.value.retry_after_s == 1.0
        # Retry-After: 1 spaces the tries a second apart: 3 or 4 in 2.5 s, not dozens.
        assert 2.5 <= took < 4.5 and 3 <= busy.requests <= 4, (took, busy.requests)
    finally:
        busy.close()
    # A certificate that does not verify will not verify a moment later: not waited for.
    (tmp_path / "agent").mkdir()
    (tmp_path / "other").mkdir()
    cert, key = make_certificate(tmp_path / "agent")
    other, _ = make_certificate(tmp_path / "other")  # a CA that did not sign the agent's
    with AgentProcess(agent_config, tls=(cert, key)) as tls_agent:
        route = ReplicatedRoute([AgentRoute(tls_agent.url, 5.0, 1.0, 2, str(other))],
                                skip_s=10, retry_window_s=20)
        t0 = time.monotonic()
        with pytest.raises(errors.FluxonFsIOError, match="TLS connection"):
            route.stat("train", "bucket/videos/hevc.mp4", IDENTITIES["alice"])
        assert time.monotonic() - t0 < 2
