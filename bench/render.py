"""The one report of a results file: conditions, the goals the suite declares (met or
missed, with the figures), one table per workload (rows: store x latency x contender x
cache, per video where the suite measures per video; columns from the records) and the
charts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cases import CACHES, DATASETS, LEROBOT_PEERS, PEERS, WORKLOADS, Case, size_text
from goals import Outcome, evaluate, value
from harness import DASH, KiB, MiB, grouped, kinds_of, listing, num, table, times
from record import Record, Results
from suites import SUITES

Column = tuple[str, Callable[[Record], str]]


def f(x: float | None, digits: int = 2) -> str:
    return num(x, digits, grouped=True)


def store_text(case: Case) -> str:
    if case.store == "local":
        return "local file"
    cap = f", {case.bandwidth_mbps:g} MB/s" if case.bandwidth_mbps else ""
    return f"{case.store} {case.latency_ms:g} ms{cap}"


def row_name(r: Record) -> str:
    return ("" if r.ok else "⚠ ") + r.case.label()


def check_text(r: Record) -> str:
    text = r.verdict
    paths = r.counts.get("path")
    if isinstance(paths, dict) and paths:  # fluxon's read paths (indexed, sequential...)
        text += " · " + "+".join(sorted(paths))
    if r.counts.get("pyav_fallbacks"):
        text += f" · {r.counts['pyav_fallbacks']} re-decode(s) from the first keyframe"
    return text[:160].replace("|", "/")


def rate_text(r: Record, per: float = 1.0) -> str:
    """A rate (per item × ``per``): the median and the range over rounds."""
    if not r.items_per_s:
        return DASH
    scale, rounds = r.clips_per_item * per, r.items_per_s_rounds
    spread = (f" ({f(min(rounds) * scale)}–{f(max(rounds) * scale)})" if len(rounds) > 1
              else "")
    return f(r.items_per_s * scale) + spread


def per_clip(r: Record, x: float | None) -> float | None:
    return x / r.clips_per_item if x is not None else None


def pass_count_per_clip(r: Record, key: str) -> float | None:
    """fluxon's own count (a median of pass sums) per clip read through FluxonFS."""
    got = r.counts.get(key)
    if not (r.case.via_store and isinstance(got, (int, float)) and r.items):
        return None
    return got * r.rounds / r.items / r.clips_per_item


COMMON: list[Column] = [
    ("video", lambda r: r.video or DASH), ("store", lambda r: store_text(r.case)),
    ("piece", lambda r: size_text(r.case.piece_size) if r.case.piece_size else DASH),
    ("row", row_name)]
CLIP_COLUMNS: list[Column] = [
    ("clips/s (median, range)", rate_text),
    ("p50 ms/item", lambda r: f(r.item_ms_p50, 0)), ("p95", lambda r: f(r.item_ms_p95, 0)),
    ("CPU ms/clip", lambda r: f(per_clip(r, r.cpu_s * 1e3 if r.cpu_s is not None else None),
                                0)),
    ("store CPU ms/clip", lambda r: f(per_clip(r, r.counts.get("store_cpu_ms_per_item")), 0)),
    ("open ms", lambda r: f(r.open_ms, 1) + (f" (+{f(r.index_ms, 1)} scan)" if r.index_ms
                                             else "")),
    ("floor ms", lambda r: f(r.floor_ms, 0)),
    ("clip/floor", lambda r: times(r.item_ms_p50 / r.floor_ms / r.clips_per_item)
     if r.item_ms_p50 and r.floor_ms else DASH),
    ("MiB/clip", lambda r: f(per_clip(r, r.mib_per_item))),
    ("req/clip", lambda r: f(per_clip(r, r.requests_per_item), 1)),
    ("conns", lambda r: f(r.connections, 0)),
    ("RT before 1st frame p50", lambda r: f(r.round_trips_p50, 1)),
    ("KV RT/item", lambda r: f(r.kv_round_trips_per_item, 1)),
    ("KV hit/miss per pass", lambda r: f"{f(r.counts['kv_hits'], 0)}/"
     f"{f(r.counts.get('kv_misses'), 0)}" if r.case.via_store and "kv_hits" in r.counts
     else DASH),
    ("frames decoded/clip", lambda r: f(pass_count_per_clip(r, "frames_decoded"), 0)),
    ("FFmpeg range reads/clip", lambda r: f(pass_count_per_clip(r, "range_reads"), 1)),
    ("FFmpeg range MiB/clip", lambda r: f((pass_count_per_clip(r, "range_bytes") or 0) / MiB
                                          if "range_bytes" in r.counts else None)),
    ("peak RSS MiB", lambda r: f(r.peak_rss_mib, 0)), ("frames", check_text)]
