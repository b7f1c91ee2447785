"""FluxonFS over a real 3-master Redis Cluster: the real agent process, spread keys,
pipelined reads, a master taken away and back, TTLs, and three "nodes" as separate processes."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from redis.cluster import key_slot

from fluxon_video.testing import AgentProcess, RedisCluster, RedisServer, free_port, wait_until
from tests.helpers import agent_config_text, make_patcher
from tests.media import Clip, make_clip, reference_frames

pytest.importorskip("fluxon_video._decode")
pytestmark = pytest.mark.timeout(120)

H, W = 48, 64
SMALL = ["h264_faststart.mp4", "h264_moov_end.mp4", "hevc.mp4", "vp9.webm"]  # 72 frames each
# Two GOPs of 96 frames: a read of a frame late in the second GOP seeks to its keyframe
# and prefetches the whole GOP (many pieces) at once.
LONG_GOP = Clip("long_gop.mp4", 640, 360, 8, (
    "-c:v", "libx264", "-preset", "veryfast", "-bf", "3", "-g", "96", "-keyint_min", "96",
    "-sc_threshold", "0", "-movflags", "+faststart"))
FAST_FAILOVER = {"redis_cluster": True, "redis_retry_after_s": 0.5, "redis_timeout_s": 0.3}


@pytest.fixture(scope="module")
def root(tmp_path_factory, media) -> Path:
    root = tmp_path_factory.mktemp("cluster-export") / "root"
    (root / "v").mkdir(parents=True)
    for name in SMALL:
        shutil.copy(media.path(name), root / "v" / name)
    make_clip(LONG_GOP, root / "v" / LONG_GOP.name)
    return root


@pytest.fixture(scope="module")
def agent(tmp_path_factory, root):
    config = tmp_path_factory.mktemp("cluster-agent") / "agent.toml"
    config.write_text(agent_config_text(root))
    with AgentProcess(config) as process:
        yield process


@pytest.fixture(scope="module")
def started_cluster(tmp_path_factory):
    with RedisCluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture
def cluster(started_cluster) -> RedisCluster:
    started_cluster.start()  # a test that failed with a master stopped leaves it stopped
    started_cluster.flushall()
    return started_cluster


def patcher_for(agent, root, cluster, client=None, **export_options):
    return make_patcher(agent.url, root, cluster.urls, client={"redis_cluster": True, **(client or {})},
                        **export_options)


def read(patcher, relpath, indices, size=(H, W)):
    with patcher.open_video_reader("train", relpath, size[0], size[1], 2) as reader:
        return reader.read_frames_numpy(indices), reader.last_stats


def piece_keys_by_node(cluster) -> list[list[str]]:
    out = []
    for i in range(len(cluster.nodes)):
        if not cluster.nodes[i].running:
            out.append([])
            continue
        client = cluster.node_client(i, decode_responses=True)
        try:
            out.append(sorted(client.scan_iter("fluxonfs:piece:*", count=1000)))
        finally:
            client.close()
    return out


def relpath_of(key: str) -> str:
    # fluxonfs:piece:{E}:{export}:{R}:{relpath}:... with export "train" and ASCII relpaths
    _, _, _, _, rest = key.split(":", 4)
    length, rest = rest.split(":", 1)
    return rest[:int(length)]


# ---- end to end ----

def test_frames_through_agent_and_cluster_equal_the_cli(media, agent, root, cluster):
    indices = [0, 17, 40, 71, 17]
    cold = {}
    with patcher_for(agent, root, cluster, piece_size=16 << 10) as node_a:
        for name in SMALL:
            frames, cold[name] = read(node_a, f"v/{name}", indices)
            np.testing.assert_array_equal(frames, media.reference(name, H, W)[indices])
        assert node_a.client.backfill.wait_idle()
    with patcher_for(agent, root, cluster, piece_size=16 << 10) as node_b:
        for name in SMALL:
            frames, warm = read(node_b, f"v/{name}", indices)
            np.testing.assert_array_equal(frames, media.reference(name, H, W)[indices])
            assert cold[name].remote_bytes > 0 and cold[name].kv_hits == 0
            assert warm.remote_bytes == 0 and warm.remote_reads == 0
            assert warm.kv_hits > 0 and warm.kv_misses == 0 and warm.kv_errors == 0
            assert warm.index_source == "kv"
        assert node_b.stats().index_scans == 0


def test_pieces_of_a_file_spread_over_the_shards(agent, root, cluster):
    # Stats not shared: they expire after the TTL, and every key here is counted.
    with patcher_for(agent, root, cluster, piece_size=16 << 10,
                     metadata_cache_shared=False) as patcher:
        for name in [*SMALL, LONG_GOP.name]:
            read(patcher, f"v/{name}", [0, 50])
        assert patcher.client.backfill.wait_idle()
    sizes = cluster.keys_per_node()
    assert all(size > 0 for size in sizes), sizes
    by_node = piece_keys_by_node(cluster)
    nodes_of: dict[str, set[int]] = {}
    for node, keys in enumerate(by_node):
        for key in keys:
            nodes_of.setdefault(relpath_of(key), set()).add(node)
    assert set(nodes_of) == {f"v/{name}" for name in [*SMALL, LONG_GOP.name]}
    assert nodes_of[f"v/{LONG_GOP.name}"] == {0, 1, 2}  # its many pieces: every shard
    # No hash tag: a file's pieces hash to slots of their own (which shard owns
    # a slot is the cluster's choice, so a file of few pieces may sit on one).
    slots_of: dict[str, set[int]] = {}
    for keys in by_node:
        for key in keys:
            slots_of.setdefault(relpath_of(key), set()).add(key_slot(key.encode()))
    assert all(len(slots) > 1 for slots in slots_of.values()), slots_of
    # Each file's frame-index blob is one key, on one shard; pieces + blobs are every key.
    blobs = sum(len(cluster.node_client(i).keys("fluxonfs:frameindex*")) for i in range(3))
    assert blobs == len(SMALL) + 1
    assert sum(sizes) == sum(len(keys) for keys in by_node) + blobs


def test_pieces_of_a_range_come_in_one_pipelined_read(agent, root, cluster):
    """A seek into the second GOP prefetches it (~50 pieces of 8 KiB): a fetch worker's range
    read carries up to 16 queued pages, whose pieces come in one pipelined KV read."""
    relpath, target = f"v/{LONG_GOP.name}", [190]
    ref = reference_frames(root / relpath, H, W)
    with patcher_for(agent, root, cluster, piece_size=8 << 10) as cold_node:
        frames, cold = read(cold_node, relpath, target)
        assert cold_node.client.backfill.wait_idle()
    with patcher_for(agent, root, cluster, piece_size=8 << 10) as warm_node:
        frames, warm = read(warm_node, relpath, target)
        process = warm_node.stats()
    np.testing.assert_array_equal(frames, ref[target])
    assert cold.kv_misses >= 40 and cold.remote_reads * 2 <= cold.kv_misses  # runs of misses
    assert warm.remote_bytes == 0 and warm.kv_misses == 0 and warm.kv_hits >= 40
    assert warm.kv_round_trips * 3 <= warm.kv_hits, warm  # ~16 pieces per round trip
    assert process.kv_round_trips == warm.kv_round_trips  # the process-wide counter agrees


# ---- failure: one master away mid-epoch, then back ----

def test_a_master_killed_mid_epoch_sends_its_slots_to_the_agent(media, agent, root, cluster):
    epoch = [(f"v/{name}", [3, 30, 60]) for name in SMALL] + [(f"v/{LONG_GOP.name}", [5, 100, 190])]
    refs = {relpath: reference_frames(root / relpath, H, W) for relpath, _ in epoch}
    options = dict(client=FAST_FAILOVER, piece_size=16 << 10)
    with patcher_for(agent, root, cluster, **options) as warmer:
        for relpath, indices in epoch:
            read(warmer, relpath, indices)
        assert warmer.client.backfill.wait_idle()
    stored = cluster.keys_per_node()
    assert all(stored), stored

    with patcher_for(agent, root, cluster, **options) as node:
        def run(part):
            total = None
            for relpath, indices in part:
                frames, stats = read(node, relpath, indices)
                np.testing.assert_array_equal(frames, refs[relpath][indices])
                total = stats if total is None else total + stats
            return total

        before = run(epoch[:2])
        assert before.remote_bytes == 0 and before.kv_errors == 0
        cluster.stop_node(1)
        during = run(epoch[2:] + epoch[:2])  # the rest of the epoch, then its start again
        # Master 1's pieces came from the agent; masters 0 and 2 kept serving theirs.
        assert during.kv_errors > 0 and during.remote_bytes > 0
        assert during.kv_hits > 0
        assert not node.client.kv.circuit_open  # a node down is not the KV down
        kept = cluster.keys_per_node()
        assert kept[0] >= stored[0] and kept[2] >= stored[2]  # nothing lost on the others

        cluster.start_node(1)  # back empty, with its slots: waits until the cluster is healthy
        time.sleep(FAST_FAILOVER["redis_retry_after_s"] + 0.1)  # its skip period is over
        after = run(epoch)
        assert after.kv_errors == 0 and after.kv_misses > 0  # asked again; empty, so misses
        assert node.client.backfill.wait_idle()
        assert cluster.keys_per_node()[1] > 0  # the misses were written back to master 1
        again = run(epoch)
        assert again.kv_errors == 0 and again.kv_misses == 0 and again.remote_bytes == 0
        assert again.kv_hits > 0


def add_replica(cluster: RedisCluster, of: int, workdir: Path) -> RedisServer:
    """A fifth node joins the cluster as the replica of master ``of`` and syncs with it."""
    port, bus = free_port(), free_port()
    replica = RedisServer(workdir / str(port), port=port, args=[
        "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
        "--cluster-node-timeout", str(cluster.node_timeout_ms), "--cluster-port", str(bus),
        "--cluster-require-full-coverage", "no"]).start()
    master = cluster.node_client(of, decode_responses=True)
    client = replica.client(decode_responses=True)
    try:
        master.execute_command("CLUSTER", "MEET", "127.0.0.1", port, bus)
        master_id = master.execute_command("CLUSTER", "MYID")
        wait_until(lambda: master_id in client.execute_command("CLUSTER", "NODES"),
                   "the new node learning the masters")
        wait_until(lambda: client.execute_command("CLUSTER", "REPLICATE", master_id),
                   "CLUSTER REPLICATE")
        wait_until(lambda: client.info("replication").get("master_link_status") == "up",
                   "the replica's sync")
    except BaseException:
        replica.stop()
        raise
    finally:
        master.close()
        client.close()
    return replica


def test_a_promoted_replica_takes_its_masters_slots_back(media, agent, root, tmp_path):
    relpath, indices = f"v/{LONG_GOP.name}", [1, 100, 190]
    ref = reference_frames(root / relpath, H, W)
    with RedisCluster(tmp_path / "cluster") as own:
        replica = add_replica(own, 1, tmp_path / "replica")
        try:
            with patcher_for(agent, root, own, client=FAST_FAILOVER, piece_size=16 << 10) as node:
                read(node, relpath, indices)
                assert node.client.backfill.wait_idle()
                owned = own.keys_per_node()[1]
                wait_until(lambda: replica.client().dbsize() >= owned, "replication of the pieces")

                own.stop_node(1)
                frames, down = read(node, relpath, indices)
                np.testing.assert_array_equal(frames, ref[indices])
                assert down.kv_errors > 0 and down.kv_hits > 0 and down.remote_bytes > 0
                wait_until(lambda: replica.client().info("replication")["role"] == "master",
                           "the replica's promotion", timeout=15)
                time.sleep(FAST_FAILOVER["redis_retry_after_s"] + 0.1)
                for _ in range(2):  # the slot map moves to the new master: its copies serve
                    frames, promoted = read(node, relpath, indices)
                    np.testing.assert_array_equal(frames, ref[indices])
                assert promoted.kv_errors == 0 and promoted.kv_misses == 0
                assert promoted.remote_bytes == 0
        finally:
            replica.stop()


# ---- cache lifetime ----

def test_ttl_is_set_on_write_and_pushed_back_on_a_hit(agent, root, cluster):
    relpath, indices = "v/hevc.mp4", list(range(72))  # every frame: every piece is read
    options = dict(piece_size=16 << 10, cache_ttl_s=100)
    with patcher_for(agent, root, cluster, **options) as writer:
        read(writer, relpath, indices)
        assert writer.client.backfill.wait_idle()
    client = cluster.client(decode_responses=True)
    try:
        pieces = [key for keys in piece_keys_by_node(cluster) for key in keys]
        blobs = [key for key in client.scan_iter("fluxonfs:frameindex*", target_nodes="all")]
        assert pieces and len(blobs) == 1
        entries = pieces + blobs
        assert all(95 <= client.ttl(key) <= 100 for key in entries)

        for key in entries:
            client.expire(key, 10)
        with patcher_for(agent, root, cluster, **options) as node:
            _, stats = read(node, relpath, indices)  # a new process-side client: refreshes
            assert stats.kv_hits == len(pieces) and stats.remote_bytes == 0
            assert all(95 <= client.ttl(key) <= 100 for key in entries)

            for key in entries:
                client.expire(key, 10)
            read(node, relpath, indices)  # the same client within TTL/2: no second EXPIRE
            assert all(client.ttl(key) <= 10 for key in entries)
    finally:
        client.close()


def test_without_cache_ttl_entries_do_not_expire(agent, root, cluster):
    with patcher_for(agent, root, cluster, piece_size=16 << 10) as patcher:
        read(patcher, "v/vp9.webm", [1, 30])
        assert patcher.client.backfill.wait_idle()
    client = cluster.client()
    try:
        keys = list(client.scan_iter("fluxonfs:*", target_nodes="all"))
        # Pieces and the index never expire; a shared stat is used as an answer for
        # metadata_cache_ttl_ms (its expires_at) and kept for stale_if_error_s
        # (300 s by default), for processes that start while no agent answers.
        kept = [key for key in keys if b":stat:" not in key]
        assert kept and all(client.ttl(key) == -1 for key in kept)
        assert all(290_000 < client.pttl(key) <= 300_000 for key in set(keys) - set(kept))
    finally:
        client.close()


# ---- three nodes as three processes ----

EPOCH = [(f"v/{name}", list(range(start, start + 16, 2)))
         for name in SMALL for start in (0, 24, 50)]


def node_epoch(patcher, clips) -> dict:
    """One "node": its own process and patcher reads the clips; digests of the frames and
    the process's stats come back."""
    with patcher:
        pool = patcher.open_video_reader_pool()
        digests, started = [], time.monotonic()
        for relpath, indices in clips:
            frames = pool.read_frames_numpy(export_name="train", relpath=relpath, height=H,
                                            width=W, num_threads=1, indices=indices)
            digests.append(hashlib.sha1(frames.tobytes()).hexdigest())
        seconds = time.monotonic() - started
        assert patcher.client.backfill.wait_idle()
        pool.close()
        return {"pid": os.getpid(), "stats": patcher.stats().as_dict(), "digests": digests,
                "seconds": seconds}


