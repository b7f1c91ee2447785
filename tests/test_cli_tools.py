"""The command line's tools and messages (issue 35, items 11, 12 and 14).

Real parts throughout: a redis-server stopped under `index`, the moto S3
server (tests/conftest.py's s3_server) behind exports rooted in a bucket,
the CLI run as a subprocess, and the audio a `read --audio` writes checked
against the ffmpeg CLI's decode of the same span.

- `index` with the KV down fails as `warm` does; `warm` counts each file once.
- URIs (s3://bucket/prefix/key, absolute paths) resolve to (export, relpath)
  by the configured roots, in the API and on the command line; a URI under
  no root is refused naming the closest roots; a relpath holding a URI is
  refused, not mangled into s3:/bucket/...
- `stat` prints an object's ETag and version id, not a file's ctime and
  inode; its audio is one line; `versions` and `doctor` (with no config too)
  name libswresample; `doctor` keeps the causes of failures.
- reprs of clips and batches show shapes, not arrays.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import wave
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.fs.config import FluxonFsConfig, FluxonFsExport
from fluxon_video.testing import RedisServer, free_port
from tests.helpers import IDENTITIES, KV_KEY

BUCKET = "cli-tools"
ROOT = f"s3://{BUCKET}/train"
H, W = 48, 64
ROOT_DIR = Path(__file__).resolve().parents[1]


# ---- the parts ----

@pytest.fixture(scope="module")
def av_clip(tmp_path_factory) -> Path:
    """2 s of 25 fps H.264 with stereo 44.1 kHz AAC (a tone), made by the ffmpeg CLI."""
    path = tmp_path_factory.mktemp("cli-tools-av") / "av.mp4"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=64x48:rate=25", "-f", "lavfi", "-i",
                    "sine=f=330:r=44100,aformat=channel_layouts=stereo", "-t", "2",
                    "-c:v", "libx264", "-g", "25", "-c:a", "aac", str(path)], check=True)
    return path


@pytest.fixture(scope="module")
def tree(tmp_path_factory, media, av_clip) -> Path:
    """A directory export: three videos (one with audio) and a file that is no video."""
    root = tmp_path_factory.mktemp("cli-tools") / "root"
    (root / "a").mkdir(parents=True)
    shutil.copy(media.path("h264_faststart.mp4"), root / "a" / "one.mp4")
    shutil.copy(media.path("vp9.webm"), root / "a" / "two.webm")
    shutil.copy(av_clip, root / "av.mp4")
    (root / "notes.txt").write_text("not a video")
    return root


VIDEOS = 3  # in tree
FILES = 4


@pytest.fixture(scope="module")
def bucket(s3_server, media, av_clip):
    s3_server.upload(BUCKET, {"train/clips/one.mp4": media.path("h264_faststart.mp4"),
                              "train/clips/av.mp4": av_clip,
                              "val/other.mp4": media.path("h264_faststart.mp4")})
    return s3_server


def write_config(path: Path, exports: list[dict], redis_url: str | None = None) -> Path:
    """A TOML config of in-process exports (a dict each: name, root, store ...)."""
    lines = []
    if redis_url:
        lines += ["[client]", f'redis_url = "{redis_url}"', f'kv_keys = ["{KV_KEY}"]',
                  "redis_retry_after_s = 0.2", ""]
    lines += ["[identities]", *(f'{n} = "{t}"' for n, t in IDENTITIES.items()), ""]
    for export in exports:
        lines.append("[[exports]]")
        for key, value in export.items():
            if isinstance(value, dict):
                value = "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()) + " }"
            else:
                value = json.dumps(value)
            lines.append(f"{key} = {value}")
        lines.append("")
    path.write_text("\n".join(lines))
    path.chmod(0o600)  # tokens and store secrets: readable by others, every command warns
    return path


def s3_export(s3, name: str = "train", root: str = ROOT, **options) -> dict:
    return {"name": name, "root": root, "allow": ["alice"], "store": s3.store_options(),
            "store_timeout_s": 5.0, "store_retries": 1, **options}


def cli(*args: str, config: Path | None, check: bool = True, env: dict | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("FLUXON_VIDEO_CONFIG",)}
    if config is not None:
        base["FLUXON_VIDEO_CONFIG"] = str(config)
    base["FLUXON_VIDEO_IDENTITY"] = "alice"
    proc = subprocess.run([sys.executable, "-m", "fluxon_video", *args], capture_output=True,
                          text=True, env={**base, **(env or {})}, timeout=timeout,
                          cwd=ROOT_DIR)
    if check:
        assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


# ---- 11: index with the KV down; warm's counts ----

def test_index_with_the_kv_down_fails_as_warm_does(tree, tmp_path):
    server = RedisServer(tmp_path).start()
    try:
        config = write_config(tmp_path / "fluxon.toml",
                              [{"name": "data", "root": str(tree), "allow": ["alice"]}],
                              server.url)
        healthy = json.loads(cli("index", "data", "--json", "--no-progress",
                                 config=config).stdout)
        assert healthy["done"] == VIDEOS and healthy["errors"] == []
        stored = [k for k in server.client().keys("*") if b"frameindex" in k]
        assert len(stored) == VIDEOS  # what it reports as indexed is in Redis
        server.client().flushall()
        server.stop()
        down = cli("index", "data", "--no-progress", config=config, check=False)
        assert down.returncode == 1, down.stdout
        # Every file is an error, as in warm: no scan whose index could not be stored.
        assert down.stdout.startswith(f"{FILES} files: 0 indexed, 0 already in the KV, "
                                      f"0 not video, {FILES} errors")
        for name in ("a/one.mp4", "a/two.webm", "av.mp4", "notes.txt"):
            assert f"  error: {name}: the KV is unreachable" in down.stderr, down.stderr
            assert down.stderr.count(name) == 1  # the relpath said once per line
        as_json = json.loads(cli("index", "data", "--json", "--no-progress", config=config,
                                 check=False).stdout)
        assert as_json["done"] == 0 and len(as_json["errors"]) == FILES
        warm = cli("warm", "data", "--no-progress", config=config, check=False)
        assert warm.returncode == 1 and "the KV is unreachable" in warm.stderr
    finally:
        server.stop()


def test_warm_counts_each_file_once(tree, tmp_path):
    with RedisServer(tmp_path) as server:
        config = write_config(tmp_path / "fluxon.toml",
                              [{"name": "data", "root": str(tree), "allow": ["alice"],
                                "piece_size": 16384}], server.url)
        first = json.loads(cli("warm", "data", "--json", "--no-progress", config=config).stdout)
        counted = first["done"] + first["skipped"] + len(first["not_video"]) + len(first["errors"])
        assert counted == first["files"] == FILES, first
        assert first["not_video"] == [{"relpath": "notes.txt",
                                       "message": "not a recognised video container"}]
        again = cli("warm", "data", "--no-progress", config=config)
        assert again.stdout.startswith(f"{FILES} files: 0 warmed, {FILES - 1} already in the KV, "
                                       "1 not video (bytes warmed, no index), 0 errors")
        # A prefix (or a URI) narrows a run to what is under it.
        narrowed = json.loads(cli("index", "data:a", "--json", "--no-progress",
                                  config=config).stdout)
        assert narrowed["files"] == 2 and narrowed["skipped"] == 2


# ---- 12: URIs ----

def _config(*exports: FluxonFsExport) -> FluxonFsConfig:
    return FluxonFsConfig.build(exports, IDENTITIES)


def test_uris_resolve_by_the_longest_root():
    from fluxon_video.fs.uris import resolve_uri

    config = _config(
        FluxonFsExport("train", "s3://videos/train", allow=["alice"]),
        FluxonFsExport("clips", "s3://videos/train/clips/", allow=["alice"]),
        FluxonFsExport("gcs", "gs://videos/train", allow=["alice"]),
        FluxonFsExport("local", "/data/videos", allow=["alice"]),
        FluxonFsExport("team-a", "/data/shared", allow=["alice"]),
        FluxonFsExport("team-b", "/data/shared", allow=["bob"]),
    )
    assert resolve_uri(config, "s3://videos/train/cam1/a.mp4") == ("train", "cam1/a.mp4")
    assert resolve_uri(config, "s3://videos/train/clips/x/b.mp4") == ("clips", "x/b.mp4")
    assert resolve_uri(config, "S3A://videos/train//cam1/./a.mp4") == ("train", "cam1/a.mp4")
    assert resolve_uri(config, "gs://videos/train/a.mp4") == ("gcs", "a.mp4")
    assert resolve_uri(config, "s3://videos/train/cam1/") == ("train", "cam1/")  # a prefix
    assert resolve_uri(config, "s3://videos/train") == ("train", "")  # the root itself
    assert resolve_uri(config, "/data/videos/cam1/a.mp4") == ("local", "cam1/a.mp4")
    assert resolve_uri(config, "file:///data/videos/a.mp4") == ("local", "a.mp4")
    assert resolve_uri(config, "file://localhost/data/videos/a.mp4") == ("local", "a.mp4")
    # Named, the export's own root decides: no longest-root rule, no ambiguity.
    assert resolve_uri(config, "s3://videos/train/clips/b.mp4", "train") == ("train",
                                                                              "clips/b.mp4")
    # One root, two exports: the identity's access settles it, else it is refused.
    assert resolve_uri(config, "/data/shared/a.mp4", identity="bob") == ("team-b", "a.mp4")
    assert resolve_uri(config, "/data/shared/a.mp4", identity="alice") == ("team-a", "a.mp4")
    with pytest.raises(errors.FluxonFsBadRequestError, match="several exports.*team-a, team-b"):
        resolve_uri(config, "/data/shared/a.mp4")

    with pytest.raises(errors.FluxonFsBadRequestError) as outside:
        resolve_uri(config, "s3://videos/val/a.mp4")
    assert "under no export's root" in str(outside.value)
    assert "closest: clips (s3://videos/train/clips/), train (s3://videos/train)" in \
        str(outside.value)  # bucket videos' s3 roots, as configured; not gs://, not directories
    with pytest.raises(errors.FluxonFsBadRequestError, match="closest: local"):
        resolve_uri(config, "/data/videos2/a.mp4")
    with pytest.raises(errors.FluxonFsBadRequestError, match="not under the root of export "
                                                             "'clips'"):
        resolve_uri(config, "s3://videos/train/a.mp4", "clips")
    for refused in ("s3://videos/train/../secret.mp4", "/data/videos/../../etc/passwd",
                    "file://otherhost/data/videos/a.mp4"):
        with pytest.raises(errors.FluxonFsBadRequestError):
            resolve_uri(config, refused)
    with pytest.raises(errors.FluxonFsNotFoundError, match="unknown export 'nope'"):
        resolve_uri(config, "s3://videos/train/a.mp4", "nope")


def test_a_relpath_holding_a_uri_is_refused_not_mangled():
    from fluxon_video.fs.paths import check_relpath

    with pytest.raises(errors.FluxonFsBadRequestError, match="is a URI.*resolve"):
        check_relpath("s3://bucket/key.mp4")
    assert check_relpath("a//b/./c.mp4") == "a/b/c.mp4"  # relpaths as before


def test_the_api_takes_uris_where_it_takes_relpaths(bucket, media):
    config = _config(FluxonFsExport("train", ROOT, allow=["alice"], store=bucket.store_options(),
                                    store_timeout_s=5.0, store_retries=1),
                     FluxonFsExport("other", f"s3://{BUCKET}/elsewhere", allow=["alice"],
                                    store=bucket.store_options()))
    uri = f"{ROOT}/clips/one.mp4"
    expected = media.reference("h264_faststart.mp4", H, W)[[0, 40]]
    with fv.FluxonFsPatcher(config, identity="alice") as patcher:
        assert patcher.resolve(uri) == ("train", "clips/one.mp4")
        with patcher.open_video_reader(None, uri, H, W) as reader:
            assert np.array_equal(reader.read_frames_numpy([0, 40]), expected)
            assert reader.name == "train:clips/one.mp4"
        with patcher.open_video_reader("train", uri, H, W) as reader:
            assert np.array_equal(reader.read_frames_numpy([0, 40]), expected)
        assert patcher.video_metadata(None, uri).num_frames == len(
            media.reference("h264_faststart.mp4", H, W))
        assert patcher.file_version(None, uri) == patcher.file_version("train", "clips/one.mp4")
        listed = [e.relpath for e in patcher.list_files(None, f"{ROOT}/clips/")]
        assert listed == ["clips/av.mp4", "clips/one.mp4"]
        # The pool (and so the dataset, which reads through it): one reader per file.
        pool = patcher.open_video_reader_pool()
        by_uri = pool.read_frames_numpy(export_name="train", relpath=uri, height=H, width=W,
                                        num_threads=1, indices=[0, 40])
        by_relpath = pool.read_frames_numpy(export_name="train", relpath="clips/one.mp4",
                                            height=H, width=W, num_threads=1, indices=[40])
        assert np.array_equal(by_uri, expected) and np.array_equal(by_relpath, expected[1:])
        assert pool.counters().readers_opened == 1
        pool.close()
        # The dataset, unchanged, reads through the pool: URIs as its relpaths work.
        from fluxon_video.torch import VideoClipDataset

        dataset = VideoClipDataset(patcher, "train", [uri], clip_len=4, stride=10, height=H,
                                   width=W)
        item = dataset[0]
        reference = media.reference("h264_faststart.mp4", H, W)
        assert item["relpath"] == uri
        assert np.array_equal(item["frames"].numpy(), reference[item["indices"].numpy()])
        with pytest.raises(errors.FluxonFsBadRequestError) as outside:
            patcher.open_video_reader(None, f"s3://{BUCKET}/val/other.mp4", H, W)
        assert f"closest: other (s3://{BUCKET}/elsewhere), train ({ROOT})" in \
            str(outside.value)


def test_the_command_line_takes_uris(bucket, tmp_path):
    config = write_config(tmp_path / "fluxon.toml", [s3_export(bucket)])
    listed = cli("ls", f"{ROOT}/clips", config=config).stdout
    assert "clips/one.mp4" in listed and "clips/av.mp4" in listed
    stat = json.loads(cli("stat", f"{ROOT}/clips/one.mp4", "--json", config=config).stdout)
    assert stat["file"] == "train:clips/one.mp4" and stat["num_frames"] > 0
    named = json.loads(cli("stat", f"train:{ROOT}/clips/one.mp4", "--json",
                           config=config).stdout)
    assert named["etag"] == stat["etag"]
    frames = cli("read", f"{ROOT}/clips/one.mp4", "--frames", "0", "--out",
                 str(tmp_path / "frames"), config=config).stdout
    assert (tmp_path / "frames" / "one_000000.png").exists() and "one_000000.png" in frames
    for command in (["ls", f"s3://{BUCKET}/val/"], ["stat", f"s3://{BUCKET}/val/other.mp4"]):
        refused = cli(*command, config=config, check=False)
        assert refused.returncode == 1
        assert refused.stderr.startswith(f"fluxon-video: error: {command[1]} is under no ")
        assert "under no export's root; the closest: train (s3://cli-tools/train)" in \
            refused.stderr, refused.stderr
        assert "unknown export 's3'" not in refused.stderr


# ---- 14: stat, versions, read --audio, doctor, reprs ----

def test_stat_of_an_object_prints_what_an_object_has(bucket, tmp_path):
    client = bucket.client()
    versioned = f"{BUCKET}-versioned"
    client.create_bucket(Bucket=versioned)
    client.put_bucket_versioning(Bucket=versioned,
                                 VersioningConfiguration={"Status": "Enabled"})
    client.put_object(Bucket=versioned, Key="v/av.mp4",
                      Body=client.get_object(Bucket=BUCKET, Key="train/clips/av.mp4")["Body"].read())
    config = write_config(tmp_path / "fluxon.toml",
                          [s3_export(bucket), s3_export(bucket, "kept", f"s3://{versioned}/v")])
    head = client.head_object(Bucket=BUCKET, Key="train/clips/av.mp4")
    record = json.loads(cli("stat", "train:clips/av.mp4", "--json", config=config).stdout)
    assert record["etag"] == head["ETag"] and record["size"] == head["ContentLength"]
    assert "ctime_ns" not in record and "inode" not in record and "version_id" not in record
    assert record["audio"]["codec"] == "aac"  # JSON keeps the structure
    text = cli("stat", "train:clips/av.mp4", config=config).stdout
    assert f"etag: {head['ETag']}" in text
    assert "ctime_ns" not in text and "inode" not in text
    assert "audio: aac, 44100 Hz, 2 channels (stereo), stream 1" in text
    assert "{'" not in text  # no dict reprs
    kept = client.head_object(Bucket=versioned, Key="v/av.mp4")
    record = json.loads(cli("stat", "kept:av.mp4", "--json", config=config).stdout)
    assert record["etag"] == kept["ETag"] and record["version_id"] == kept["VersionId"]


def test_versions_names_every_ffmpeg_library():
    out = cli("versions", config=None).stdout
    names = [line.split()[0] for line in out.splitlines()]
    assert names == ["libavutil", "libavcodec", "libavformat", "libswscale", "libswresample"]
    assert all(line.split()[1][0].isdigit() for line in out.splitlines())


def _cli_audio(path: Path, *filters: str, fmt: str = "s16le") -> tuple[Fraction, np.ndarray]:
    """(time of sample 0, samples (n, channels)) of the ffmpeg CLI's decode of
    the whole first audio stream; the first sample's time from ffprobe."""
    def probe(entries: str) -> dict:
        return json.loads(subprocess.run(
            ["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries", entries,
             "-of", "json", str(path)], capture_output=True, check=True).stdout)
    info = probe("stream=time_base,channels")["streams"][0]
    first = next(f for f in probe("frame=pts")["frames"] if "pts" in f)
    channels = int(filters[-1].split()[-1]) if filters else int(info["channels"])
    args = [a for f in filters for a in (["-af", f] if f.startswith("aresample") else f.split())]
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-map", "0:a:0", *args,
                          "-f", fmt, "-"], capture_output=True, check=True).stdout
    dtype = "<i2" if fmt == "s16le" else "<f4"
    return (Fraction(first["pts"]) * Fraction(info["time_base"]),
            np.frombuffer(raw, dtype).reshape(-1, channels))


