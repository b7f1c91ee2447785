from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.media import MediaLibrary
from tests.servers import AgentProcess, RedisServer

IDENTITIES = {"alice": "token-alice", "bob": "token-bob"}
EXPORT_FILES = ["h264_faststart.mp4", "h264_moov_end.mp4", "hevc.mp4", "vp9.webm", "audio_only.m4a"]


@pytest.fixture(scope="session")
def media(tmp_path_factory) -> MediaLibrary:
    return MediaLibrary(tmp_path_factory.mktemp("media"))


@pytest.fixture(scope="session")
def export_root(tmp_path_factory, media) -> Path:
    """An export tree: videos in a nested folder, a garbage file, a directory, a symlink out."""
    root = tmp_path_factory.mktemp("export") / "root"
    videos = root / "bucket" / "videos"
    videos.mkdir(parents=True)
    for name in EXPORT_FILES:
        shutil.copy(media.path(name), videos / name)
    (videos / "garbage.mp4").write_bytes(os.urandom(50_000))
    (videos / "a_directory.mp4").mkdir()
    secret = root.parent / "secret.mp4"
    shutil.copy(media.path("h264_faststart.mp4"), secret)
    (videos / "escape.mp4").symlink_to(secret)
    (videos / "inside_link.mp4").symlink_to(videos / "hevc.mp4")
    return root


def agent_config_text(root: Path) -> str:
    identities = "\n".join(f'{name} = "{token}"' for name, token in IDENTITIES.items())
    return (f"[identities]\n{identities}\n\n"
            f'[[exports]]\nname = "train"\nroot = "{root}"\nallow = ["alice"]\n\n'
            f'[[exports]]\nname = "shared"\nroot = "{root}"\nallow = ["alice", "bob"]\n')


@pytest.fixture(scope="session")
def agent_config(tmp_path_factory, export_root) -> Path:
    path = tmp_path_factory.mktemp("agent") / "agent.toml"
    path.write_text(agent_config_text(export_root))
    return path


@pytest.fixture(scope="session")
def agent(agent_config):
    process = AgentProcess(agent_config).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server) -> str:
    redis_server.client().flushall()
    return redis_server.url
