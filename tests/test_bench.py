"""The benchmark's own logic, quickly: its command line, the frame check, the byte accounting.

The benchmark itself (`make bench`) is not run here: it takes minutes and
never fails on a timing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from dataset import Video, VideoSpec  # noqa: E402
from contenders import decode_floor_ms  # noqa: E402
from frames import CheckResult, cli_reference  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def test_help_names_the_options():
    out = subprocess.run([sys.executable, str(BENCH / "run.py"), "--help"], check=True,
                         capture_output=True, text=True).stdout
    for option in ("--quick", "--repeat", "--agent-latency-ms", "--out"):
        assert option in out


@pytest.fixture(scope="module")
def reference(media):
    path = media.path("h264_faststart.mp4")
    frames = media.reference("h264_faststart.mp4", 64, 64)
    return frames, cli_reference(path, 64, 64, range(len(frames)))


def test_the_right_frames_pass(reference):
    frames, ref = reference
    exact = CheckResult(exact_required=True)
    exact.add(frames[[3, 7, 11]], [3, 7, 11], ref)
    assert exact.ok and exact.bit_exact == 3 and exact.verdict() == "bit-exact"
    # Another scaler's rounding: off by one everywhere is still the same frame.
    peer = CheckResult(exact_required=False)
    peer.add(np.clip(frames[[3, 7, 11]].astype(int) + 1, 0, 255).astype(np.uint8), [3, 7, 11], ref)
    assert peer.ok and peer.bit_exact == 0 and peer.verdict().startswith("ok")


def test_a_shifted_frame_is_flagged(reference):
    frames, ref = reference
    peer = CheckResult(exact_required=False)
    peer.add(frames[[5, 6, 8]], [5, 6, 7], ref)  # frame 8 returned for 7
    assert not peer.ok
    assert peer.verdict() == "WRONG: frame 7 looks like frame 8"


def test_fluxon_must_be_bit_exact(reference):
    frames, ref = reference
    noisy = frames[[4]].copy()
    noisy[0, 0, 0, 0] ^= 1
    check = CheckResult(exact_required=True)
    check.add(noisy, [4], ref)
    assert check.verdict() == "WRONG: frame 4 differs from the ffmpeg CLI"


def test_gop_span_bytes_follow_decode_order():
    # I0 P3 B1 B2 | I4 P7 B5 B6 (decode order); pts = presentation order.
    packets = [{"pts": pts, "pos": 0, "size": 10 ** n, "key": pts in (0, 4)}
               for n, pts in enumerate([0, 3, 1, 2, 4, 7, 5, 6])]
    video = Video(VideoSpec("v.mp4", 64, 64, 1, 4, ()), Path("v.mp4"), size=20_000_000,
                  packets=packets)
    assert video.span_packets([1, 2]) == {0, 1, 2, 3}  # from I0 through B2
    assert video.span_packets([5]) == {4, 5, 6}         # from I4 through B5 (needs P7)
    assert video.span_bytes([[1], [5]]) == 10 ** 0 + 10 ** 1 + 10 ** 2 + 10 ** 4 + 10 ** 5 + 10 ** 6
    assert video.container_bytes() == 20_000_000 - sum(p["size"] for p in packets)


def test_decode_floor(media):
    path = media.path("h264_faststart.mp4")
    assert decode_floor_ms(path, [30, 34, 38], 1) > 0


def test_the_right_frame_too_far_off_is_flagged_apart(reference):
    frames, ref = reference
    peer = CheckResult(exact_required=False)
    peer.add(np.clip(frames[[9]].astype(int) + 6, 0, 255).astype(np.uint8), [9], ref)
    assert not peer.wrong and not peer.ok
    assert peer.verdict().startswith("OFF: frame 9 is ")


def test_a_pass_records_each_failure_and_flags_its_video(reference):
    from harness import Pass

    frames, ref = reference
    one = Pass({"family": "pyav"}, CheckResult(exact_required=False))
    assert one.time("a.mp4", lambda: 1 / 0) is None
    assert one.time("b.mp4", lambda: frames[[5, 6, 8]]) is not None
    one.check_item("b.mp4", [[5, 6, 7]], [frames[[5, 6, 8]]], ref)
    result = one.result({})
    assert result["error_count"] == 1 and result["errors"][0].startswith("a.mp4: ZeroDivision")
    assert result["flagged_videos"] == ["a.mp4", "b.mp4"] and result["item_videos"] == ["b.mp4"]
    assert result["check"]["wrong"] == ["b.mp4: frame 7 looks like frame 8"]


def test_quick_runs_take_the_quick_defaults(tmp_path):
    from harness import finish, parse_size, scenario_parser

    ap = scenario_parser("x.py", None, "smoke", "x.md")
    ap.add_argument("--repeat", type=int)
    args = finish(ap, ap.parse_args(["--quick", "--data", str(tmp_path)]), {"repeat": 3},
                  {"repeat": 1}, ("repeat",))
    assert args.repeat == 1 and args.out == tmp_path / "quick-results"
    assert finish(ap, ap.parse_args(["--repeat", "2"]), {"repeat": 3}, {"repeat": 1}).repeat == 2
    assert parse_size("256K") == 256 << 10 and parse_size("4MiB") == 4 << 20


def test_the_s3_store_option_takes_its_own_defaults_and_rows(tmp_path):
    from remote import parse_args, s3_peer_rows

    args = parse_args(["--store", "s3", "--quick", "--data", str(tmp_path)])
    assert (args.long_videos, args.long_items, args.latency_list) == (1, 2, [10.0])
    assert args.block_list == [256 << 10, 4 << 20]
    assert parse_args(["--data", str(tmp_path)]).long_videos == 0  # the directory store
    with pytest.raises(SystemExit):  # s3fs's default block (50 MiB) must be named
        parse_args(["--store", "s3", "--block-sizes", "default", "--data", str(tmp_path)])
    rows = s3_peer_rows([256 << 10])
    assert {(r["family"], r["mode"]) for r in rows} == {
        ("pyav", "s3fs"), ("pyav", "obstore"), ("torchcodec", "s3fs"),
        ("torchcodec", "obstore"), ("pyav", "download")}
    assert all(r.get("seek_mode") == "exact" for r in rows if r["family"] == "torchcodec")


def test_long_items_repeat_each_long_video_and_shuffle():
    from dataset import long_order

    order = long_order(["a", "b"], 3, np.random.default_rng(1))
    assert sorted(order) == ["a", "a", "a", "b", "b", "b"]


def test_the_agent_config_carries_the_store_table(tmp_path):
    import tomllib

    from stores import write_agent_config

    path = write_agent_config(tmp_path / "agent.toml", "e", "s3://b/p",
                              {"endpoint": "http://127.0.0.1:9", "allow_http": True})
    export = tomllib.loads(path.read_text())["exports"][0]
    assert export["root"] == "s3://b/p"
    assert export["store"] == {"endpoint": "http://127.0.0.1:9", "allow_http": True}


def test_the_proxy_passes_end_to_end_headers_only():
    from range_server import end_to_end

    kept = end_to_end([("Range", "bytes=0-9"), ("Connection", "keep-alive"),
                       ("Transfer-Encoding", "chunked"), ("Authorization", "AWS4 x")])
    assert kept == [("Range", "bytes=0-9"), ("Authorization", "AWS4 x")]


def test_s3_report_ratios_and_round_trips():
    from remote_report import best_exact_peer, ratio, round_trips

    peer = {"row": {"family": "pyav"}, "ok": True, "clips_per_s": 4.0, "mib_per_clip": 2.0,
            "requests_per_clip": 6.0}
    flagged = {**peer, "ok": False, "clips_per_s": 9.0}
    flux = {"row": {"family": "fluxon", "cache": "cold"}, "ok": True, "clips_per_s": 8.0,
            "mib_per_clip": 1.0, "requests_per_clip": 2.0,
            "fluxon": {"per_item": [{"open_round_trips": 2, "first_frame_waits": 1},
                                    {"open_round_trips": 1, "first_frame_waits": 0}]}}
    assert best_exact_peer([peer, flagged, flux]) is peer
    assert ratio(flux, peer, "clips_per_s") == 2.0 and ratio(flux, peer, "mib_per_clip") == 0.5
    assert round_trips(flux) == 2.0 and round_trips(peer) == 6.0


def test_spdl_gets_the_reference_filter_and_its_frames_back_in_the_order_asked():
    from contenders import PEERS, sorted_unique, spdl_filter

    assert "spdl" in PEERS
    # The ffmpeg CLI reference's filter (frames.cli_reference), not SPDL's bicubic letterbox.
    assert spdl_filter(224, 320) == "scale=320:224:flags=bilinear,format=rgb24"
    assert sorted_unique([8, 0, 4, 4]) == ([0, 4, 8], [2, 0, 1, 1])
    assert sorted_unique([0, 4, 8]) == ([0, 4, 8], [0, 1, 2])


def test_avi_files_are_demuxed_with_genpts_by_pyav_and_spdl():
    from contenders import needs_genpts

    assert needs_genpts(Path("v/mpeg4_360p_gop60.avi"))
    assert not needs_genpts(Path("v/h264.mp4")) and not needs_genpts(b"RIFF")


def test_spdl_reads_the_remote_download_as_bytes():
    from remote import FAMILIES
    from contenders import BYTES_FAMILIES

    assert "spdl" in FAMILIES and "spdl" in BYTES_FAMILIES


def test_av_audio_verdict_names_exact_shifted_and_broken_audio():
    from fractions import Fraction

    from av_clips import RATE, Truth, audio_verdict

    truth = Truth.__new__(Truth)  # the CLI's audio without running it: noise at 16 kHz
    truth.first = Fraction(-1, 100)
    truth.audio = np.random.default_rng(3).standard_normal(4 * RATE).astype(np.float32)
    start = 1.0  # sample 16160 of the stream
    exact = truth.audio[16160:16160 + 8000]
    assert audio_verdict(exact, start, truth) == {"exact": True, "shift": 0, "max_diff": 0.0}
    late = truth.audio[16160 + 37:16160 + 37 + 8000]  # 37 samples later than it says
    assert audio_verdict(late, start, truth)["shift"] == 37
    assert audio_verdict(late, start, truth)["max_diff"] == 0.0
    broken = exact.copy()
    broken[5] = np.nan
    assert audio_verdict(broken, start, truth)["shift"] is None


def test_lerobot_plans_and_summaries():
    """bench/lerobot.py's workloads are seeded, of the sizes asked, 16 consecutive
    rows in rows16; a row's summary is the median of the passes that ran."""
    from types import SimpleNamespace

    from lerobot import plans, summarise

    args = SimpleNamespace(seed=7, clip_batches=3, row_batches=4, plain_items=5)
    plan = plans(100, args)
    assert plan == plans(100, args)  # seeded
    assert [len(plan[k]) for k in ("clip", "rows16", "plain")] == [3, 4, 5]
    assert all(len(batch) == 8 and all(0 <= r < 100 for r in batch) for batch in plan["clip"])
    assert all(batch == list(range(batch[0], batch[0] + 16)) and batch[-1] < 100
               for batch in plan["rows16"])
    check = {"frames": 16, "wrong": 0, "pad_wrong": 0}
    passes = [{"items_per_s": v, "rss": {"main_mib": m, "workers_mib": w}, "check": dict(check),
               "examples": []}
              for v, m, w in ((10.0, 500, [300, 310]), (30.0, 520, [290]), (20.0, 480, []))]
    summary = summarise(passes + [{"error": "boom"}])
    assert summary["items_per_s"] == 20.0 and summary["main_mib"] == 520
    assert summary["worker_mib"] == 310
    assert summarise([{"error": "boom"}])["error"] == "boom"


