"""Exports whose root is a bucket, against a real S3-compatible server (moto's).

The server runs as its own process on a loopback port (fluxon_video.testing
.S3Server); the generated clips are uploaded under a prefix. Frames are
checked against the ffmpeg CLI like a directory export's; the file version
is the object's ETag, so an overwritten object fails reads and never mixes
with the old one's pieces.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.fs.config import FluxonFsExport
from fluxon_video.testing import AgentProcess
from tests.helpers import IDENTITIES, KV_KEY, make_patcher
from tests.store_faults import FaultyRelay

H, W = 36, 64
BUCKET = "videos"
CLIPS = ["h264_faststart.mp4", "h264_moov_end.mp4", "hevc.mp4", "vp9.webm"]
ROOT = f"s3://{BUCKET}/train"
ROOT_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bucket(s3_server, media):
    """The clips under train/clips/, one under train/cam1/, and a copy to overwrite."""
    objects = {f"train/clips/{name}": media.path(name) for name in CLIPS}
    objects["train/cam1/front.mp4"] = media.path("h264_faststart.mp4")
    s3_server.upload(BUCKET, objects)
    return s3_server


def s3_patcher(s3, redis_url=None, agent_url=None, **options):
    """make_patcher's exports, rooted in the bucket (in-process unless agent_url)."""
    store = {} if agent_url else s3.store_options()
    return make_patcher(agent_url, ROOT, redis_url, store=store, store_timeout_s=5.0,
                        store_retries=1, **options)