SEQUENTIAL_COLUMNS: list[Column] = [
    ("frames/s", lambda r: rate_text(r, (r.frames_per_item or 0) / r.clips_per_item)),
    ("ms", lambda r: f(r.item_ms_p50, 0)),
    ("remote MiB", lambda r: f(r.mib_per_item)), ("peak RSS MiB", lambda r: f(r.peak_rss_mib, 0)),
    ("frames", check_text)]
METADATA_COLUMNS: list[Column] = [
    ("ms/video p50 (range of round medians)", lambda r: f(r.item_ms_p50, 1) + (
        f" ({f(min(r.round_median_ms), 1)}–{f(max(r.round_median_ms), 1)})"
        if len(r.round_median_ms) > 1 else "")),
    ("p95", lambda r: f(r.item_ms_p95, 1)), ("req/video", lambda r: f(r.requests_per_item)),
    ("KiB/video", lambda r: f(r.mib_per_item * KiB if r.mib_per_item is not None else None, 0)),
    ("KV RT/video", lambda r: f(r.kv_round_trips_per_item)),
    ("conns", lambda r: f(r.connections, 0)),
    ("frame count, fps, duration", check_text)]


def count_text(r: Record, key: str, digits: int = 2) -> str:
    got = r.counts.get(key)
    return f(got, digits) if isinstance(got, (int, float)) else DASH


def pair_text(r: Record, a: str, b: str) -> str:
    return f"{r.counts[a]}/{r.counts[b]}" if a in r.counts and b in r.counts else DASH


def loader_frames(r: Record) -> str:
    """The verdict; for a flagged row, per codec (a peer may fail on one codec only)."""
    by_codec = r.counts.get("by_codec")
    if isinstance(by_codec, dict) and by_codec:
        return "⚠ " + " · ".join(f"{c} {v}" for c, v in by_codec.items())[:200]
    return check_text(r)


LOADER_COLUMNS: list[Column] = [
    ("clips/s (median, range)", rate_text),
    ("CPU ms/clip", lambda r: f(r.cpu_s * 1e3 if r.cpu_s is not None else None, 0)),
    ("epoch s", lambda r: count_text(r, "epoch_s")),
    ("workers up s", lambda r: count_text(r, "workers_up_s")),
    ("first batch s", lambda r: count_text(r, "first_batch_s")),
    ("other CPU", lambda r: count_text(r, "other_cpu_cores") + (
        f" ({r.counts['redone']} redone)" if r.counts.get("redone") else "")),
    ("worker CPU", lambda r: " ".join(f"{c:.2f}" for c in r.counts.get("worker_cpu", []))
     or DASH),
    ("cores busy: workers / all", lambda r: count_text(r, "cores_busy") + " / "
     + count_text(r, "machine_busy") if "cores_busy" in r.counts else DASH),
    ("store model's cores / workers' share of the rest", lambda r: count_text(
        r, "model_cores") + " / " + count_text(r, "cores_busy_left")
     if "cores_busy_left" in r.counts else DASH),
    ("fluxon reads", lambda r: count_text(r, "reads", 0)),
    ("KV hit/miss", lambda r: pair_text(r, "kv_hits", "kv_misses")),
    ("MiB/clip from the store", lambda r: f(r.mib_per_item, 3)),
    ("index scan/KV", lambda r: pair_text(r, "index_scans", "index_from_kv")),
    ("pages ahead/hit/wasted", lambda r: f"{r.counts['ahead_pages']}/{r.counts['ahead_hits']}/"
     f"{r.counts['ahead_wasted']}" if r.counts.get("ahead_pages") else DASH),
    ("frames", loader_frames)]