def test_lerobot_help():
    out = subprocess.run([sys.executable, str(BENCH / "lerobot.py"), "--help"], check=True,
                         capture_output=True, text=True).stdout
    for option in ("--quick", "--episodes", "--clip-batches", "--row-batches", "--plain-items",
                   "--runs", "--out", "--latency-ms"):
        assert option in out


def test_threads_report_gains_and_the_target():
    import harness
    import threads

    out = subprocess.run([sys.executable, str(BENCH / "threads.py"), "--help"], check=True,
                         capture_output=True, text=True).stdout
    for option in ("--quick", "--clips", "--repeat", "--videos", "--out"):
        assert option in out

    def row(one, two, auto, ok=True):
        return {k: {"clips_per_s": v, "ok": ok, "verdict": "bit-exact" if ok else "OFF: x"}
                for k, v in zip(("1", "2", "auto"), (one, two, auto))}

    results = {"command": "python bench/threads.py", "generated": "now", "duration_s": 1,
               "machine": harness.machine(), "versions": {}, "cpus": 2,
               "settings": {"clips": 4, "repeat": 1},
               "videos": {"v.mp4": {"fluxon": row(2.0, 3.6, 3.2),
                                    "pyav": row(1.0, 1.2, 2.0, ok=False)}}}
    text = threads.render(results)
    assert "| fluxon | 2.00 | 3.60 | 3.20 | 1.80× | 1.60× | – | – | – | bit-exact |" in text
    assert "| pyav | 1.00 | 1.20 | 2.00 | 1.20× | 2.00× | 2.00× | 3.00× | 1.60× | ⚠ OFF: x |" in text
    assert "| v.mp4 | fluxon 2 threads ÷ 1 thread >= 1.7× | 1.80× | met |" in text