@pytest.mark.parametrize("name", CLIPS)
def test_frames_from_a_bucket_equal_the_ffmpeg_cli(media, bucket, name):
    expected = media.reference(name, H, W)
    indices = [0, 7, len(expected) // 2, len(expected) - 1]
    with s3_patcher(bucket) as patcher, patcher.open_video_reader(
            "train", f"clips/{name}", H, W) as reader:
        assert len(reader) == len(expected)
        frames = reader.read_frames_numpy(indices)
    assert np.array_equal(frames, expected[indices])


def test_the_version_is_the_objects_etag(bucket):
    head = bucket.client().head_object(Bucket=BUCKET, Key="train/clips/hevc.mp4")
    with s3_patcher(bucket) as patcher:
        version = patcher.file_version("train", "clips/hevc.mp4")
    assert version.etag == head["ETag"] and version.size == head["ContentLength"]
    assert version.mtime_ns == int(head["LastModified"].timestamp()) * 10**9


def test_a_second_node_reads_nothing_from_the_store(media, bucket, agent_config, redis_url,
                                                   tmp_path):
    """Through the agent (which alone holds the store's options), cold then warm."""
    config = tmp_path / "agent.toml"
    store = ", ".join(f"{k} = {json.dumps(v)}" for k, v in bucket.store_options().items())
    identities = "\n".join(f'{n} = "{t}"' for n, t in IDENTITIES.items())
    config.write_text(f'[identities]\n{identities}\n\n[[exports]]\nname = "train"\n'
                      f'root = "{ROOT}"\nallow = ["alice"]\nstore = {{ {store} }}\n')
    expected = media.reference("hevc.mp4", H, W)
    with AgentProcess(config) as agent:
        with s3_patcher(bucket, redis_url, agent.url) as cold:
            with cold.open_video_reader("train", "clips/hevc.mp4", H, W) as reader:
                assert np.array_equal(reader.read_frames_numpy([0, 40]), expected[[0, 40]])
                assert reader.last_stats.remote_bytes > 0
            cold.client.backfill.wait_idle()
        with s3_patcher(bucket, redis_url, agent.url) as warm:
            with warm.open_video_reader("train", "clips/hevc.mp4", H, W) as reader:
                assert np.array_equal(reader.read_frames_numpy([0, 40]), expected[[0, 40]])
                assert reader.last_stats.remote_bytes == 0 and reader.last_stats.kv_hits > 0


def test_an_overwritten_object_fails_reads_and_never_mixes(media, bucket, redis_url):
    key = "train/scratch/overwritten.mp4"
    first, second = media.path("h264_moov_end.mp4"), media.path("h264_faststart.mp4")
    bucket.upload(BUCKET, {key: first})
    with s3_patcher(bucket, redis_url, metadata_cache_ttl_ms=0, piece_size=16 << 10) as patcher:
        reader = patcher.open_video_reader("train", "scratch/overwritten.mp4", H, W)
        reader.read_frames_numpy([0])
        bucket.upload(BUCKET, {key: second})
        with pytest.raises(errors.FluxonFsFileChangedError, match="etag"):
            reader.read_frames_numpy([70])
        reader.close()
        with patcher.open_video_reader("train", "scratch/overwritten.mp4", H, W) as fresh:
            assert fresh.version.etag != reader.version.etag
            expected = media.reference("h264_faststart.mp4", H, W)
            assert np.array_equal(fresh.read_frames_numpy([0, 70]), expected[[0, 70]])


def test_a_read_names_the_etag_it_opened(bucket):
    """The store itself refuses a range of another version (If-Match): no metadata
    cache in between can make a reader mix two objects."""
    from fluxon_video.fs.object_origin import ObjectStoreOrigin

    key = "train/scratch/if_match.bin"
    bucket.upload(BUCKET, {key: b"a" * 1000})
    export = FluxonFsExport("train", ROOT, allow=["alice"], store=bucket.store_options())
    origin = ObjectStoreOrigin(export)
    version = origin.stat("scratch/if_match.bin", "train:scratch/if_match.bin")
    assert origin.read_range("scratch/if_match.bin", "n", 10, 5, version) == b"aaaaa"
    bucket.upload(BUCKET, {key: b"b" * 1000})  # same size, new ETag
    with pytest.raises(errors.FluxonFsFileChangedError):
        origin.read_range("scratch/if_match.bin", "n", 10, 5, version)


def test_a_cold_open_takes_the_head_with_the_stat_unless_fetches_are_claimed(media, bucket):
    """Claimed fetches (the object-store default) fetch every piece once across
    nodes, so no stat brings one; without claims, the stat brings the first."""
    from fluxon_video.fs.object_origin import ObjectStoreOrigin

    expected = media.reference("h264_moov_end.mp4", H, W)
    size = media.path("h264_moov_end.mp4").stat().st_size
    piece = 16 << 10
    for claims in (None, False):
        with s3_patcher(bucket, single_flight_across_nodes=claims, piece_size=piece) as patcher:
            with patcher.open_video_reader("train", "clips/h264_moov_end.mp4", H, W) as reader:
                assert np.array_equal(reader.read_frames_numpy([0, 70]), expected[[0, 70]])
                stats = reader.last_stats
        assert stats.head_bytes == (0 if claims is None else piece)
    # The origin's head: of the version its HEAD named, the whole object when shorter.
    export = FluxonFsExport("train", ROOT, allow=["alice"], store=bucket.store_options())
    origin = ObjectStoreOrigin(export)
    version, head = origin.stat_head("clips/h264_moov_end.mp4", "n", 1000)
    assert version.size == size and head == media.path("h264_moov_end.mp4").read_bytes()[:1000]
    version, head = origin.stat_head("clips/h264_moov_end.mp4", "n", size + 5)
    assert len(head) == size


def test_missing_and_deleted_objects(bucket):
    key = "train/scratch/deleted.mp4"
    bucket.upload(BUCKET, {key: b"\0" * 5000})
    with s3_patcher(bucket, metadata_cache_ttl_ms=0) as patcher:
        with pytest.raises(errors.FluxonFsNotFoundError, match="no such object") as missing:
            patcher.open_video_reader("train", "clips/none.mp4", H, W)
        assert "127.0.0.1" not in str(missing.value)  # no store URL in messages
        version = patcher.file_version("train", "scratch/deleted.mp4")
        bucket.client().delete_object(Bucket=BUCKET, Key=key)
        with pytest.raises(errors.FluxonFsNotFoundError):
            patcher.file_version("train", "scratch/deleted.mp4")
    assert version.size == 5000


def test_identities_and_relpaths_are_checked_as_for_directories(bucket):
    with s3_patcher(bucket, identity="bob") as patcher:
        with pytest.raises(errors.FluxonFsPermissionError):
            patcher.open_video_reader("train", "clips/hevc.mp4", H, W)
        assert [e.relpath for e in patcher.list_files("shared", "clips/hevc")] == [
            "clips/hevc.mp4"]
        with pytest.raises(errors.FluxonFsBadRequestError):
            patcher.file_version("shared", "../outside.mp4")


def test_listing_pages_through_the_store(bucket):
    expected = sorted([f"clips/{name}" for name in CLIPS] + ["cam1/front.mp4"])
    with s3_patcher(bucket) as patcher:
        everything = [e.relpath for e in patcher.client.files.list_files(
            patcher.identity, "train", page_size=2)]
        assert [r for r in everything if not r.startswith("scratch/")] == expected
        top = list(patcher.list_files("train", recursive=False))
        assert [(e.relpath, e.is_dir) for e in top if e.relpath != "scratch"] == [
            ("cam1", True), ("clips", True)]
        assert [e.relpath for e in patcher.list_files("train", "clips/h264_")] == [
            "clips/h264_faststart.mp4", "clips/h264_moov_end.mp4"]
        assert [e.relpath for e in patcher.list_files("train", pattern="*.webm")] == [
            "clips/vp9.webm"]


def test_a_store_that_stops_answering_fails_reads_promptly(media, tmp_path):
    from fluxon_video.testing import S3Server

    with S3Server(tmp_path) as server:
        server.upload(BUCKET, {"train/clips/hevc.mp4": media.path("hevc.mp4")})
        patcher = s3_patcher(server, metadata_cache_ttl_ms=0, piece_size=16 << 10,
                             client={"readahead_pages": 0})
        with patcher, patcher.open_video_reader("train", "clips/hevc.mp4", H, W) as reader:
            reader.read_frames_numpy([0])
            server.stop()
            with pytest.raises((errors.FluxonFsIOError, errors.FluxonFsTimeoutError)):
                reader.read_frames_numpy([70])


def test_the_cli_lists_stats_warms_and_reads_a_bucket(media, bucket, redis_url, tmp_path):
    config = tmp_path / "fluxon.toml"
    store = ", ".join(f"{k} = {json.dumps(v)}" for k, v in bucket.store_options().items())
    config.write_text(f'[client]\nredis_url = "{redis_url}"\nkv_keys = ["{KV_KEY}"]\n\n'
                      f'[identities]\nalice = "t"\n\n'
                      f'[[exports]]\nname = "s3"\nroot = "{ROOT}"\nallow = ["alice"]\n'
                      f'store = {{ {store} }}\n')

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "fluxon_video", *args, "--config",
                               str(config), "--json"], capture_output=True, text=True,
                              check=True).stdout

    listed = [json.loads(line)["relpath"] for line in cli("ls", "s3:clips", "-r").splitlines()]
    assert listed == sorted(f"clips/{name}" for name in CLIPS)
    stat = json.loads(cli("stat", "s3:clips/vp9.webm"))
    assert stat["etag"] and stat["num_frames"] == len(media.reference("vp9.webm", H, W))
    warmed = json.loads(cli("warm", "s3", "--glob", "clips/h*", "--no-progress"))
    assert warmed["done"] == 3 and warmed["errors"] == []
    rows = [json.loads(line) for line in cli("read", "s3:clips/hevc.mp4", "--frames", "0,5",
                                             "--size", f"{W}x{H}", "--format", "npy",
                                             "--out", str(tmp_path / "out")).splitlines()]
    expected = media.reference("hevc.mp4", H, W)
    assert [np.array_equal(np.load(r["file"]), expected[r["frame"]]) for r in rows] == [True] * 2
    with fv.FluxonFsPatcher.from_config_file(config, "alice") as patcher:
        with patcher.open_video_reader("s3", "clips/h264_moov_end.mp4", H, W) as reader:
            reader.read_frames_numpy([0, 60])
            assert reader.last_stats.remote_bytes == 0  # warm put every piece in the KV


