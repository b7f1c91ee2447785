"""The benchmark's own logic, quickly: its command line, the frame check, the byte accounting.

The benchmark itself (`make bench`) is not run here: it takes minutes and
never fails on a timing.
"""

from __future__ import annotations

import subprocess
import sys
import time
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
    out = subprocess.run([sys.executable, str(BENCH / "matrix.py"), "--help"], check=True,
                         capture_output=True, text=True).stdout
    for option in ("--suite", "--quick", "--repeat", "--latencies", "--out", "--render",
                   "--workloads", "--stores", "--contenders", "--caches", "--list"):
        assert option in out
    assert "bench/run.py            python bench/matrix.py --suite local" in out


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
    assert len(result["item_cpu_s"]) == len(result["item_ms"]) == 1


def test_a_record_counts_the_reading_process_cpu_per_item():
    from cases import Case
    from harness import Pass
    from render import markdown
    from record import Results
    from tally import record_of

    def burn() -> int:
        started = time.process_time()
        while time.process_time() - started < 0.05:
            pass
        return 1

    passes = []
    for _ in range(2):
        one = Pass({"family": "fluxon"}, None)
        one.time("a.mp4", burn)
        one.time("a.mp4", lambda: 1)
        passes.append(one.result({}))
    r = record_of(Case("clips", "remote", "agent", "fluxon", "cold", latency_ms=10.0), passes)
    assert r.items == 4 and 0.025 <= r.cpu_s < 0.05  # 2 x 50 ms over 4 items, plus a little
    machine = {"cpu": "x", "cores": 2, "memory_gib": 1, "os": "y", "git": "z"}
    text = markdown(Results({"suite": "remote", "command": "c", "machine": machine}, [r]), [])
    assert "| CPU ms/clip |" in text and f"| {round(r.cpu_s * 1e3)} |" in text
    passes[0]["item_cpu_s"] = []  # a pass from before CPU was measured: no figure, not half
    assert record_of(r.case, passes).cpu_s is None


def test_quick_runs_take_the_quick_defaults(tmp_path):
    from cases import parse_size
    from harness import finish, scenario_parser

    ap = scenario_parser("x.py", None, "smoke", "x.md")
    ap.add_argument("--repeat", type=int)
    args = finish(ap, ap.parse_args(["--quick", "--data", str(tmp_path)]), {"repeat": 3},
                  {"repeat": 1}, ("repeat",))
    assert args.repeat == 1 and args.out == tmp_path / "quick-results"
    assert finish(ap, ap.parse_args(["--repeat", "2"]), {"repeat": 3}, {"repeat": 1}).repeat == 2
    assert parse_size("256K") == 256 << 10 and parse_size("4MiB") == 4 << 20


def test_the_s3_suite_takes_its_own_settings_and_rows(tmp_path):
    from cases import Filters, select
    from matrix import parser, settings_of
    from suites import SUITES

    ap = parser()
    suite = SUITES["remote-s3"]
    quick = settings_of(suite, ap.parse_args(["--suite", "remote-s3", "--quick"]), ap)
    assert (quick["long_videos"], quick["long_items"], quick["latencies"]) == (1, 2, "10")
    assert quick["block_sizes"] == "256K,4M"
    assert settings_of(SUITES["remote"], ap.parse_args([]), ap)["long_videos"] == 0
    with pytest.raises(SystemExit):  # one number of rounds, or one per latency
        settings_of(SUITES["remote"], ap.parse_args(["--rounds", "1,2", "--latencies", "10"]), ap)
    with pytest.raises(SystemExit):  # s3fs's default block (50 MiB) must be named
        settings_of(suite, ap.parse_args(["--suite", "remote-s3", "--block-sizes", "default"]),
                    ap)
    peers = [c for c in select(suite.cases({**quick, "block_sizes": "256K"}), Filters())
             if c.workload == "clips" and not c.fluxon]
    assert {(c.family, c.access) for c in peers} == {
        ("pyav", "s3fs"), ("pyav", "obstore"), ("torchcodec", "s3fs"),
        ("torchcodec", "obstore"), ("pyav", "download")}
    assert all(c.seek_mode == "exact" for c in peers if c.family == "torchcodec")
    assert all(c.store == "s3" and c.latency_ms == 10.0 for c in peers)


