"""fluxon_video.testing.RedisCluster: a real 3-master Redis Cluster, one master taken away and back."""

from __future__ import annotations


import pytest
import redis

from fluxon_video.testing import LOOPBACK, RedisCluster, wait_until

pytestmark = pytest.mark.timeout(120)

# What redis-py raises for a key whose master is down: the connection is refused
# (ConnectionError, what redis-py 8 raises here), or CLUSTERDOWN from a node that
# requires full coverage.
NODE_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.ClusterDownError)


def marked_failed(cluster: RedisCluster, observer: int, port: int) -> bool:
    """Whether master ``observer`` has flagged the node on ``port`` as failed (FAIL, not just PFAIL)."""
    client = cluster.node_client(observer, decode_responses=True)
    try:
        text = client.execute_command("CLUSTER", "NODES")
    finally:
        client.close()
    for line in text.splitlines():
        fields = line.split()
        if fields[1].split("@")[0] == f"{LOOPBACK}:{port}":
            return "fail" in fields[2].split(",")
    return False


def test_cluster_spreads_keys_and_survives_a_master_restart(tmp_path):
    with RedisCluster(tmp_path) as cluster:
        assert len(cluster.ports) == 3 and len(set(cluster.ports)) == 3
        assert cluster.urls == [f"redis://127.0.0.1:{port}" for port in cluster.ports]
        assert cluster.startup_nodes == [("127.0.0.1", port) for port in cluster.ports]
        assert "All 16384 slots covered" in cluster.create_output
        for i in range(3):
            node = cluster.node_client(i, decode_responses=True)
            assert "cluster_state:ok" in node.execute_command("CLUSTER", "INFO").split()
            node.close()

        client = cluster.client()
        keys = [f"piece:{n}" for n in range(300)]
        for key in keys:
            client.set(key, key)
        sizes = cluster.keys_per_node()
        assert sum(sizes) == 300 and all(size > 0 for size in sizes), sizes
        owner = {key: cluster.node_for_key(key) for key in keys}
        assert [list(owner.values()).count(i) for i in range(3)] == sizes

        # Master 1 goes away: its keys fail, the other masters keep serving,
        # also once the others have marked it failed.
        cluster.stop_node(1)
        cluster.stop_node(1)  # again: a no-op
        assert cluster.keys_per_node()[1] == 0
        wait_until(lambda: marked_failed(cluster, 0, cluster.ports[1]), "master 1 marked failed",
                   timeout=10)
        lost = [key for key in keys if owner[key] == 1]
        kept = [key for key in keys if owner[key] != 1]
        for key in lost[:3]:
            with pytest.raises(NODE_DOWN):
                client.set(key, "while down")
        for key in kept:
            client.set(key, "while down")
            assert client.get(key) == b"while down"

        # Back on the same port with its nodes.conf: it owns its slots again, empty.
        cluster.start_node(1)
        assert cluster.keys_per_node()[1] == 0
        for key in keys:  # the same client object, after its connection errors
            client.set(key, "after")
        assert cluster.keys_per_node() == sizes
        fresh = cluster.client()
        assert fresh.get(lost[0]) == b"after"
        fresh.close()
        client.close()

        cluster.flushall()
        assert cluster.keys_per_node() == [0, 0, 0]
    cluster.stop()  # again: a no-op
    assert not cluster.running


def test_cluster_needs_three_masters(tmp_path):
    with pytest.raises(ValueError, match="at least 3 masters"):
        RedisCluster(tmp_path, masters=2)