def test_three_nodes_share_one_epoch_through_the_cluster(media, agent, root, cluster):
    expected = [hashlib.sha1(np.ascontiguousarray(
        media.reference(relpath.split("/")[1], H, W)[indices]).tobytes()).hexdigest()
        for relpath, indices in EPOCH]
    spawn = multiprocessing.get_context("spawn")
    executors = [ProcessPoolExecutor(max_workers=1, mp_context=spawn) for _ in range(3)]
    try:
        patchers = [patcher_for(agent, root, cluster, piece_size=16 << 10) for _ in range(3)]
        # Node 1 reads the epoch cold; then nodes 2 and 3 read it at the same time.
        first = executors[0].submit(node_epoch, patchers[0], EPOCH).result(timeout=90)
        later = [executors[i].submit(node_epoch, patchers[i], EPOCH) for i in (1, 2)]
        nodes = [first] + [future.result(timeout=90) for future in later]
    finally:
        for executor in executors:
            executor.shutdown()
    assert len({node["pid"] for node in nodes} | {os.getpid()}) == 4
    for node in nodes:
        assert node["digests"] == expected  # every node, every clip: the CLI's frames

    one, two, three = (node["stats"] for node in nodes)
    # (index_scans / index_from_kv count reads of a reader whose index came from there)
    assert one["remote_bytes"] > 0 and one["index_scans"] > 0 and one["index_from_kv"] == 0
    for warm in (two, three):
        assert warm["remote_bytes"] == 0 and warm["remote_reads"] == 0
        assert warm["kv_hits"] > 0 and warm["kv_misses"] == 0
        assert warm["index_scans"] == 0 and warm["index_from_kv"] == one["index_scans"]
    # The agent served the epoch's touched bytes once, for all three nodes: exactly the
    # pieces now in the cluster, at most the files themselves.
    stored = 0
    client = cluster.client()
    try:
        for keys in piece_keys_by_node(cluster):
            stored += sum(plain_len(client, key) for key in keys)
    finally:
        client.close()
    agent_bytes = sum(node["stats"]["remote_bytes"] for node in nodes)
    assert agent_bytes == one["remote_bytes"] == stored
    assert agent_bytes <= sum((root / "v" / name).stat().st_size for name in SMALL)