LEROBOT_COLUMNS: list[Column] = [
    ("items/s (rows16: rows/s; median, range)", rate_text),
    ("peak RSS main MiB", lambda r: f(r.peak_rss_mib, 0)),
    ("peak RSS per worker MiB", lambda r: count_text(r, "worker_rss_mib", 0)),
    ("CPU-s: client / store's servers", lambda r: count_text(r, "client_cpu_s", 1) + (
        " / " + count_text(r, "servers_cpu_s", 1) if r.case.store != "local" else "")),
    ("frames vs the ffmpeg CLI", check_text)]


# ---- the av suite's tables ----

def shift_text(r: Record) -> str:
    """The shifts (samples) at which a row's inexact audio matches the CLI's, and whether
    some matched nowhere."""
    shifts = [str(x) for x in r.counts.get("audio_shifts", [])]
    return ", ".join(shifts + ["no match"] * bool(r.counts.get("audio_no_match"))) or DASH


AV_COLUMNS: list[Column] = [
    ("A-V clips/s (median, range)", rate_text),
    ("p50 ms/clip", lambda r: f(r.item_ms_p50, 0)),
    ("CPU ms/clip", lambda r: f(r.cpu_s * 1e3 if r.cpu_s is not None else None, 0)),
    ("MiB/clip from the store", lambda r: f(r.mib_per_item)),
    ("req/clip", lambda r: f(r.requests_per_item, 1)),
    ("audio exact", lambda r: pair_text(r, "audio_exact", "audio_items")),
    ("audio exact per video", lambda r: " · ".join(
        f"{exact}/{n}" for exact, n in r.counts.get("audio_by_video", {}).values()) or DASH),
    ("audio shift (samples)", shift_text),
    ("audio max diff", lambda r: count_text(r, "audio_max_diff", 4)),
    ("frames", check_text)]


def columns_of(workload: str) -> list[Column]:
    if workload.startswith("lerobot-"):
        return COMMON + LEROBOT_COLUMNS
    return COMMON + {"sequential": SEQUENTIAL_COLUMNS, "metadata": METADATA_COLUMNS,
                     "loader-clips": LOADER_COLUMNS,
                     "loader-batched": LOADER_COLUMNS, "av-clips": AV_COLUMNS,
                     "av-clips-open": AV_COLUMNS}.get(workload, CLIP_COLUMNS)


def rank(r: Record, videos: list[str]) -> tuple:
    """Rows in a table: video, latency, peers before fluxon, then cache state."""
    c = r.case
    peers = (*PEERS, *LEROBOT_PEERS)
    family = (peers.index(c.family) if c.family in peers else len(peers)) if not c.fluxon \
        else len(peers) + 1 + (c.store != "local")
    cache = (CACHES.index(c.cache) if c.cache in CACHES else -1, c.access)
    return (videos.index(r.video) if r.video in videos else -1, c.latency_ms,
            c.piece_size or 0, 99 if c.threads == 0 else c.threads or 0, family, cache,
            c.label())


def workload_table(records: list[Record], videos: list[str]) -> str:
    """One table; a column every row leaves empty is left out."""
    videos = videos + [v for v in dict.fromkeys(r.video for r in records) if v not in videos]
    rows = sorted(records, key=lambda r: rank(r, videos))
    cols = columns_of(rows[0].case.workload)
    cells = [[fn(r) for _, fn in cols] for r in rows]
    keep = [i for i in range(len(cols)) if any(row[i] != DASH for row in cells)]
    return table([cols[i][0] for i in keep], [[row[i] for i in keep] for row in cells])