def _slice(first: Fraction, samples: np.ndarray, rate: int, start_s: float,
           end_s: float) -> np.ndarray:
    """Samples of [start_s, end_s): from the first at or after start_s (docs/audio.md)."""
    j0 = math.ceil((Fraction(start_s) - first) * rate - Fraction(1, 10**6))
    j1 = math.ceil((Fraction(end_s) - first) * rate - Fraction(1, 10**6))
    return samples[j0:j1]


def _wav(path: Path) -> tuple[np.ndarray, int, int]:
    with wave.open(str(path)) as wav:
        assert wav.getsampwidth() == 2
        data = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
        return data.reshape(-1, wav.getnchannels()), wav.getframerate(), wav.getnchannels()


def test_read_writes_a_clips_audio_as_the_ffmpeg_cli_decodes_it(tree, av_clip, tmp_path):
    config = write_config(tmp_path / "fluxon.toml",
                          [{"name": "data", "root": str(tree), "allow": ["alice"]}])
    out = tmp_path / "clip.wav"
    rows = [json.loads(line) for line in cli(
        "read", "data:av.mp4", "--frames", "10,20", "--audio", str(out), "--out",
        str(tmp_path / "frames"), "--json", config=config).stdout.splitlines()]
    assert [r.get("frame") for r in rows[:2]] == [10, 20]
    audio = rows[2]
    # The span the frames cover: frame 10's time to the end of frame 20's display.
    assert (audio["start_s"], audio["end_s"]) == (0.4, 0.84)
    first, cli_s16 = _cli_audio(av_clip)
    got, rate, channels = _wav(out)
    assert (rate, channels) == (44100, 2) and audio["num_samples"] == len(got) == 19404
    assert np.array_equal(got, _slice(first, cli_s16, 44100, 0.4, 0.84))
    # An exact span, resampled and mixed down, by URI (an absolute path under the root):
    # the CLI's float output of that conversion, rounded to 16 bits as the CLI rounds.
    mono = tmp_path / "mono.wav"
    text = cli("read", str(tree / "av.mp4"), "--audio", str(mono), "--audio-span", "0.5,1.25",
               "--sample-rate", "16000", "--channels", "1", config=config).stdout
    assert text.startswith(f"audio  0.5-1.25  {mono}  (12000 samples, 16000 Hz, 1 channel")
    first16, cli_f32 = _cli_audio(av_clip, "aresample=16000", "-ac 1", fmt="f32le")
    want = np.clip(np.rint(_slice(first16, cli_f32, 16000, 0.5, 1.25) * np.float32(32768)),
                   -32768, 32767).astype("<i2")
    got, rate, channels = _wav(mono)
    assert (rate, channels) == (16000, 1) and np.array_equal(got, want)
    lonely = cli("read", "data:av.mp4", "--sample-rate", "8000", "--frames", "0", "--out",
                 str(tmp_path), config=config, check=False)
    assert lonely.returncode == 1 and "go with --audio" in lonely.stderr
    nowhere = tmp_path / "missing-dir" / "x.wav"
    unwritable = cli("read", "data:av.mp4", "--audio", str(nowhere), "--audio-span", "0,1",
                     config=config, check=False)
    assert unwritable.returncode == 1 and unwritable.stderr == (
        f"fluxon-video: error: {nowhere}: cannot write the audio there (No such file or "
        "directory)\n")