def plain_len(client, key) -> int:
    """The length of the bytes an entry holds (an encrypted one also holds its 16-byte tag)."""
    return len(client.hget(key, "bytes")) - 16 * bool(client.hexists(key, "nonce"))


# ---- no node at all: the KV is down, reads are not ----

def test_a_cluster_no_seed_node_answers_for_is_a_kv_down(media, agent, root):
    seeds = [f"redis://127.0.0.1:{free_port()}" for _ in range(3)]
    with make_patcher(agent.url, root, seeds, client=FAST_FAILOVER) as patcher:
        frames, stats = read(patcher, "v/hevc.mp4", [2, 40])  # opening the reader makes the client
        np.testing.assert_array_equal(frames, media.reference("hevc.mp4", H, W)[[2, 40]])
        assert stats.kv_errors > 0 and stats.kv_hits == 0 and stats.remote_bytes > 0
        assert patcher.client.kv.circuit_open


def test_every_master_stopped_after_use_reads_go_to_the_agent(media, agent, root, cluster):
    relpath, indices = "v/vp9.webm", [1, 33, 70]
    with patcher_for(agent, root, cluster, client=FAST_FAILOVER, piece_size=16 << 10) as patcher:
        read(patcher, relpath, indices)
        assert patcher.client.backfill.wait_idle()
        cluster.stop()
        try:
            for _ in range(2):  # the first finds every node down, the second skips them
                frames, stats = read(patcher, relpath, indices)
                np.testing.assert_array_equal(frames, media.reference("vp9.webm", H, W)[indices])
                assert stats.kv_errors > 0 and stats.kv_hits == 0 and stats.remote_bytes > 0
        finally:
            cluster.start()
        time.sleep(FAST_FAILOVER["redis_retry_after_s"] + 0.1)
        _, stats = read(patcher, relpath, indices)
        assert stats.kv_errors == 0 and stats.kv_misses > 0  # back, empty