def test_suites_reproduce_the_retired_scripts_matrices():
    from cases import Filters, select
    from suites import SUITES

    local = select(SUITES["local"].cases(SUITES["local"].defaults), Filters())
    assert {c.label() for c in local if c.workload == "clips" and c.piece_size is None} == {
        "decord", "pyav", "torchcodec", "spdl", "fluxon-local", "fluxon cold",
        "fluxon warm-kv", "fluxon warm-reader"}
    assert sorted(c.piece_size >> 10 for c in local if c.piece_size) == [256, 256, 1024, 1024,
                                                                          4096, 4096]
    remote = select(SUITES["remote"].cases(SUITES["remote"].defaults), Filters())
    assert {c.latency_ms for c in remote} == {0.0, 2.0, 10.0}
    # fluxon's decoder on the local files stands beside the clip rows at the target latency
    assert [(c.workload, c.latency_ms) for c in remote if c.store == "local"] == [
        ("clips", 10.0)]
    lookahead = [c for c in remote if c.cache == "cold+lookahead"]
    assert {c.workload for c in lookahead} == {"clips", "batched", "metadata"}
    long = select(SUITES["remote-long"].cases(SUITES["remote-long"].defaults), Filters())
    assert {c.workload for c in long} == {"clips", "batched", "metadata", "long"}


def test_filters_select_cases_and_a_warm_case_keeps_its_cold_pass():
    from cases import Filters, select, unknown
    from suites import SUITES

    cases = SUITES["remote"].cases({**SUITES["remote"].defaults, "latencies": "10"})
    picked = select(cases, Filters.parse(workloads="clips", caches="warm-kv"))
    assert [c.label() for c in picked] == ["fluxon cold", "fluxon warm-kv"]
    peers = select(cases, Filters.parse(contenders="pyav", workloads="metadata"))
    assert [c.label() for c in peers] == ["pyav · fsspec 256 KiB"]
    none = select(cases, Filters.parse(caches="none", workloads="clips"))
    assert all(not c.cache for c in none) and any(c.fluxon for c in none)  # the local file
    assert unknown(Filters.parse(workloads="clip,long", caches="warm")) == [
        "--workloads clip", "--caches warm"]


def record(case, rate, ok=True, **more):
    from record import Record

    return Record(case=case, items=10, items_per_s=rate, items_per_s_rounds=[rate * 0.9, rate],
                  item_ms_p50=1e3 / rate, ok=ok, verdict="bit-exact" if ok else "WRONG: x",
                  settings={"rounds": 2}, **more)


def test_a_record_survives_its_json_and_a_results_file_its_format(tmp_path):
    from cases import Case
    from record import Record, Results, load

    r = record(Case("clips", "remote", "agent", "fluxon", "cold", latency_ms=10.0), 2.5,
               mib_per_item=1.5, counts={"path": {"indexed": 3}}, errors=["a.mp4: boom"])
    assert Record.from_json(r.to_json()) == r
    path = Results({"suite": "remote"}, [r]).write(tmp_path / "x.json")
    assert load(path).records == [r]
    with pytest.raises(ValueError):
        Record.from_json({**r.to_json(), "surprise": 1})


def test_goals_compare_two_rows_and_never_a_flagged_peer():
    from cases import Case
    from goals import BEST_PEER, Goal, Pick, evaluate

    base = Case("clips", "remote", "agent", "pyav", latency_ms=10.0, bandwidth_mbps=50.0)
    rows = [record(base, 2.0), record(Case(**{**base.__dict__, "family": "decord"}), 9.0,
                                      ok=False),
            record(Case("clips", "remote", "agent", "fluxon", "cold", latency_ms=10.0), 5.0),
            record(Case("clips", "remote", "agent", "fluxon", "warm-kv", latency_ms=10.0), 4.0,
                   ok=False),
            record(Case("clips", "remote", "agent", "fluxon", "cold", latency_ms=0.0), 1.0)]
    goals = (Goal("cold ÷ peer", Pick("clips", "fluxon", "cold"), Pick("clips", BEST_PEER),
                  at_least=2.0),
             Goal("cold ÷ peer, stricter", Pick("clips", "fluxon", "cold"),
                  Pick("clips", BEST_PEER), at_least=3.0),
             Goal("warm ÷ peer", Pick("clips", "fluxon", "warm-kv"), Pick("clips", BEST_PEER),
                  at_least=1.0),
             Goal("cold ms", Pick("clips", "fluxon", "cold"), figure="item_ms_p50",
                  at_most=250.0),
             Goal("absent", Pick("clips", "fluxon", "warm-reader"), Pick("clips", BEST_PEER)))
    met, missed, flagged, bound = evaluate(goals, rows, 10.0, [])
    assert met.bottom.case.family == "pyav" and met.ratio == 2.5 and met.status == "met"
    assert met.rounds == (2.5, 2.5)
    assert missed.status == "missed"
    assert flagged.status == "n/a (fluxon flagged)"
    assert bound.ratio == 200.0 and bound.status == "met"