def test_index_load_help():
    out = subprocess.run([sys.executable, str(BENCH / "index_load.py"), "--help"], check=True,
                         capture_output=True, text=True).stdout
    assert "FrameIndex.from_bytes" in out and "--minutes" in out and "--repeat" in out


def test_stages_groups_perf_libraries_into_stages_and_renders_them():
    import harness
    import stages

    report = """
    50.00%  libavcodec.so.59.37.100
    10.00%  libavcodec-5e6b81c2.so.62.28.102
     5.00%  libdav1d.so.6.6.0
    12.50%  libswscale.so.6.7.100
     2.50%  libavformat.so.59.27.100
     5.00%  [kernel.kallsyms]
     4.00%  libc.so.6
     3.00%  python3.11
     2.00%  _multiarray_umath.cpython-311-x86_64-linux-gnu.so
     1.00%  libavutil.so.57.28.100
     5.00%  [unknown]
    """
    split = stages.split_by_stage(report)
    assert split["decode"] == pytest.approx(0.65) and split["convert"] == pytest.approx(0.125)
    assert split["demux"] == pytest.approx(0.025) and split["kernel"] == pytest.approx(0.05)
    assert split["python"] == pytest.approx(0.05) and split["other"] == pytest.approx(0.05)
    assert sum(split.values()) == pytest.approx(1.0)

    def row(name, threads, wall, cpu):
        return {"contender": name, "threads": threads, "wall_ms": wall, "cpu_ms": cpu,
                "stages_ms": {k: v * cpu for k, v in split.items()}}
    results = {"command": "python bench/stages.py", "generated": "now", "duration_s": 1,
               "machine": harness.machine(), "versions": {}, "settings": {"clips": 4},
               "cases": [{"case": "c", "target": "t", "video": "v.mp4",
                          "rows": [row("fluxon", 1, 100.0, 100.0), row("pyav", 1, 150.0, 149.0)]}]}
    text = stages.render(results)
    assert "| fluxon | 1 | 100.0 | 1.00× | 100.0 | 1.00 | 65.0 | 12.5 |" in text
    assert "| pyav | 1 | 150.0 | 1.50× | 149.0 | 0.99 | 96.9 |" in text
    out = subprocess.run([sys.executable, str(BENCH / "stages.py"), "--help"], check=True,
                         capture_output=True, text=True).stdout
    assert "perf record" in out and "--clips" in out