# ---- faults the store itself reports (injected by a relay in front of it) ----

@pytest.fixture
def relay(bucket):
    with FaultyRelay(bucket.url) as relay:
        yield relay


def relayed_patcher(bucket, relay, **options):
    store = {**bucket.store_options(), "endpoint": relay.url}
    return make_patcher(None, ROOT, store=store, store_timeout_s=5.0, **options)


def test_throttling_is_retried_with_backoff(media, bucket, relay):
    expected = media.reference("vp9.webm", H, W)
    with relayed_patcher(bucket, relay, store_retries=3) as patcher:
        relay.fail(503, "/clips/vp9.webm", 2)  # SlowDown twice: the third try is served
        with patcher.open_video_reader("train", "clips/vp9.webm", H, W) as reader:
            assert np.array_equal(reader.read_frames_numpy([3]), expected[[3]])
    assert relay.refused == 2


def test_throttling_that_outlasts_the_retries_fails_cleanly(bucket, relay):
    with relayed_patcher(bucket, relay, store_retries=1) as patcher:
        relay.fail(503, "/clips/hevc.mp4", 10)
        with pytest.raises(errors.FluxonFsIOError) as failed:
            patcher.open_video_reader("train", "clips/hevc.mp4", H, W)
    assert relay.refused == 2  # the request and its one retry
    assert "127.0.0.1" not in str(failed.value) and "secret" not in str(failed.value)


def test_access_the_store_denies_is_a_permission_error(bucket, relay):
    with relayed_patcher(bucket, relay, store_retries=3) as patcher:
        relay.fail(403, "/clips/hevc.mp4", 10)
        with pytest.raises(errors.FluxonFsPermissionError, match="refused access") as denied:
            patcher.file_version("train", "clips/hevc.mp4")
    assert relay.refused == 1  # a refusal is not retried
    assert bucket.KEY_ID not in str(denied.value)