# ---- sizing: what a piece costs in Redis ----

def test_memory_usage_per_piece(agent, root, cluster):
    """MEMORY USAGE of full pieces (docs/fluxonfs.md's sizing figures): a power-of-two piece
    plus its string header lands in the allocator's next size class (+25%); a piece a
    little smaller fits its class, and reads the same frames."""
    relpath, indices = f"v/{LONG_GOP.name}", [0, 100, 190]
    ref = reference_frames(root / relpath, H, W)
    client = cluster.client()
    try:
        usage = {}
        for piece_size in (256 << 10, (256 << 10) - 64):
            with patcher_for(agent, root, cluster, piece_size=piece_size) as patcher:
                frames, _ = read(patcher, relpath, indices)
                np.testing.assert_array_equal(frames, ref[indices])
                assert patcher.client.backfill.wait_idle()
            full = [key for keys in piece_keys_by_node(cluster) for key in keys
                    if key.split(":")[-2] == str(piece_size)
                    and plain_len(client, key) == piece_size]
            assert full
            usage[piece_size] = {client.memory_usage(key, samples=0) for key in full}
        assert all(u > 1.2 * (256 << 10) for u in usage[256 << 10]), usage
        assert all(u < (256 << 10) - 64 + 1024 for u in usage[(256 << 10) - 64]), usage
    finally:
        client.close()