def layout_table(records: list[Record], videos: list[str]) -> str:
    """The rows again, one column per container layout: p50 ms per item and, where
    fluxon counted them, MiB from the origin and round trips before the first frame."""
    rows = sorted((r for r in records if isinstance(r.counts.get("by_layout"), dict)),
                  key=lambda r: rank(r, videos))
    layouts = list(dict.fromkeys(k for r in rows for k in r.counts["by_layout"]))

    def cell(x: dict | None) -> str:
        if not x:
            return DASH
        parts = [f"{f(x['item_ms_p50'], 0)} ms"]
        if x.get("mib_per_item") is not None:
            parts.append(f"{f(x['mib_per_item'])} MiB")
        if x.get("round_trips_p50") is not None:
            parts.append(f"{f(x['round_trips_p50'], 0)} RT")
        return " · ".join(parts) + f" ({x['items']})"
    return table(["store", "row", *layouts],
                 [[store_text(r.case), row_name(r),
                   *(cell(r.counts["by_layout"].get(k)) for k in layouts)] for r in rows])


def sections(records: list[Record], videos: list[str]) -> list[str]:
    out = []
    groups = grouped(records, lambda r: (r.case.workload, r.case.dataset,
                                         r.case.piece_size is not None))
    order = list(WORKLOADS)
    for (workload, dataset, sweep), rows in sorted(groups.items(),
                                                   key=lambda g: (order.index(g[0][0]), g[0][2])):
        title = f"## {workload}" + (": piece-size sweep" if sweep else "")
        about = f"{WORKLOADS[workload]}; {dataset} dataset: {DATASETS.get(dataset, '?')}"
        out += [title, "", about + ".", "", workload_table(rows, videos), ""]
        if any("by_layout" in r.counts for r in rows):
            out += ["By container layout: p50 ms per item; for fluxon through the store also "
                    "MiB per item from the origin and round trips before the first frame "
                    "(p50); the items in brackets.", "", layout_table(rows, videos), ""]
    return out


def goal_cells(o: Outcome) -> list[str]:
    g = o.goal
    where = (o.video + ", " if o.video else "") + g.top.workload
    if o.top is not None and o.top.case.store != "local":
        where += ", " + store_text(o.top.case)

    def figure(r: Record | None, name: str) -> str:
        got = value(r, name)
        rate = "items/s" if g.top.workload.startswith("lerobot-") else "clips/s"
        unit = {"clips_per_s": rate, "item_ms_p50": "ms", "mib_per_item": "MiB/item",
                "peak_rss_mib": "MiB", "worker_rss_mib": "MiB per worker",
                "frames_wrong": "wrong frames",
                "needed_mib_per_item": "MiB/item needed", "floor_ms": "ms floor",
                "round_trips_p50": "round trips", "cores_busy": "of the cores busy",
                "machine_busy": "of the cores busy",
                "cores_busy_left": "of the cores left busy",
                "audio_exact_share": "of the items' audio exact",
                "span_piece_mib_per_item":
                "MiB/item in the spans' pieces", "open_model_mib_per_item":
                "MiB/item in the spans' and the scan's pieces"}.get(name, name)
        return f"{r.case.label()} {f(got)} {unit}" if r is not None and got is not None \
            else DASH
    spread = f" (rounds {o.rounds[0]:.2f}–{o.rounds[1]:.2f})" if o.rounds else ""
    shown = times(o.ratio) if (g.bottom or g.bottom_figure) else f(o.ratio)
    return [g.text, where, figure(o.top, g.figure),
            figure(o.bottom, g.bottom_figure or g.figure) if (g.bottom or g.bottom_figure)
            else DASH, shown + spread, g.threshold(), o.status]


