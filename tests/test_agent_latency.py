"""`fluxon-video agent --inject-latency-ms`: every stat and read answer waits that long."""

from __future__ import annotations

import json
import time
import urllib.request
from urllib.parse import urlencode

import pytest

from fluxon_video.testing import AgentProcess
from tests.helpers import IDENTITIES

pytestmark = pytest.mark.timeout(60)

VIDEO = "bucket/videos/h264_faststart.mp4"
LATENCY_MS = 300


def get(url: str) -> tuple[bytes, float]:
    token = IDENTITIES["alice"]
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    t0 = time.monotonic()
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return body, time.monotonic() - t0


def test_stat_and_read_wait_the_injected_latency(agent_config, export_root):
    agent = AgentProcess(agent_config, ["--inject-latency-ms", str(LATENCY_MS)]).start()
    try:
        query = {"export": "train", "path": VIDEO}
        body, stat_s = get(f"{agent.url}/v1/stat?{urlencode(query)}")
        stat = json.loads(body)
        assert stat["size"] == (export_root / VIDEO).stat().st_size
        query.update(offset=100, length=1000, size=stat["size"], mtime_ns=stat["mtime_ns"],
                     ctime_ns=stat["ctime_ns"], inode=stat["inode"])
        data, read_s = get(f"{agent.url}/v1/read?{urlencode(query)}")
        assert data == (export_root / VIDEO).read_bytes()[100:1100]
    finally:
        agent.stop()
    # A lower bound only: sleeping never makes an answer faster.
    assert stat_s >= LATENCY_MS / 1e3 and read_s >= LATENCY_MS / 1e3


def test_a_negative_latency_is_refused(agent_config):
    from fluxon_video.errors import FluxonFsConfigError
    from fluxon_video.fs.agent import make_app
    from fluxon_video.fs.config import load_config

    with pytest.raises(FluxonFsConfigError, match="inject_latency_ms"):
        make_app(load_config(agent_config), inject_latency_ms=-1)
