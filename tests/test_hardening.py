"""Regression tests for faults and bad input on the FluxonFS side (the agent, the
Redis KV, configs, relpaths): clean refusals, timeouts, repairs and failover."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from urllib.parse import urlencode

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.fs.config import load_config
from fluxon_video.testing import AgentProcess
from tests.helpers import IDENTITIES, agent_config_text, http_get, make_patcher, run_in_threads

VIDEO = "videos/h264_faststart.mp4"
OTHER = "videos/hevc.mp4"  # the same size is not needed: rewrites copy bytes over
H, W = 48, 64


@pytest.fixture(scope="module")
def root(tmp_path_factory, media):
    """An export root of our own: videos, a FIFO, a symlink loop, a deep name."""
    root = tmp_path_factory.mktemp("hard") / "root"
    (root / "videos").mkdir(parents=True)
    for name in ("h264_faststart.mp4", "hevc.mp4", "vp9.webm"):
        shutil.copy(media.path(name), root / "videos" / name)
    os.mkfifo(root / "videos" / "pipe.mp4")
    (root / "videos" / "loop_a.mp4").symlink_to(root / "videos" / "loop_b.mp4")
    (root / "videos" / "loop_b.mp4").symlink_to(root / "videos" / "loop_a.mp4")
    return root


@pytest.fixture(scope="module")
def config_path(tmp_path_factory, root):
    path = tmp_path_factory.mktemp("hard-agent") / "agent.toml"
    path.write_text(agent_config_text(root))
    return path


@pytest.fixture(scope="module")
def agent(config_path):
    with AgentProcess(config_path) as process:
        yield process


# ---- 1. symlink loops and over-long names ----

@pytest.mark.parametrize("relpath, status", [("videos/loop_a.mp4", 404),
                                             ("videos/" + "x" * 300 + ".mp4", 400),
                                             ("/".join(["d" * 200] * 30) + ".mp4", 400)])
def test_os_errors_are_clean_refusals(agent, root, relpath, status):
    code, body = http_get(f"{agent.url}/v1/stat?" + urlencode({"export": "train", "path": relpath}))
    assert code == status, body
    assert str(root) not in body.decode() and str(root.parent) not in body.decode()
    with make_patcher(None, root) as patcher:  # in-process: a FluxonFsError, no plain OSError
        with pytest.raises(errors.FluxonFsError) as info:
            patcher.open_video_reader("train", relpath, H, W)
        assert str(root) not in str(info.value)


# ---- 2. a FIFO in the export root ----

def test_a_fifo_never_ties_up_the_agent(agent, root):
    query = {"export": "train", "path": "videos/pipe.mp4", "offset": 0, "length": 10,
             "size": 0, "mtime_ns": 0, "ctime_ns": 0, "inode": 0}
    statuses: list[int] = []

    def read_fifo(_: int) -> None:
        statuses.append(http_get(f"{agent.url}/v1/read?{urlencode(query)}", timeout=5)[0])

    t0 = time.monotonic()
    assert run_in_threads(read_fifo, 40) == []
    assert statuses == [404] * 40 and time.monotonic() - t0 < 5
    with make_patcher(agent.url, root) as patcher:  # valid reads are served promptly
        with patcher.open_video_reader("train", VIDEO, H, W) as reader:
            assert reader.read_frames_numpy([0]).shape == (1, H, W, 3)
    with make_patcher(None, root) as patcher:
        storage = patcher.client._checkpid().routes["train"].storage
        version = fv.fs.origin.FileStat(0, 0)
        with pytest.raises(errors.FluxonFsNotFoundError, match="not a regular file"):
            storage.read_chunk("train", "videos/pipe.mp4", 0, 10, version, IDENTITIES["alice"])


# ---- 3. KV entries of the wrong type, and refused writes ----

def store_pieces(root, redis_url: str, indices: list[int]) -> None:
    """Read VIDEO's frames at indices in a patcher of its own (16 KiB pieces), so the
    pieces they need are in Redis when it returns."""
    with make_patcher(None, root, redis_url, piece_size=16 << 10) as patcher:
        with patcher.open_video_reader("train", VIDEO, H, W) as reader:
            reader.read_frames_numpy(indices)
        patcher.client.backfill.wait_idle()


def test_a_piece_of_the_wrong_redis_type_is_repaired(media, root, redis_server, redis_url):
    r = redis_server.client()
    store_pieces(root, redis_url, [0, 40])
    pieces = sorted(k for k in r.keys("*piece*"))
    assert len(pieces) >= 3
    # Every piece (whichever the read needs): strings and lists in turn.
    for n, key in enumerate(pieces):
        r.delete(key)
        if n % 2:
            r.rpush(key, b"a", b"list")
        else:
            r.set(key, b"a string")
    ref = media.reference("h264_faststart.mp4", H, W)
    with make_patcher(None, root, redis_url, piece_size=16 << 10) as patcher:
        with patcher.open_video_reader("train", VIDEO, H, W) as reader:
            np.testing.assert_array_equal(reader.read_frames_numpy([0, 40]), ref[[0, 40]])
            stats = reader.last_stats
        assert stats.kv_corrupt >= 2 and stats.kv_errors == 0 and stats.kv_hits == 0
        assert not patcher.client.kv.circuit_open
        patcher.client.backfill.wait_idle()
    rewritten = [key for key in pieces if r.type(key) == b"hash"]
    assert len(rewritten) >= stats.kv_corrupt  # each damaged piece read was stored again
    with make_patcher(None, root, redis_url, piece_size=16 << 10) as patcher:
        with patcher.open_video_reader("train", VIDEO, H, W) as reader:
            reader.read_frames_numpy([0, 40])
            assert reader.last_stats.kv_corrupt == 0 and reader.last_stats.kv_hits > 0


def test_a_full_redis_refuses_writes_but_reads_go_on(media, root, redis_server, redis_url):
    r = redis_server.client()
    store_pieces(root, redis_url, [1])  # this file's pieces go into Redis
    stored = r.dbsize()
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", r.info("memory")["used_memory"] + 1000)
    try:
        with make_patcher(None, root, redis_url, piece_size=16 << 10,
                          kv_miss_policy="StageToKvThenRead") as patcher:
            with patcher.open_video_reader("train", "videos/vp9.webm", H, W) as reader:
                np.testing.assert_array_equal(reader.read_frames_numpy([1, 30, 70]),
                                              media.reference("vp9.webm", H, W)[[1, 30, 70]])
                assert reader.last_stats.remote_reads > 0
            assert r.dbsize() == stored  # every write was refused (OOM)...
            assert not patcher.client.kv.circuit_open  # ...which is not "Redis down"
            with patcher.open_video_reader("train", VIDEO, H, W) as reader:
                reader.read_frames_numpy([1])
                assert reader.last_stats.kv_hits > 0 and reader.last_stats.kv_errors == 0
    finally:
        r.config_set("maxmemory", 0)


# ---- 4. agent timeouts ----

def test_agent_timeouts_are_timeout_errors(config_path, root):
    with AgentProcess(config_path, ["--inject-latency-ms", "1500"]) as slow:
        # (no retry window: the error itself is the point; test_agent_outage waits one out)
        with make_patcher(slow.url, root, client={"agent_timeout_s": 0.3,
                                                  "agent_retry_window_s": 0}) as patcher:
            with pytest.raises(errors.FluxonFsTimeoutError, match="timed out"):
                patcher.open_video_reader("train", VIDEO, H, W)


# ---- 6. a rewrite that restores size and mtime ----

def test_a_rewrite_with_the_mtime_restored_is_a_new_version(media, tmp_path, redis_url):
    root = tmp_path / "root"
    (root / "videos").mkdir(parents=True)
    target = root / VIDEO
    a, b = media.path("h264_faststart.mp4"), media.path("h264_moov_end.mp4")
    shutil.copy(a, target)
    st = os.stat(target)
    with make_patcher(None, root, redis_url, piece_size=16 << 10,
                      metadata_cache_ttl_ms=0) as patcher:
        reader = patcher.open_video_reader("train", VIDEO, H, W)
        reader.read_frames_numpy([0, 10])
        patcher.client.backfill.wait_idle()
        # Same size, other bytes, mtime put back: only ctime (and maybe the inode) differ.
        data = b.read_bytes()
        data = (data + a.read_bytes())[:st.st_size]
        target.write_bytes(data)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert (os.stat(target).st_size, os.stat(target).st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        with pytest.raises(errors.FluxonFsFileChangedError, match="ctime_ns"):
            reader.read_frames_numpy([50])
        reader.close()
    with make_patcher(None, root, redis_url, piece_size=16 << 10) as fresh:
        # A brand-new patcher never takes the old version's pieces or index for the new one.
        with fresh.open_video_reader("train", VIDEO, H, W) as reader:
            assert reader.last_stats is None
            frames = reader.read_frames_numpy([0])
            assert reader.last_stats.kv_hits == 0
    np.testing.assert_array_equal(frames[0], media.reference("h264_moov_end.mp4", H, W)[0])


# ---- 7. a valid entry under another key ----

def test_a_piece_copied_under_another_key_is_corrupt(media, root, redis_server, redis_url):
    r = redis_server.client()
    store_pieces(root, redis_url, [0, 70])
    keys = sorted(r.keys("*piece*"), key=lambda k: int(k.rsplit(b":", 1)[1]))
    assert len(keys) >= 3
    # Each piece's (valid) entry under the next piece's key, whichever the read needs.
    entries = [r.hgetall(key) for key in keys]
    for key, entry in zip(keys, entries[1:] + entries[:1]):
        r.hset(key, mapping=entry)
    with make_patcher(None, root, redis_url, piece_size=16 << 10) as patcher:
        with patcher.open_video_reader("train", VIDEO, H, W) as reader:
            np.testing.assert_array_equal(reader.read_frames_numpy([0, 70]),
                                          media.reference("h264_faststart.mp4", H, W)[[0, 70]])
            assert reader.metadata.num_frames == 72
            assert reader.last_stats.kv_corrupt >= 1 and reader.last_stats.kv_hits == 0


# ---- 8. relpaths are normalised at the edge ----

def test_spellings_of_one_relpath_are_one_file(root, redis_server, redis_url):
    r = redis_server.client()
    spellings = [VIDEO, "./" + VIDEO, VIDEO.replace("/", "//"), VIDEO.replace("/", "/./"),
                 VIDEO + "/"]
    with make_patcher(None, root, redis_url, piece_size=16 << 10) as patcher:
        for relpath in spellings:
            with patcher.open_video_reader("train", relpath, H, W) as reader:
                assert reader.relpath == VIDEO
                reader.read_frames_numpy([0, 60])
            patcher.client.backfill.wait_idle()
        with patcher.open_video_reader_pool() as pool:
            for relpath in spellings:
                pool.read_frames_numpy(export_name="train", relpath=relpath, height=H, width=W,
                                       num_threads=1, indices=[1])
            assert pool.counters().readers_opened == 1
        assert fv.FluxonFsVideoReadRequest("train", "a//./b.mp4", 8, 8, 1, ()).relpath == "a/b.mp4"
    relpaths = {key.split(b":")[5] for key in r.keys("*")}  # prefix:kind:5:train:25:relpath:...
    assert relpaths == {VIDEO.encode()}
    for bad in ("../x.mp4", "a/../../x.mp4", ".", "./"):
        with pytest.raises(errors.FluxonFsBadRequestError):
            fv.FluxonFsVideoReadRequest("train", bad, 8, 8, 1, ())
    # An absolute path is a URI (fs/uris.py): refused when it is under no root of the export.
    with make_patcher(None, root) as patcher, patcher.open_video_reader_pool() as pool:
        with pytest.raises(errors.FluxonFsBadRequestError, match="not under the root"):
            pool.read_frames_numpy(export_name="train", relpath="/abs.mp4", height=H, width=W,
                                   num_threads=1, indices=[0])


# ---- 9. bad configs ----

def test_bad_configs_are_refused_where_exports_are_served(tmp_path, root):
    missing = tmp_path / "missing.toml"
    missing.write_text(agent_config_text(tmp_path / "nope"))
    stranger = tmp_path / "stranger.toml"
    stranger.write_text(agent_config_text(root).replace('allow = ["alice"]',
                                                        'allow = ["alice", "mallory"]'))
    for path, message in ((missing, "root"), (stranger, "mallory")):
        proc = subprocess.run([sys.executable, "-m", "fluxon_video", "agent", "--config",
                               str(path), "--listen", "127.0.0.1:0"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0
        assert str(path) in proc.stderr and "exports[0] (train)" in proc.stderr, proc.stderr
        assert message in proc.stderr
        with pytest.raises(errors.FluxonFsConfigError, match=f"{path}.*exports\\[0\\].*{message}"):
            fv.FluxonFsPatcher(load_config(path), identity="alice")
    # A client of a remote export need not know every identity the agent knows.
    remote = load_config(stranger)
    remote_exports = [fv.FluxonFsExport(e.name, str(tmp_path / "nope"), agent_url="https://x:1",
                                        allow=e.allow) for e in remote.exports.values()]
    fv.FluxonFsPatcher(exports=remote_exports, identities=IDENTITIES, identity="alice").close()


# ---- 11. agent replicas, and stale_if_error_s ----

def test_reads_fail_over_to_a_replica_and_skip_the_dead_one(media, config_path, root):
    ref = media.reference("hevc.mp4", H, W)
    with AgentProcess(config_path) as first, AgentProcess(config_path) as second:
        with make_patcher([first.url, second.url], root, piece_size=16 << 10,
                          metadata_cache_ttl_ms=0,
                          client={"agent_timeout_s": 2.0, "agent_connect_timeout_s": 1.0,
                                  "agent_failover_skip_s": 30.0,
                                  # the error at the end is the point: no 30 s wait for it
                                  "agent_retry_window_s": 0.5}) as patcher:
            reader = patcher.open_video_reader("train", OTHER, H, W)
            reader.read_frames_numpy([0])
            first.stop()
            np.testing.assert_array_equal(reader.read_frames_numpy([30, 60]), ref[[30, 60]])
            t0 = time.monotonic()
            with patcher.open_video_reader("train", "videos/vp9.webm", H, W) as other:
                other.read_frames_numpy([5])
            assert time.monotonic() - t0 < 1.0  # the dead replica is not tried first
            reader.close()
            second.stop()
            with pytest.raises(errors.FluxonFsIOError, match="unreachable"):
                patcher.open_video_reader("train", VIDEO, H, W)


@pytest.mark.parametrize("stale_s", [0, 60])
def test_stale_if_error_serves_kv_bytes_while_no_agent_answers(media, config_path, root,
                                                               redis_url, stale_s):
    ref = media.reference("hevc.mp4", H, W)
    with AgentProcess(config_path) as agent:
        with make_patcher(agent.url, root, redis_url, metadata_cache_ttl_ms=0,
                          stale_if_error_s=stale_s,
                          # with stale_s = 0 the error is the point: no 30 s wait for it
                          client={"agent_timeout_s": 1.0, "agent_connect_timeout_s": 0.5,
                                  "agent_retry_window_s": 0.5}) as patcher:
            reader = patcher.open_video_reader("train", OTHER, H, W)
            reader.read_frames_numpy(list(range(0, 72, 3)))  # every piece now in Redis
            patcher.client.backfill.wait_idle()
            agent.stop()
            if stale_s:
                np.testing.assert_array_equal(reader.read_frames_numpy([70, 5]), ref[[70, 5]])
            else:
                with pytest.raises(errors.FluxonFsIOError):
                    reader.read_frames_numpy([70, 5])
            reader.close()