def dataset_table(videos: list[dict]) -> str:
    """One row per video, or per kind of video (codec, size, layout) when there are many."""
    if len(videos) <= 10:
        return table(["video", "codec", "resolution", "fps", "frames", "GOP", "layout", "MiB",
                      "container KiB"],
                     [[v["video"], v["codec"], f"{v['width']}x{v['height']}", str(v["fps"]),
                       str(v["frames"]), str(v["gop"]), v["layout"], f(v["file_bytes"] / MiB),
                       f(v["container_bytes"] / KiB, 1)] for v in videos])
    kinds = kinds_of({**v, "layout": v["layout"] + (" (long)" if "_long_" in v["video"] else "")}
                     for v in videos)

    def span(vs: list[dict], k: str, scale: float, digits: int) -> str:
        lo, hi = min(v[k] for v in vs) / scale, max(v[k] for v in vs) / scale
        return f"{lo:.{digits}f}–{hi:.{digits}f}"
    return table(["kind", "videos", "frames", "GOP", "file MiB", "container KiB"],
                 [[kind, str(len(vs)), span(vs, "frames", 1, 0),
                   "/".join(sorted({str(v["gop"]) for v in vs})), span(vs, "file_bytes", MiB, 2),
                   span(vs, "container_bytes", KiB, 0)] for kind, vs in kinds.items()])


def markdown(results: Results, charts: list[Path]) -> str:
    meta, records = results.meta, results.records
    suite = SUITES.get(meta["suite"])
    videos = [v["video"] for v in meta.get("videos", [])]
    m = meta["machine"]
    head = [f"# Benchmark suite `{meta['suite']}`" + (f": {suite.about}" if suite else ""), "",
            f"`{meta.get('command')}` — {meta.get('generated')}, {f(meta.get('duration_s'), 0)} s"
            + (f"; converted from the JSON of `{meta['converted_from']}`"
               if meta.get("converted_from") else "") + ".", "",
            f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, "
            f"git {m['git']}.", "",
            "Versions: " + listing(meta.get("versions", {}).items()) + ".", "",
            "Settings: " + ", ".join(f"{k} {v}" for k, v in meta.get("settings", {}).items()
                                     if k not in ("data", "out", "render", "quick")
                                     and not isinstance(v, (dict, list))) + ".", ""]
    head += [f"- Note: {n}" for n in meta.get("notes", [])]
    head += [f"- Skipped: {k} ({v})" for k, v in meta.get("skipped", {}).items()]
    head += ["", "How to read it: bench/README.md (the runner's --help). A row is one case "
             "(store x contender x cache); rates are per round (or repeat) medians, the "
             "range over rounds in brackets; ⚠ marks a row whose frames failed the check "
             "(fluxon must equal the ffmpeg CLI bit for bit, peers show the right frame "
             "within tolerance); a flagged row is never the best exact peer.", ""]
    if videos:
        head += ["## Dataset", "", dataset_table(meta["videos"]), ""]
    if suite and suite.goals:
        outcomes = evaluate(suite.goals, records, suite.goal_latency_ms, videos)
        head += ["## Goals", "", "Declared by the suite (bench/suites.py); \"best exact "
                 "peer\" is the fastest peer row whose frames passed the check.", "",
                 table(["goal", "where", "top", "bottom", "ratio", "goal", "status"],
                       [goal_cells(o) for o in outcomes]), ""]
    body = sections(records, videos)
    body += [f"![{p.stem}]({p.name})" for p in charts]
    if suite and suite.notes:
        body += ["", "## Notes", "", *(f"- {n}" for n in suite.notes)]
    return "\n".join(head + body).rstrip() + "\n"


def write(results: Results, out: Path, stem: str) -> list[Path]:
    """<out>/<stem>.md and its charts (the JSON is the caller's: a re-render keeps it)."""
    import charts

    path = out / f"{stem}.md"  # the stem may name a folder: remote-long/remote
    path.parent.mkdir(parents=True, exist_ok=True)
    videos = [v["video"] for v in results.meta.get("videos", [])]
    drawn = charts.draw(sorted(results.records, key=lambda r: rank(r, videos)), path.parent,
                        path.stem, videos)
    path.write_text(markdown(results, drawn))
    return [path, *drawn]