def test_per_video_goals_and_within_row_bounds():
    from cases import Case
    from goals import Goal, Pick, evaluate

    local = Case("clips", "codecs", "local", "fluxon")
    rows = [record(local, 5.0, video="a.mp4", floor_ms=400.0),
            record(local, 2.0, video="b.mp4", floor_ms=400.0)]
    goal = Goal("clip ÷ floor", Pick("clips", "fluxon", store="local"), figure="item_ms_p50",
                bottom_figure="floor_ms", at_most=0.8, per_video=True)
    a, b = evaluate((goal,), rows, 0.0, ["b.mp4", "a.mp4"])
    assert (a.video, b.video) == ("b.mp4", "a.mp4")
    assert a.ratio == 1.25 and a.status == "missed" and b.ratio == 0.5 and b.status == "met"


def passes_of(row, ms, **more):
    check = {"exact_required": row.get("family", row.get("contender")) == "fluxon",
             "frames": 16 * len(ms), "bit_exact": 16 * len(ms), "worst_mean_abs_diff": 0.0,
             "wrong": [], "off": []}
    return {"row": row, "item_ms": ms, "item_videos": [], "flagged_videos": [],
            "check": check, "errors": [], "error_count": 0, **more}


def test_legacy_remote_results_convert_to_records():
    from legacy import convert

    def one(row, r, ms, server):
        return {**passes_of(row, ms, server=server, extra={}), "workload": "clips",
                "latency_ms": 10.0, "round": r}
    peer = {"family": "pyav", "mode": "fsspec", "block_size": 262144}
    data = {"command": "python bench/remote.py", "generated": "then", "duration_s": 1.0,
            "settings": {}, "videos": [], "notes": [], "skipped": {},
            "conditions": {"machine": {}, "versions": {},
                           "store": {"origin": "dir", "latencies_ms": [10.0],
                                     "bandwidth_mbps_per_connection": 50.0},
                           "workload": {"batched_clips": 8, "threads": 1}},
            "needed_bytes": {"clips": [1 << 20, 1 << 20]},
            "passes": [one(peer, 0, [500.0, 500.0], {"bytes": 4 << 20, "requests": 8}),
                       one(peer, 1, [250.0, 250.0], {"bytes": 4 << 20, "requests": 8}),
                       one({"family": "fluxon", "cache": "local file"}, 0, [100.0], {})]}
    results = convert(data)
    assert results.meta["suite"] == "remote"
    pyav, local = results.records
    assert pyav.case.label() == "pyav · fsspec 256 KiB" and pyav.case.bandwidth_mbps == 50.0
    assert pyav.items_per_s == 3.0 and pyav.items_per_s_rounds == [2.0, 4.0]
    assert pyav.mib_per_item == 2.0 and pyav.requests_per_item == 4.0
    assert pyav.needed_mib_per_item == 0.5 and pyav.frames_exact == 64
    assert local.case.store == "local" and local.case.label() == "fluxon local file"
    with pytest.raises(ValueError):
        convert({**data, "command": "python bench/stages.py"})


def test_round_groups_split_their_figures_by_layout_and_count_the_stores_cpu():
    from render import layout_table
    from tally import rounds_records

    fluxon = {"family": "fluxon", "cache": "cold"}
    per_item = [{"video": v, "remote_bytes": b << 20, "open_round_trips": t,
                 "first_frame_waits": 1} for v, b, t in (("a.mp4", 1, 1), ("b.mkv", 3, 2),
                                                          ("c.mp4", 2, 1))]
    passes = [{**passes_of(fluxon, [100.0, 300.0, 200.0], server={},
                           extra={"per_item": per_item}),
               "item_videos": ["a.mp4", "b.mkv", "c.mp4"], "workload": "clips",
               "latency_ms": 10.0, "round": 0, "servers_cpu_s": 0.3}]
    videos = [{"video": "a.mp4", "layout": "mp4 faststart"},
              {"video": "b.mkv", "layout": "mkv"}, {"video": "c.mp4", "layout": "mp4 faststart"}]
    data = {"videos": videos, "passes": passes, "conditions": {
        "store": {"origin": "dir", "bandwidth_mbps_per_connection": 50.0},
        "workload": {"batched_clips": 8, "threads": 1}}}
    record, = rounds_records(data)
    assert record.counts["store_cpu_ms_per_item"] == pytest.approx(100.0)  # 0.3 s, 3 items
    split = record.counts["by_layout"]
    assert split["mkv"] == {"items": 1, "item_ms_p50": 300.0, "mib_per_item": 3.0,
                            "round_trips_p50": 3}
    assert split["mp4 faststart"]["items"] == 2 and split["mp4 faststart"]["mib_per_item"] == 1.5
    text = layout_table([record], [])
    assert "| store | row | mkv | mp4 faststart |" in text and "3.00 MiB · 3 RT (1)" in text
    one_layout = rounds_records({**data, "videos": [{**v, "layout": "mkv"} for v in videos]})
    assert "by_layout" not in one_layout[0].counts


