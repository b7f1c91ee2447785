from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fluxon_video.testing import AgentProcess, RedisServer, S3Server
from tests.helpers import agent_config_text
from tests.media import MediaLibrary

EXPORT_FILES = ["h264_faststart.mp4", "h264_moov_end.mp4", "hevc.mp4", "vp9.webm", "audio_only.m4a"]


@pytest.fixture(scope="session", autouse=True)
def own_cache_dir(tmp_path_factory) -> Iterator[Path]:
    """Node-local caches (fluxon_video.lerobot's image columns) in the session's
    temporary folder, not the user's ~/.cache."""
    folder = tmp_path_factory.mktemp("fluxon-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLUXON_VIDEO_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="session")
def media(tmp_path_factory, worker_id) -> MediaLibrary:
    """The session's test videos; under pytest-xdist one folder for every worker
    (the base temp's parent is the run's), so each clip is encoded once."""
    if worker_id == "master":
        return MediaLibrary(tmp_path_factory.mktemp("media"))
    shared = tmp_path_factory.getbasetemp().parent / "media"
    shared.mkdir(exist_ok=True)
    return MediaLibrary(shared)


@pytest.fixture(scope="session")
def export_root(tmp_path_factory, media) -> Path:
    """An export tree: videos in a nested folder, a garbage file, a directory, a symlink out."""
    root = tmp_path_factory.mktemp("export") / "root"
    videos = root / "bucket" / "videos"
    videos.mkdir(parents=True)
    for name in EXPORT_FILES:
        shutil.copy(media.path(name), videos / name)
    # Seeded: some random byte strings probe as a container (an MP3 frame sync,
    # a TS packet) and decode as damage instead of "not a recognised" one.
    (videos / "garbage.mp4").write_bytes(np.random.default_rng(1).bytes(50_000))
    (videos / "a_directory.mp4").mkdir()
    secret = root.parent / "secret.mp4"
    shutil.copy(media.path("h264_faststart.mp4"), secret)
    (videos / "escape.mp4").symlink_to(secret)
    (videos / "inside_link.mp4").symlink_to(videos / "hevc.mp4")
    return root


@pytest.fixture(scope="session")
def agent_config(tmp_path_factory, export_root) -> Path:
    path = tmp_path_factory.mktemp("agent") / "agent.toml"
    path.write_text(agent_config_text(export_root))
    path.chmod(0o600)  # it holds tokens: readable by others, loading it warns
    return path


@pytest.fixture(scope="session")
def agent(agent_config):
    with AgentProcess(agent_config) as process:
        yield process


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def redis_url(redis_server) -> str:
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server (moto's) for the whole session."""
    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        yield server
