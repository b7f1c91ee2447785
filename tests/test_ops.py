"""Operations: listing through the agent, the CLI (ls, stat, index, warm, read), logging."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.testing import AgentProcess, RedisServer
from tests.helpers import IDENTITIES, KV_KEY, make_patcher

H, W = 48, 64


@pytest.fixture(scope="module")
def tree(tmp_path_factory, media):
    """A small export: nested folders, a symlink out of the root, a FIFO, a non-video."""
    root = tmp_path_factory.mktemp("ops") / "root"
    for rel, name in [("a/one.mp4", "h264_faststart.mp4"), ("a/two.webm", "vp9.webm"),
                      ("a/b/three.mp4", "hevc.mp4"), ("c/four.mkv", "h264_bframes.mkv")]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(media.path(name), root / rel)
    (root / "c" / "notes.txt").write_text("not a video")
    (root / "c" / "pipe").parent.mkdir(exist_ok=True)
    os.mkfifo(root / "c" / "pipe")
    outside = root.parent / "secret.mp4"
    shutil.copy(media.path("hevc.mp4"), outside)
    (root / "c" / "escape.mp4").symlink_to(outside)
    (root / "c" / "inside.mp4").symlink_to(root / "a" / "one.mp4")
    return root


FILES = ["a/b/three.mp4", "a/one.mp4", "a/two.webm", "c/four.mkv", "c/inside.mp4", "c/notes.txt"]


@pytest.fixture(scope="module")
def config(tmp_path_factory, tree):
    """A config file for both the agent and CLI clients (alice reads, bob is refused)."""
    def write(redis_url: str | None = None, agent_url: str | None = None,
              ttl_s: int | None = None) -> Path:
        client = (f'[client]\nredis_url = "{redis_url}"\nkv_keys = ["{KV_KEY}"]\n\n'
                  if redis_url else "")
        agent = f'agent_url = "{agent_url}"\n' if agent_url else ""
        agent += f"cache_ttl_s = {ttl_s}\n" if ttl_s else ""
        path = tmp_path_factory.mktemp("ops-config") / "fluxon.toml"
        identities = "\n".join(f'{n} = "{t}"' for n, t in IDENTITIES.items())
        path.write_text(f'{client}[identities]\n{identities}\n\n[[exports]]\nname = "data"\n'
                        f'root = "{tree}"\n{agent}allow = ["alice"]\npiece_size = 16384\n')
        path.chmod(0o600)  # it holds tokens: readable by others, every command would warn
        return path
    return write


@pytest.fixture(scope="module")
def agent(config):
    with AgentProcess(config()) as process:
        yield process


def cli(*args: str, config: Path, identity: str = "alice", check: bool = True,
        timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLUXON_VIDEO_CONFIG": str(config), "FLUXON_VIDEO_IDENTITY": identity}
    proc = subprocess.run([sys.executable, "-m", "fluxon_video", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


# ---- listing ----

def test_listing_through_the_agent_pages_and_checks_access(agent, tree):
    patcher = fv.FluxonFsPatcher(
        exports=[fv.FluxonFsExport("data", str(tree), agent_url=agent.url, allow=["alice"])],
        identities=IDENTITIES, identity="alice")
    with patcher:
        entries = list(patcher.list_files("data"))
        assert [e.relpath for e in entries] == FILES  # sorted walk; no FIFO, no escape
        sizes = {e.relpath: e.size for e in entries}
        assert sizes["a/one.mp4"] == (tree / "a/one.mp4").stat().st_size
        for page_size in (1, 2, 5):  # every page size gives the same listing, no repeats
            paged = list(patcher.client.files.list_files(patcher.identity, "data",
                                                         page_size=page_size))
            assert [e.relpath for e in paged] == FILES
        assert [e.relpath for e in patcher.list_files("data", "a/")] == FILES[:3]
        assert [e.relpath for e in patcher.list_files("data", "a/t")] == ["a/two.webm"]
        assert [e.relpath for e in patcher.list_files("data", pattern="*.mp4")] == \
               ["a/b/three.mp4", "a/one.mp4", "c/inside.mp4"]
        top = list(patcher.list_files("data", "a", recursive=False))
        assert [(e.relpath, e.is_dir) for e in top] == \
               [("a/b", True), ("a/one.mp4", False), ("a/two.webm", False)]
        with pytest.raises(errors.FluxonFsPermissionError):
            list(patcher.list_files("data", identity="bob"))
        with pytest.raises(errors.FluxonFsBadRequestError):
            list(patcher.list_files("data", "../"))
    local = make_patcher(None, tree)  # the same listing in-process
    assert [e.relpath for e in local.list_files("train")] == FILES
    local.close()


# ---- the command line ----

def test_cli_ls_stat_read(agent, tree, config, media, tmp_path):
    path = config(agent_url=agent.url)
    out = cli("ls", "data:a", config=path)
    assert out.stdout.split("\n")[0].endswith("a/b/") and "a/one.mp4" in out.stdout
    rows = [json.loads(line) for line in cli("ls", "data", "-r", "--json", config=path).stdout.splitlines()]
    assert [r["relpath"] for r in rows] == FILES
    stat = json.loads(cli("stat", "data:a/b/three.mp4", "--json", config=path).stdout)
    assert stat["num_frames"] == 72 and stat["codec"] == "hevc"
    assert stat["size"] == (tree / "a/b/three.mp4").stat().st_size
    assert stat["inode"] == (tree / "a/b/three.mp4").stat().st_ino
    text = cli("stat", "data:a/one.mp4", config=path).stdout
    assert "num_frames: 72" in text and "codec: h264" in text
    refused = cli("stat", "data:a/one.mp4", config=path, identity="bob", check=False)
    assert refused.returncode == 1 and "not allowed" in refused.stderr
    assert "Traceback" not in refused.stderr
    not_video = cli("read", "data:c/notes.txt", "--frames", "0", "--out", str(tmp_path),
                    config=path, check=False)
    assert not_video.returncode == 1 and not_video.stderr == (
        "fluxon-video: error: data:c/notes.txt: not a recognised video container\n")
    assert "etag" not in cli("stat", "data:c/notes.txt", config=path).stdout  # files have none
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # --out names a file: no directory can be made there
    not_a_dir = cli("read", "data:a/one.mp4", "--frames", "0", "--out", str(blocked),
                    config=path, check=False)
    assert not_a_dir.returncode == 1 and not_a_dir.stderr == (
        f"fluxon-video: error: {blocked}: cannot write the frames there (File exists)\n")
    bad_config = cli("ls", "data", config=tree / "a/one.mp4", check=False)
    assert bad_config.returncode == 1 and "one.mp4: not a TOML file" in bad_config.stderr
    assert "Traceback" not in bad_config.stderr
    missing = cli("stat", "data:a/nope.mp4", config=path, check=False)
    assert missing.returncode == 1 and "data:a/nope.mp4: no such file" in missing.stderr
    assert missing.stderr.count("a/nope.mp4") == 1, missing.stderr  # the path said once
    out_dir = tmp_path / "frames"
    rows = [json.loads(line) for line in cli(
        "read", "data:a/b/three.mp4", "--frames", "0,8,-1", "--times", "1.5", "--size",
        f"{W}x{H}", "--format", "npy", "--out", str(out_dir), "--json", config=path).stdout.splitlines()]
    ref = media.reference("hevc.mp4", H, W)
    assert [r["frame"] for r in rows] == [0, 8, 71, 36]
    for row in rows:
        np.testing.assert_array_equal(np.load(row["file"]), ref[row["frame"]])
    png = cli("read", "data:a/one.mp4", "--frames", "3", "--size", "x64", "--out",
              str(out_dir), config=path).stdout
    assert (out_dir / "one_000003.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "png" in png
    nothing = cli("ls", "data:nothere", config=path, check=False)
    assert nothing.returncode == 1 and "nothing under data:nothere" in nothing.stderr
    verbose = cli("ls", "data:a", "-v", config=path)  # -v after the command, as before it
    assert "a/one.mp4" in verbose.stdout
    assert cli("--version", config=path).stdout.startswith("fluxon-video ")
    for command in ("ls", "stat", "index", "warm", "read", "agent"):
        assert "usage:" in cli(command, "--help", config=path).stdout


def _warm_stats(path: Path) -> dict:
    return json.loads(cli("warm", "data", "--json", "--no-progress", config=path).stdout)


def test_warm_then_a_new_process_reads_nothing_from_the_agent(agent, tree, config, tmp_path):
    with RedisServer(tmp_path) as redis_server:
        path = config(redis_url=redis_server.url, agent_url=agent.url)
        first = _warm_stats(path)
        assert first["files"] == len(FILES) and first["errors"] == []
        assert first["bytes"] == sum((tree / f).stat().st_size for f in FILES)
        # notes.txt: warmed, but no index; named, with FFmpeg's reason
        assert first["not_video"] == [{"relpath": "c/notes.txt",
                                       "message": "not a recognised video container"}]
        # Each file counted once: notes.txt is "not video" (its bytes warmed), not "warmed".
        assert first["done"] + first["skipped"] + len(first["not_video"]) == len(FILES)
        again = _warm_stats(path)  # resumable: everything is there already
        assert again["bytes"] == 0 and again["pieces"] == 0
        assert again["skipped"] == len(FILES) - 1 and len(again["not_video"]) == 1
        index = json.loads(cli("index", "data", "--json", "--no-progress", config=path).stdout)
        assert index["skipped"] == len(FILES) - 1 and index["done"] == 0
        code = (
            "import json, fluxon_video as fv\n"
            f"p = fv.FluxonFsPatcher.from_config_file({str(path)!r}, identity='alice')\n"
            "total = {}\n"
            "for rel in ['a/one.mp4', 'a/two.webm', 'a/b/three.mp4', 'c/four.mkv']:\n"
            "    with p.open_video_reader('data', rel, 32, 32) as r:\n"
            "        r.read_frames_numpy([0, 20, -1])\n"
            "print(json.dumps(p.stats().as_dict()))\n")
        stats = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                          text=True, check=True).stdout)
        assert stats["remote_bytes"] == 0 and stats["remote_reads"] == 0
        assert stats["index_from_kv"] == 4 and stats["index_scans"] == 0 and stats["kv_hits"] > 0


def test_warm_gives_what_it_finds_another_ttl(agent, config, tmp_path):
    with RedisServer(tmp_path) as redis_server:
        path = config(redis_url=redis_server.url, agent_url=agent.url, ttl_s=3600)
        assert _warm_stats(path)["pieces"] > 0
        r = redis_server.client()
        # What warm stores (pieces, index) takes the TTL asked for; not the stat it shared.
        keys = [k for k in r.keys("*") if b":stat:" not in k]
        assert any(b":piece:" in k for k in keys) and any(b":frameindex-" in k for k in keys)
        assert all(3500 < r.ttl(k) <= 3600 for k in keys)
        for k in keys:
            r.expire(k, 60)  # about to expire
        again = _warm_stats(path)  # a new process: nothing fetched, every entry kept
        assert again["pieces"] == 0 and again["bytes"] == 0
        assert all(3500 < r.ttl(k) <= 3600 for k in keys)


def test_warm_interrupted_then_resumed(tree, config, tmp_path):
    with RedisServer(tmp_path) as redis_server, \
            AgentProcess(config(), ["--inject-latency-ms", "100"]) as slow:
        path = config(redis_url=redis_server.url, agent_url=slow.url)
        env = {**os.environ, "FLUXON_VIDEO_CONFIG": str(path), "FLUXON_VIDEO_IDENTITY": "alice"}
        # The child gets SIGINT as a terminal's Ctrl-C finds it: a process started in the
        # background of a shell without job control (a CI job) inherits it ignored, and
        # Python then keeps ignoring it. A handler here is the default in the child.
        inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            proc = subprocess.Popen([sys.executable, "-m", "fluxon_video", "warm", "data",
                                     "--json", "--no-progress", "--workers", "1"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=env)
        finally:
            signal.signal(signal.SIGINT, inherited)
        deadline = time.monotonic() + 60
        while redis_server.client().dbsize() < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, "the warm run ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr
        first = json.loads(stdout)
        assert first["interrupted"] and 0 < first["pieces"]
        total_pieces = sum(-(-(tree / f).stat().st_size // 16384) for f in FILES)
        assert first["pieces"] < total_pieces
        rest = _warm_stats(path)
        assert not rest["interrupted"] and rest["errors"] == []
        assert first["pieces"] + rest["pieces"] == total_pieces  # nothing fetched twice
        assert _warm_stats(path)["pieces"] == 0


# ---- logging ----

def test_redis_trouble_is_logged(media, tree, tmp_path, caplog):
    server = RedisServer(tmp_path).start()
    try:
        with make_patcher(None, tree, server.url, piece_size=16384,
                          client={"redis_retry_after_s": 0.2, "redis_timeout_s": 0.2}) as patcher:
            caplog.set_level(logging.INFO, logger="fluxon_video")
            with patcher.open_video_reader("train", "a/one.mp4", H, W) as reader:
                reader.read_frames_numpy([0])
            server.stop()
            with patcher.open_video_reader("train", "a/two.webm", H, W) as reader:
                reader.read_frames_numpy([0, 30])
            warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                        and r.name == "fluxon_video.kv"]
            assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()
            server.start()
            time.sleep(0.3)
            with patcher.open_video_reader("train", "a/b/three.mp4", H, W) as reader:
                reader.read_frames_numpy([0, 30])
            assert any(r.levelno == logging.INFO and "answers again" in r.getMessage()
                       for r in caplog.records if r.name == "fluxon_video.kv")
    finally:
        server.stop()


def test_logging_is_silent_by_default():
    code = ("import logging, fluxon_video\n"
            "log = logging.getLogger('fluxon_video')\n"
            "assert any(isinstance(h, logging.NullHandler) for h in log.handlers)\n"
            "log.getChild('kv').warning('nobody sees this')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stderr == ""


def test_an_unreachable_kv_warns_once_by_default(tree):
    """Logging is silent by default, but a wrong redis_url means every byte comes
    from the store: a RuntimeWarning says so, once per process."""
    code = ("import warnings, fluxon_video as fv\n"
            "from tests.helpers import make_patcher\n"
            "warnings.simplefilter('default')\n"
            f"p = make_patcher(None, {str(tree)!r}, 'redis://:hunter2@127.0.0.1:1/0',\n"
            "                  client={'redis_retry_after_s': 0.01})\n"
            "for name in ('a/one.mp4', 'a/two.webm', 'a/b/three.mp4'):\n"
            "    with p.open_video_reader('train', name, 8, 8) as r:\n"
            "        r.read_frames_numpy([0])\n"
            "p.close()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[1])
    assert proc.stderr.count("RuntimeWarning") == 1, proc.stderr
    assert "redis://:***@127.0.0.1:1/0 is unreachable" in proc.stderr
    assert "hunter2" not in proc.stderr and "client.redis_url" in proc.stderr


def test_the_training_example_lists_through_the_export(tree, tmp_path):
    """examples/train_loader.py: videos listed through the export (not globbed on
    this disk), the identity from $FLUXON_VIDEO_IDENTITY, --size as WxH."""
    config = tmp_path / "fluxon.toml"
    identities = "\n".join(f'{n} = "{t}"' for n, t in IDENTITIES.items())
    config.write_text(f'[identities]\n{identities}\n\n[[exports]]\nname = "data"\n'
                      f'root = "{tree}"\nallow = ["alice"]\n')
    example = Path(__file__).resolve().parents[1] / "examples" / "train_loader.py"
    args = [sys.executable, str(example), "--export", "data", "--glob", "a/*.mp4", "--epochs",
            "1", "--workers", "1", "--batch-size", "2", "--clips-per-epoch", "4", "--size",
            "64x48"]
    env = {**os.environ, "FLUXON_VIDEO_CONFIG": str(config)}
    done = subprocess.run(args, capture_output=True, text=True, timeout=180,
                          env={**env, "FLUXON_VIDEO_IDENTITY": "alice"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("2 videos") and "epoch 0: 4 clips" in done.stdout
    anonymous = subprocess.run(args, capture_output=True, text=True, timeout=180, env=env)
    assert anonymous.returncode == 1 and "pass --identity" in anonymous.stderr
    assert "Traceback" not in anonymous.stderr


def test_progress_in_a_log_is_plain_lines(agent, config):
    """stderr is a pipe here, as in a CI log: no bar, a plain line (with the
    same units as the summary) at least at the end."""
    done = cli("index", "data", config=config(agent_url=agent.url))
    lines = [line for line in done.stderr.splitlines() if line.startswith("index: ")]
    assert lines and lines[-1].endswith(f"of {len(FILES)} (100%)"), done.stderr
    assert "\r" not in done.stderr


def test_doctor_gives_a_verdict_per_link(agent, config, tmp_path):
    from fluxon_video.testing import free_port

    with RedisServer(tmp_path) as redis_server:
        healthy = cli("doctor", "--json", config=config(redis_server.url, agent.url))
    checks = {c["check"]: c for c in map(json.loads, healthy.stdout.splitlines())}
    assert [name for name in checks] == ["extension", "ffmpeg libs", "decode", "config",
                                         "identity", "kv", "data: agent", "data: list",
                                         "data: stat", "data: read"]
    assert all(c["ok"] for c in checks.values()), checks
    assert "read 4096 bytes" in checks["data: read"]["detail"]
    dead = f"http://127.0.0.1:{free_port()}"
    broken = cli("doctor", config=config("redis://127.0.0.1:1/0", dead), check=False)
    assert broken.returncode == 1
    verdicts = {line.split()[1]: line.split()[0] for line in broken.stdout.splitlines()}
    assert verdicts["kv"] == "FAIL" and "check client.redis_url" in broken.stdout
    assert "FAIL data: agent" in broken.stdout and "data: list" not in broken.stdout
    refused = cli("doctor", config=config(agent_url=agent.url), identity="bob", check=False)
    assert refused.returncode == 1 and "FAIL data: list" in refused.stdout
    assert "not allowed" in refused.stdout