def test_legacy_local_results_count_a_read_many_call_as_its_clips():
    from legacy import convert

    def row(contender, cache):
        return {"contender": contender, "cache": cache, "workload": "batched", "video": "v.mp4",
                "sweep": False, "piece_size": 262080}
    extra = {"clips": 8, "frames_per_clip": 16, "height": 224, "width": 224}
    data = {"command": "python bench/run.py", "settings": {"threads": 1, "repeat": 1},
            "conditions": {"machine": {}, "versions": {},
                           "export": {"agent_latency_ms": 0.0, "sweep_agent_latency_ms": 2.0}},
            "passes": [passes_of(row("pyav", "local"), [250.0] * 8, extra=extra, server={}),
                       passes_of(row("fluxon read_many", "warm-kv"), [1000.0], extra=extra,
                                 server={})]}
    pyav, many = convert(data).records
    assert pyav.case.store == "local" and pyav.clips_per_s == 4.0  # one clip an item
    assert many.case.access == "read_many" and many.case.cache == "warm-kv"
    assert many.clips_per_item == 8 and many.clips_per_s == 8.0  # one call, 8 clips


def test_the_loader_suites_make_the_dataloader_rows_and_check_their_settings():
    from cases import Filters, select
    from loader_group import row_name
    from matrix import parser, settings_of
    from suites import SUITES

    cases = select(SUITES["loader"].cases(SUITES["loader"].defaults), Filters())
    assert [(c.workload, c.label()) for c in cases] == [
        ("loader-clips", "fluxon cold"), ("loader-clips", "fluxon warm-kv"),
        ("loader-clips", "decord"), ("loader-clips", "torchcodec"),
        ("loader-batched", "fluxon cold"), ("loader-batched", "fluxon cold+lookahead"),
        ("loader-batched", "fluxon warm-kv"), ("loader-batched", "decord"),
        ("loader-batched", "torchcodec")]
    # the names bench/dataloader.py gave its rows, which its JSONs keep
    assert [row_name(c) for c in cases[4:7]] == [
        ("fluxon batched-no-lookahead", "cold"), ("fluxon batched", "cold"),
        ("fluxon batched", "warm KV")]
    assert row_name(cases[2]) == ("decord per-clip", "local file")
    warm = select(cases, Filters.parse(workloads="loader-batched", caches="warm-kv"))
    assert [c.label() for c in warm] == ["fluxon cold", "fluxon warm-kv"]
    s3 = SUITES["loader-s3"].cases(SUITES["loader-s3"].defaults)
    assert {c.store for c in s3 if c.fluxon} == {"s3"} and {c.latency_ms for c in s3} == {10.0}
    ap = parser()
    quick = settings_of(SUITES["loader"], ap.parse_args(["--suite", "loader", "--quick"]), ap)
    assert (quick["items"], quick["repeat"], quick["workers"]) == (32, 1, 2)
    for wrong in (["--batch-size", "6"], ["--items", "20"], ["--context", "thread"],
                  ["--workers", "-1"]):
        with pytest.raises(SystemExit):
            settings_of(SUITES["loader"], ap.parse_args(["--suite", "loader", *wrong]), ap)