def test_doctor_without_a_config_checks_the_install(tmp_path):
    # No ffmpeg CLI on PATH: the package decodes without it.
    done = cli("doctor", config=None, env={"PATH": str(tmp_path)})
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["ok", "extension"], ["ok", "ffmpeg"], ["ok", "decode"], ["skip", "config"]]
    assert "libswresample" in lines[1] and "without the ffmpeg CLI" in lines[2]
    assert "none on PATH" in lines[2]
    checks = [json.loads(line) for line in cli("doctor", "--json", config=None).stdout.splitlines()]
    assert [c["check"] for c in checks] == ["extension", "ffmpeg libs", "decode", "config"]
    assert all(c["ok"] for c in checks) and checks[-1]["skipped"]


def test_doctor_lines_keep_their_causes(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    config = tmp_path / "fluxon.toml"
    identities = "\n".join(f'{n} = "{t}"' for n, t in IDENTITIES.items())
    config.write_text(f'[client]\nredis_url = "redis://127.0.0.1:1/0"\nkv_keys = ["{KV_KEY}"]\n\n'
                      f'[identities]\n{identities}\n\n[[exports]]\nname = "data"\n'
                      f'root = "/nonexistent"\nagent_url = "{dead}"\nallow = ["alice"]\n')
    config.chmod(0o600)
    broken = cli("doctor", config=config, check=False)
    assert broken.returncode == 1
    lines = {line.split()[1]: line for line in broken.stdout.splitlines()}
    assert lines["kv"].startswith("FAIL") and "check client.redis_url (ConnectionError: " in \
        lines["kv"] and "Connection refused" in lines["kv"]
    agent = next(line for line in broken.stdout.splitlines() if "data: agent" in line)
    assert f"{dead} does not answer /healthz (ConnectionRefusedError: " in agent
    assert "<urlopen error" not in broken.stdout
    assert "RuntimeWarning" not in broken.stderr  # the kv line says it


def test_reprs_of_clips_and_batches_show_shapes(av_clip):
    with fv.open_video(av_clip, height=224, width=224) as reader:
        clip = reader.get_clip_at(list(range(16)), sample_rate=16000, num_channels=1)
    text = repr(clip)
    assert len(text) < 400, text
    assert "uint8(16, 224, 224, 3)" in text and "float32(1, " in text
    assert "sample_rate=16000" in text and "indices=[0, 1, 2, ..., 13, 14, 15]" in text
    assert repr(clip.frames) in text and repr(clip.audio) in text
    from fluxon_video.pool import FluxonFsVideoReadResult
    from fluxon_video.stats import FluxonFsVideoReadStats

    result = FluxonFsVideoReadResult(clip.frames.data, FluxonFsVideoReadStats(), False,
                                     audio=clip.audio)
    assert "frames=uint8(16, 224, 224, 3)" in repr(result) and len(repr(result)) < 400


def test_a_command_says_it_waits_for_an_agent(tmp_path):
    """With no agent answering, a command says it is retrying (the library's
    warning on stderr) before it gives up, instead of waiting in silence."""
    config = tmp_path / "fluxon.toml"
    config.write_text(
        "[client]\nagent_retry_window_s = 1.5\n\n[identities]\n"
        + "".join(f'{n} = "{t}"\n' for n, t in IDENTITIES.items())
        + f'\n[[exports]]\nname = "data"\nroot = "{tmp_path}"\n'
        f'agent_url = "http://127.0.0.1:{free_port()}"\nallow = ["alice"]\n')
    config.chmod(0o600)
    down = cli("stat", "data:a.mp4", config=config, check=False)
    assert down.returncode == 1
    assert "WARNING" in down.stderr and "retrying for up to 1.5 s" in down.stderr, down.stderr
    assert "agent_retry_window_s" in down.stderr