# ---- several nodes, one origin read per piece ----

def run_nodes(bucket, relay, redis_url, relpath, claims, barrier: Path, nodes=3):
    """``nodes`` processes that start reading together (a barrier, not a clock:
    on a loaded machine one may take seconds longer to start than another)."""
    barrier.mkdir()
    spec = {"root": ROOT, "redis_url": redis_url, "relpath": relpath, "claims": claims,
            "store": {**bucket.store_options(), "endpoint": relay.url}, "piece_size": 16 << 10,
            "frames": [0, 20, 40, 60], "barrier": str(barrier)}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.s3_node", json.dumps(spec)],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT_DIR)
             for _ in range(nodes)]
    deadline = time.monotonic() + 120
    while len(list(barrier.glob("ready-*"))) < nodes and time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            break  # one failed: communicate() below shows it
        time.sleep(0.01)
    (barrier / "go").touch()
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return outs


@pytest.mark.parametrize("claims", [True, False])
def test_nodes_missing_the_same_pieces_read_each_from_the_store_once(media, bucket, relay,
                                                                     redis_url, claims, tmp_path):
    relpath = f"scratch/three_nodes_{claims}.mp4"
    data = media.path("h264_moov_end.mp4").read_bytes()
    bucket.upload(BUCKET, {f"train/{relpath}": data})
    outs = run_nodes(bucket, relay, redis_url, relpath, claims, tmp_path / "barrier")
    fetched = sum(o["remote_bytes"] for o in outs)
    gets = [p for m, p in relay.forwarded if m == "GET" and relpath in p]
    if claims:
        assert fetched <= len(data)  # every byte of the file at most once, over three nodes
    else:
        assert fetched > 2 * len(data) // 2 and len(gets) >= 3  # each node on its own


def test_a_versioned_bucket_keys_by_version_id(bucket):
    """On a versioned bucket the version id joins the ETag: a read names the
    version it opened, and gets that version's bytes even after an overwrite."""
    from fluxon_video.fs.object_origin import ObjectStoreOrigin

    client = bucket.client()
    client.create_bucket(Bucket="versioned")
    client.put_bucket_versioning(Bucket="versioned",
                                 VersioningConfiguration={"Status": "Enabled"})
    bucket.upload("versioned", {"train/a.bin": b"old!" * 1000})
    export = FluxonFsExport("train", "s3://versioned/train", allow=["alice"],
                            store=bucket.store_options())
    origin = ObjectStoreOrigin(export)
    old = origin.stat("a.bin", "train:a.bin")
    assert "#" in old.etag
    bucket.upload("versioned", {"train/a.bin": b"new!" * 1000})
    new = origin.stat("a.bin", "train:a.bin")
    assert new != old and new.etag.split("#")[1] != old.etag.split("#")[1]
    assert origin.read_range("a.bin", "n", 0, 4, old) == b"old!"
    assert origin.read_range("a.bin", "n", 0, 4, new) == b"new!"


# ---- a plain HTTP origin ----

@pytest.fixture
def http_origin(media, tmp_path):
    """aiohttp's static file server (Range, ETag and If-Match) over a directory."""
    import asyncio
    import threading

    from aiohttp import web

    from fluxon_video.testing import free_port

    root = tmp_path / "site"
    (root / "clips").mkdir(parents=True)
    for name in ("hevc.mp4", "vp9.webm"):
        (root / "clips" / name).write_bytes(media.path(name).read_bytes())
    port, loop = free_port(), asyncio.new_event_loop()
    app = web.Application()
    app.router.add_static("/", root)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}", root
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(runner.cleanup())


def test_an_http_origin_reads_exact_frames_and_refuses_a_changed_file(media, http_origin):
    url, root = http_origin
    with make_patcher(None, url, store={"allow_http": True}, metadata_cache_ttl_ms=0,
                      piece_size=16 << 10) as patcher:
        expected = media.reference("vp9.webm", H, W)
        with patcher.open_video_reader("train", "clips/vp9.webm", H, W) as reader:
            assert np.array_equal(reader.read_frames_numpy([0, 40]), expected[[0, 40]])
            assert reader.version.etag
        with pytest.raises(errors.FluxonFsBadRequestError, match="cannot list"):
            list(patcher.list_files("train"))
        with patcher.open_video_reader("train", "clips/hevc.mp4", H, W) as reader:
            reader.read_frames_numpy([0])
            (root / "clips" / "hevc.mp4").write_bytes(media.path("h264_faststart.mp4")
                                                       .read_bytes())
            with pytest.raises(errors.FluxonFsFileChangedError):
                reader.read_frames_numpy([60])