def loader_row(contender, order, cache, rates, worker_cpu=(), stats=None, check_ok=True):
    check = {"frames": 32, "bit_exact": 32 if check_ok else 20, "wrong": [] if check_ok
             else ["frame 58 looks like frame 59"], "off": [], "ok": check_ok,
             "verdict": "bit-exact" if check_ok else "WRONG: frame 58 looks like frame 59",
             "by_codec": {"h264": {"verdict": "bit-exact"},
                          "hevc": {"verdict": "bit-exact" if check_ok else "WRONG: x"}}}
    return {"row": f"{contender} {order}", "contender": contender, "order": order,
            "cache": cache, "items": 32, "clips_per_s": sorted(rates)[len(rates) // 2],
            "errors": 0, "first_error": None, "fluxon_stats": stats, "check": check,
            "worker_cpu": list(worker_cpu), "epoch_s": 1.0, "redone": 0,
            "epochs": [{"items": 32, "clips_per_s": r, "cpu_s": 3.2} for r in rates]}


def test_legacy_dataloader_results_convert_to_records():
    from legacy import convert

    stats = {"remote_bytes": 32 << 20, "remote_reads": 64, "kv_hits": 5, "kv_misses": 7,
             "ahead_pages": 4, "ahead_hits": 4, "ahead_wasted": 0}
    data = {"command": "python bench/dataloader.py --store s3 --workers 4",
            "settings": {}, "conditions": {
                "machine": {"cores": 2}, "versions": {},
                "loader": {"workers": 4, "batch_size": 8},
                "export": {"agent_latency_ms": 10.0, "store": "s3"}},
            "rows": [loader_row("fluxon", "batched-no-lookahead", "cold", [10.0]),
                     {**loader_row("fluxon", "batched", "cold", [20.0, 30.0, 40.0],
                                   (0.4, 0.45, 0.45, 0.5), stats), "machine_busy": 0.97},
                     loader_row("decord", "per-clip", "local file", [5.0], check_ok=False)]}
    results = convert(data)
    assert results.meta["suite"] == "loader-s3"
    plain, ahead, decord = results.records
    assert (plain.case.cache, ahead.case.cache) == ("cold", "cold+lookahead")
    assert ahead.case.store == "s3" and ahead.case.workload == "loader-batched"
    assert ahead.items_per_s == 30.0 and ahead.items_per_s_rounds == [20.0, 30.0, 40.0]
    assert ahead.cpu_s == pytest.approx(0.1) and ahead.mib_per_item == 1.0
    assert ahead.counts["cores_busy"] == pytest.approx(0.9)  # 1.8 cores' worth of 2
    assert ahead.counts["machine_busy"] == 0.97 and "machine_busy" not in plain.counts
    assert ahead.counts["ahead_hits"] == 4 and ahead.frames_exact == 32
    assert decord.case.store == "local" and decord.case.workload == "loader-clips"
    assert not decord.ok and decord.counts["by_codec"]["hevc"] == "WRONG: x"
    # Before the lookahead, bench/dataloader.py's cold batched row read without it.
    older = convert({**data, "rows": data["rows"][1:]})
    assert older.records[0].case.cache == "cold"


def test_the_report_has_the_goals_and_a_table_per_workload():
    from cases import Case
    from record import Results
    from render import markdown

    rows = [record(Case("clips", "remote", "agent", "pyav", access="download",
                        latency_ms=10.0), 2.0),
            record(Case("clips", "remote", "agent", "fluxon", "cold", latency_ms=10.0), 5.0)]
    machine = {"cpu": "x", "cores": 2, "memory_gib": 1, "os": "y", "git": "z"}
    text = markdown(Results({"suite": "remote", "command": "c", "machine": machine}, rows), [])
    assert "| random clip per item: fluxon cold ÷ best exact peer | clips, agent 10 ms |" in text
    assert "2.50× (rounds 2.50–2.50) | ≥ 2.5× | met |" in text
    assert "## clips" in text and "| agent 10 ms | fluxon cold | 5.00 (4.50–5.00) |" in text


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
    from suites import REMOTE_DEFAULTS, remote_peer_cases
    from contenders import BYTES_FAMILIES

    spdl = [c for c in remote_peer_cases("clips", REMOTE_DEFAULTS, 10.0) if c.family == "spdl"]
    assert [c.peer_row()["mode"] for c in spdl] == ["download"] and "spdl" in BYTES_FAMILIES


def test_av_audio_verdict_names_exact_shifted_and_broken_audio():
    from fractions import Fraction

    from av_group import RATE, Truth, audio_verdict

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


def test_the_av_suite_makes_the_av_clips_rows_and_checks_its_settings():
    from cases import Filters, select
    from matrix import parser, settings_of
    from suites import SUITES

    suite = SUITES["av"]
    cases = select(suite.cases(suite.defaults), Filters())
    assert [(c.workload, c.label()) for c in cases] == [
        ("av-clips", "fluxon-local"), ("av-clips", "fluxon-local · exact_audio=False"),
        ("av-clips", "torchcodec"), ("av-clips", "pyav"), ("av-clips", "decord"),
        ("av-clips-open", "fluxon cold"), ("av-clips-open", "fluxon warm-kv"),
        ("av-clips-open", "torchcodec · download (1 GET)"),
        ("av-clips-open", "pyav · download (1 GET)"),
        ("av-clips-open", "decord · download (1 GET)")]
    assert suite.stem == "av" and {c.latency_ms for c in cases if c.store != "local"} == {10.0}
    # bench/av_clips.py --latency-ms -1 (local files only) is --stores local
    assert {c.workload for c in select(cases, Filters.parse(stores="local"))} == {"av-clips"}
    warm = select(cases, Filters.parse(caches="warm-kv"))
    assert [c.label() for c in warm] == ["fluxon cold", "fluxon warm-kv"]
    ap = parser()
    full = settings_of(suite, ap.parse_args(["--suite", "av"]), ap)
    assert (full["items"], full["seconds"], full["repeat"], full["latencies"]) == (8, 30, 2, "10")
    quick = settings_of(suite, ap.parse_args(["--suite", "av", "--quick"]), ap)
    assert (quick["items"], quick["seconds"], quick["repeat"]) == (3, 12, 2)
    for wrong in (["--seconds", "3"], ["--items", "0"], ["--repeat", "0"]):
        with pytest.raises(SystemExit):
            settings_of(suite, ap.parse_args(["--suite", "av", *wrong]), ap)


def av_pass(contender, item_ms, audio, frames_ok=True, errors=()):
    """A pass as bench/av_clips.py wrote it; ``audio``: (video, shift, max diff) per item."""
    frames = 16 * len(item_ms)
    return {"contender": contender, "item_ms": item_ms, "errors": list(errors),
            "frames": {"exact_required": contender.startswith("fluxon"), "frames": frames,
                       "bit_exact": frames if frames_ok else 0, "worst_mean_abs_diff": 0.0,
                       "wrong": [] if frames_ok else ["frame 5 looks like frame 6"], "off": [],
                       "ok": frames_ok, "verdict": "bit-exact"},
            "audio": [{"video": v, "t": 1.0, "start_s": 1.0, "exact": shift == 0 and not diff,
                       "shift": shift, "max_diff": diff} for v, shift, diff in audio]}


def test_legacy_av_clips_results_convert_to_records():
    from goals import evaluate
    from legacy import convert
    from render import markdown
    from suites import SUITES

    exact = [("a.mp4", 0, 0.0), ("b.webm", 0, 0.0)]
    data = {"command": "python bench/av_clips.py --quick", "generated": "x", "duration_s": 9.0,
            "settings": {"items": 1, "seconds": 12, "repeat": 2, "latency_ms": 10.0},
            "machine": {"cpu": "x", "cores": 2, "memory_gib": 1, "os": "y", "git": "z"},
            "versions": {"python": "3.11"}, "items": 2, "videos": ["a.mp4", "b.webm"],
            "passes": [av_pass("fluxon", [100.0, 100.0], exact),
                       av_pass("fluxon (exact_audio=False)", [50.0, 50.0],
                               [("a.mp4", 0, 0.02), ("b.webm", 0, 0.0)]),
                       av_pass("torchcodec", [400.0], exact[:1],
                               errors=["b.webm @ 1.00 s: RuntimeError: No audio frames"]),
                       av_pass("pyav", [200.0, 200.0],
                               [("a.mp4", -145, 0.2), ("b.webm", None, float("nan"))]),
                       av_pass("decord AVReader", [50.0, 50.0], exact, frames_ok=False)],
            "remote": [av_pass("fluxon cold", [200.0, 200.0], exact),
                       av_pass("fluxon warm", [100.0, 100.0], exact),
                       av_pass("pyav", [400.0, 400.0], exact)]}
    results = convert(data)
    assert results.meta["suite"] == "av" and results.meta["videos"] == []
    assert "a.mp4, b.webm" in results.meta["notes"][0]
    flux, preroll, torchcodec, pyav, decord, cold, warm, remote_pyav = results.records
    # every row is a case of the av suite at the JSON's latency
    assert {r.case for r in results.records} <= set(SUITES["av"].cases({"latencies": "10"}))
    assert flux.items_per_s == 10.0 and flux.counts["audio_exact_share"] == 1.0
    assert flux.counts["audio_by_video"] == {"a.mp4": [1, 1], "b.webm": [1, 1]}
    assert preroll.case.access == "exact_audio=False" and preroll.counts["audio_exact"] == 1
    assert preroll.counts["audio_shifts"] == [0] and preroll.counts["audio_max_diff"] == 0.02
    assert pyav.ok and pyav.counts["audio_shifts"] == [-145]
    assert pyav.counts["audio_no_match"] == 1 and pyav.counts["audio_max_diff"] == 0.2
    assert not torchcodec.ok and torchcodec.verdict.startswith("FAILED on 1 item(s): b.webm")
    assert not decord.ok and decord.case.family == "decord"
    assert (cold.case.cache, warm.case.cache, warm.case.store) == ("cold", "warm-kv", "agent")
    assert remote_pyav.case.access == "download" and remote_pyav.case.latency_ms == 10.0
    outcomes = evaluate(SUITES["av"].goals, results.records, 10.0, [])
    assert [o.status for o in outcomes[:3]] == ["met"] * 3
    # the best exact peer on the local files: not decord (wrong frames), not torchcodec
    assert outcomes[3].bottom is pyav and outcomes[3].ratio == pytest.approx(2.0)
    text = markdown(results, [])
    assert "| audio exact |" in text and "| -145, no match |" in text


def test_lerobot_plans_and_summaries():
    """The lerobot suite's workloads are seeded, of the sizes asked, 16 consecutive
    rows in rows16; a row's summary is the median of the passes that ran."""
    from types import SimpleNamespace

    from lerobot_group import plans, summarise

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


def test_the_lerobot_suite_makes_bench_lerobots_runs():
    from cases import Filters, select
    from lerobot_group import RUNS, case_of, name_of, run_of
    from matrix import parser, settings_of
    from suites import SUITES

    suite = SUITES["lerobot"]
    cases = select(suite.cases(suite.defaults), Filters())
    by_workload = {}
    for case in cases:
        by_workload.setdefault(case.workload, []).append(case.label())
    assert by_workload["lerobot-clip-w0"] == [
        "lerobot-torchcodec", "lerobot-pyav", "daft", "fluxon local file",
        "fluxon local file · uint8", "fluxon cold", "fluxon cold+lookahead", "fluxon warm-kv"]
    assert "daft" not in by_workload["lerobot-clip-w2"]  # Daft runs its own threads
    assert "fluxon local file · uint8" not in by_workload["lerobot-plain"]  # no batch
    assert "fluxon cold+lookahead" not in by_workload["lerobot-plain"]  # no next batch
    # every case is one of bench/lerobot.py's runs and contenders, and back
    for case in cases:
        assert case_of(run_of(case), name_of(case), 10.0) == case
    assert set(map(run_of, cases)) == set(RUNS)
    ap = parser()
    quick = settings_of(suite, ap.parse_args(["--suite", "lerobot", "--quick"]), ap)
    assert (quick["episodes"], quick["clip_batches"], quick["repeat"]) == (4, 2, 1)
    local = select(cases, Filters.parse(stores="local", contenders="fluxon,daft"))
    assert {c.family for c in local} == {"fluxon", "daft"}
    with pytest.raises(SystemExit):
        settings_of(suite, ap.parse_args(["--suite", "lerobot", "--episodes", "0"]), ap)


def test_legacy_lerobot_results_convert_to_records():
    from legacy import convert

    def summary(rate, main, worker=None, wrong=0):
        check = {"frames": 100, "exact": 100 - wrong, "right": 0, "wrong": wrong,
                 "pad_flags_wrong": 0}
        passes = [{"items_per_s": r, "items": 80} for r in (rate - 1, rate + 1)]
        return {"items_per_s": rate, "main_mib": main, "worker_mib": worker,
                "client_cpu_s": 20.0, "servers_cpu_s": 1.0, "check": check, "examples": [],
                "passes": passes}
    data = {"command": "python bench/lerobot.py", "settings": {"latency_ms": 10.0},
            "machine": {"cores": 2}, "versions": {"python": "3.11"},
            "lerobot_versions": {"lerobot": "0.6.1"},
            "runs": {"clip w2": {"LeRobot (torchcodec)": summary(10.0, 800, 1600),
                                 "fluxon": summary(15.0, 400, 1200),
                                 "fluxon S3 cold": summary(12.0, 400, 1200, wrong=1)},
                     "plain w0": {"fluxon": {"error": "boom", "passes": [{"error": "boom"}]}}}}
    results = convert(data)
    assert results.meta["suite"] == "lerobot"
    assert results.meta["versions"]["LeRobot's lerobot"] == "0.6.1"
    base, local, cold, failed = results.records
    assert base.case.family == "lerobot-torchcodec" and base.case.workload == "lerobot-clip-w2"
    assert local.case.store == "local" and local.items_per_s_rounds == [14.0, 16.0]
    assert local.items == 160 and local.counts["worker_rss_mib"] == 1200
    assert cold.case.store == "s3" and cold.case.cache == "cold" and not cold.ok
    assert cold.frames_wrong == 1 and "1 wrong" in cold.verdict
    assert failed.case.workload == "lerobot-plain" and failed.verdict == "FAILED: boom"


def test_the_training_swap_compares_every_step_with_lerobots_run():
    """bench/lerobot_train.py: a fluxon run agrees only if every batch digest and every
    loss equals LeRobot's run's, step by step."""
    from lerobot_train import compare, markdown

    def run(losses: list[float], batches: str = "abc") -> dict:
        return {"wall_s": 9.0, "steps": [{"batch": b, "loss": loss, "data_s": 0.1 * k,
                                          "update_s": 1.0}
                                         for k, (b, loss) in enumerate(zip(batches, losses))]}

    same = compare({"lerobot": run([3, 2, 1]), "fluxon": run([3, 2, 1]),
                    "fluxon-agent": run([3, 2, 1])})
    assert same["agree"] and same["fluxon"]["same_batches"] == 3
    assert same["fluxon"]["data_s_median"] == pytest.approx(0.15)  # the first step apart
    differ = compare({"lerobot": run([3, 2, 1]), "fluxon": run([3, 2, 1], "abd"),
                      "fluxon-agent": run([3, 2, 1.5])})
    assert not differ["agree"]
    assert differ["fluxon"]["same_batches"] == 2 and differ["fluxon-agent"]["same_losses"] == 2
    text = markdown({"args": {"steps": 3, "batch_size": 4, "episodes": 2}, "command": "c",
                     "versions": {"lerobot": "0.6.1", "torch": "t", "python": "3.12"},
                     "machine": "m", "by_workers": {"0": same}})
    assert "| 0 | fluxon's (agent + Redis) | 3 | 3/3 | 3/3 |" in text



def test_the_parity_check_wants_dtype_shape_and_values_alike():
    """bench/lerobot_parity.py: a value agrees with LeRobot's only with the same dtype,
    shape and values; a uint8 video frame is LeRobot's float frame times 255."""
    from lerobot_parity import same

    torch = pytest.importorskip("torch")
    frame = torch.tensor([[0, 128, 255]], dtype=torch.uint8)
    floats = frame.numpy().astype(np.float32) / np.float32(255)
    assert same(frame, floats, uint8_video=True)
    assert not same(frame, floats, uint8_video=False)  # uint8 where LeRobot gives float
    assert same(torch.from_numpy(floats), floats, uint8_video=False)
    assert not same(torch.from_numpy(floats[None]), floats, uint8_video=False)  # a T too many
    assert not same(torch.from_numpy(floats.astype(np.float64)), floats, uint8_video=False)
    records = [{"role": "user", "tool_calls": [{"name": "halt"}]}]
    assert same(records, [dict(records[0])], uint8_video=False)
    assert not same(records, [{"role": "user", "tool_calls": ['{"name": "halt"}']}],
                    uint8_video=False)

def test_the_threads_suite_compares_settings_of_one_contender():
    """bench/threads.py's results, converted: the goal is fluxon 2 threads ÷ 1 thread per
    video; a flagged peer is never the best exact one."""
    from legacy import convert
    from render import markdown

    def row(one, two, auto, ok=True):
        return {k: {"clips_per_s": v, "ok": ok, "verdict": "bit-exact" if ok else "OFF: x"}
                for k, v in zip(("1", "2", "auto"), (one, two, auto))}

    machine = {"cpu": "x", "cores": 2, "memory_gib": 1, "os": "y", "git": "z"}
    results = convert({"command": "python bench/threads.py", "generated": "now",
                       "duration_s": 1, "machine": machine, "versions": {}, "cpus": 2,
                       "settings": {"clips": 4, "repeat": 1},
                       "videos": {"v.mp4": {"fluxon": row(2.0, 3.6, 3.2),
                                            "pyav": row(1.0, 1.2, 2.0, ok=False),
                                            "spdl": row(1.5, 1.8, 1.6)}}})
    assert results.meta["suite"] == "threads" and len(results.records) == 9
    text = markdown(results, [])
    assert ("| fluxon 2 threads ÷ 1 thread | v.mp4, clips | fluxon · 2 threads 3.60 clips/s "
            "| fluxon · 1 thread 2.00 clips/s | 1.80× | ≥ 1.7× | met |") in text
    assert "| spdl · auto threads 1.60 clips/s | 2.00× | (context) |" in text
    assert "| v.mp4 | local file | ⚠ pyav · 2 threads | 1.20 | OFF: x |" in text


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


def test_the_codecs_group_runs_only_the_selected_cases(tmp_path):
    from cases import Filters, select
    from codecs_group import CodecsGroup
    from suites import SUITES

    settings = {**SUITES["local"].defaults, "sweep_piece_sizes": ""}
    only = Filters.parse(workloads="clips", contenders="pyav,fluxon", caches="none,warm-kv")
    cases = select(SUITES["local"].cases(settings), only)
    steps = [label for label, _ in CodecsGroup(cases, settings, tmp_path, True).steps()]
    assert steps == ["dataset", "references", "redis", "which peers import", "clips pyav",
                     "clips fluxon-local", "clips fluxon cold @ 0 ms",
                     "clips fluxon warm-kv @ 0 ms", "decode floor"]
