"""remote.md, remote.json and remote.png of bench/remote.py, from its passes."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from remote_summary import summarise
from remote_targets import Target, targets
from scenario import write_outputs
from tables import KiB, MiB, fill, listing, num, table

def _f(x: float | None, digits: int = 2) -> str:
    return num(x, digits, grouped=True)


def _row_name(s: dict) -> str:
    name = s["label"]
    if s["row"]["family"] == "fluxon" and s["workload"] in ("batched", "metadata"):
        how = "read_many" if s["workload"] == "batched" else "video_metadata"
        name = name.replace("fluxon ", f"fluxon {how} ", 1)
    return ("" if s["ok"] else "⚠ ") + name


def _check_text(s: dict) -> str:
    text = s["verdict"]
    if s["row"]["family"] == "fluxon" and s.get("fluxon", {}).get("paths"):
        text += " · " + listing(s["fluxon"]["paths"].items())
    if s.get("fallbacks"):
        text += f" · {s['fallbacks']} re-decode(s) from the first keyframe"
    return text.replace("|", "/")


def _order(summaries: list[dict], workload: str) -> list[dict]:
    rank = {"cold": 0, "warm-kv": 1, "warm-kv+shared": 2, "warm-reader": 3}
    rows = [s for s in summaries if s["workload"] == workload]
    return sorted(rows, key=lambda s: (s["latency_ms"], s["row"]["family"] == "fluxon",
                                       rank.get(s["row"].get("cache", ""), 0), s["label"]))


def _rate_cells(s: dict, per: str) -> list[str]:
    """L, row, clips/s (range), p50, p99, MiB and requests per clip or item, connections."""
    return [f"{s['latency_ms']:g}", _row_name(s),
            f"{_f(s['clips_per_s'])} ({_f(s['clips_per_s_min'])}–{_f(s['clips_per_s_max'])})",
            _f(s["item_ms_p50"], 0), _f(s["item_ms_p99"], 0), _f(s[f"mib_per_{per}"]),
            _f(s[f"requests_per_{per}"], 1), _f(s["connections_used"], 0)]


def clips_table(summaries: list[dict], workload: str = "clips") -> list[str]:
    return table(["L ms", "row", "clips/s (median, range)", "p50 ms", "p99 ms", "MiB/clip",
                  "req/clip", "conns", "open+index p50 ms", "KV RT/clip", "frames"],
                 [[*_rate_cells(s, "clip"), _f(s.get("fluxon", {}).get("open_index_ms_p50"), 1),
                   _f(s["fluxon"]["kv_round_trips_per_item"], 1) if s.get("fluxon") else "–",
                   _check_text(s)] for s in _order(summaries, workload)])


def batched_table(summaries: list[dict]) -> list[str]:
    return table(["L ms", "row", "clips/s (median, range)", "ms/item p50", "p99", "MiB/item",
                  "req/item", "conns", "frames decoded/item", "frames"],
                 [[*_rate_cells(s, "item"),
                   _f(s.get("fluxon", {}).get("frames_decoded_per_item"), 0), _check_text(s)]
                  for s in _order(summaries, "batched")])


def metadata_table(summaries: list[dict]) -> list[str]:
    return table(["L ms", "row", "ms/video p50 (range of round medians)", "p99", "req/video",
                  "KiB/video", "KV RT/video", "conns", "frame count, fps, duration"],
                 [[f"{s['latency_ms']:g}", _row_name(s),
                   f"{_f(s['item_ms_p50'], 1)} ({_f(s['pass_median_ms_min'], 1)}–"
                   f"{_f(s['pass_median_ms_max'], 1)})", _f(s["item_ms_p99"], 1),
                   _f(s["requests_per_item"], 2), _f((s["mib_per_item"] or 0) * 1024, 0),
                   _f(s["fluxon"]["kv_round_trips_per_item"], 2) if s.get("fluxon") else "–",
                   _f(s["connections_used"], 0), _check_text(s)]
                  for s in _order(summaries, "metadata")])


def targets_table(rows: list[Target]) -> list[str]:
    return table(["target", "condition", "fluxon", "best peer / bound", "ratio", "goal",
                  "status"], [[t.target, t.condition, t.fluxon, t.other, t.ratio, t.goal,
                               t.status] for t in rows])


def _dataset(results: dict) -> list[str]:
    """One row per kind of video (codec, size, layout) with the ranges over its videos."""
    kinds: dict[str, list[dict]] = {}
    for v in results["videos"]:
        long = " (long)" if "_long_" in v["video"] else ""
        kinds.setdefault(f"{v['codec']} {v['width']}x{v['height']} {v['layout']}{long}",
                         []).append(v)

    def span(vs: list[dict], key: str, scale: float, digits: int) -> str:
        return (f"{min(v[key] for v in vs) / scale:.{digits}f}–"
                f"{max(v[key] for v in vs) / scale:.{digits}f}")
    return table(["kind", "videos", "frames", "GOP", "file MiB", "container KiB"],
                 [[kind, str(len(vs)), span(vs, "frames", 1, 0),
                   "/".join(sorted({str(v["gop"]) for v in vs})),
                   span(vs, "file_bytes", MiB, 2), span(vs, "container_bytes", KiB, 0)]
                  for kind, vs in kinds.items()])


def _distinct_frames(results: dict) -> float:
    """Distinct frames per batched item, on average (its K clips overlap)."""
    items = [i for plan in results.get("plans", {}).get("batched", []) for i in plan]
    return (sum(len({f for c in i["clips"] for f in c}) for i in items) / len(items)
            if items else 0)


def _conditions(results: dict) -> dict[str, object]:
    c = results["conditions"]
    m, store, wl = c["machine"], c["store"], c["workload"]
    bw = store["bandwidth_mbps_per_connection"]
    return dict(
        command=results["command"], generated=results["generated"],
        duration=f"{results['duration_s']:.0f}", git=m["git"],
        latencies=", ".join(f"{x:g}" for x in store["latencies_ms"]),
        latency_model=store["latency"], relay=store["relay"],
        bandwidth=(f"**{bw:g} MB/s per connection** (10^6 B/s, server -> client)" if bw
                   else "no bandwidth cap"),
        peers=store["peers"], fluxon=store["fluxon"],
        piece_kib=(store.get("piece_size") or 0) // KiB, clip=wl["clip"],
        rounds=", ".join(f"{v} at {k} ms" for k, v in wl["rounds"].items()),
        threads=wl["threads"], k=wl["batched_clips"], frames_asked=wl["batched_clips"] * 16,
        cpu=m["cpu"], cores=m["cores"], memory=m["memory_gib"], os=m["os"],
        load=", ".join(f"{k}: {v[0]:.2f}" for k, v in m["load_average"]),
        versions=listing(c["versions"].items()))


def markdown(results: dict, summaries: list[dict], target_rows: list[Target]) -> str:
    notes = [f"- {n}" for n in results.get("notes", [])]
    notes += [f"- {family} skipped: {why}" for family, why in results.get("skipped", {}).items()]
    return fill("remote", **_conditions(results),
                distinct=f"{_distinct_frames(results):.0f}",
                dataset_table="\n".join(_dataset(results)),
                targets_table="\n".join(targets_table(target_rows)),
                clips_table="\n".join(clips_table(summaries)),
                batched_table="\n".join(batched_table(summaries)),
                metadata_table="\n".join(metadata_table(summaries)),
                tail="".join("\n" + line for line in notes))


# ---- chart ----

def chart(summaries: list[dict], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 8))
    cmap = plt.get_cmap("tab20")
    every = list(dict.fromkeys(s["label"] for w in ("clips", "batched", "metadata")
                               for s in _order(summaries, w)))
    colour = {name: cmap(i % 20) for i, name in enumerate(every)}
    panels = (("clips", "clips_per_s", "random clip per item: clips/s"),
              ("batched", "clips_per_s", "K clips of one video per item: clips/s"),
              ("metadata", "item_ms_p50", "metadata only: ms per video (p50, log)"))
    for ax, (workload, field, title) in zip(axes, panels):
        rows = _order(summaries, workload)
        lats = sorted({s["latency_ms"] for s in rows})
        names = list(dict.fromkeys(s["label"] for s in rows))
        width = 0.8 / max(len(names), 1)
        for n, name in enumerate(names):
            xs, ys, lo, hi, flags = [], [], [], [], []
            for x, lat in enumerate(lats):
                for s in (s for s in rows if s["latency_ms"] == lat and s["label"] == name):
                    y = s[field] or 0
                    xs.append(x + (n - (len(names) - 1) / 2) * width)
                    ys.append(y)
                    if field == "clips_per_s" and s["clips_per_s"]:
                        lo.append(y - s["clips_per_s_min"])
                        hi.append(s["clips_per_s_max"] - y)
                    elif s["pass_median_ms_min"] is not None:
                        lo.append(max(y - s["pass_median_ms_min"], 0))
                        hi.append(max(s["pass_median_ms_max"] - y, 0))
                    else:
                        lo.append(0)
                        hi.append(0)
                    flags.append(not s["ok"])
            bars = ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=colour[name],
                          label=("⚠ " if any(flags) else "") + name)
            for bar, flag in zip(bars, flags):
                if flag:
                    bar.set_hatch("xx")
        ax.set_xticks(range(len(lats)), [f"L = {x:g} ms" for x in lats])
        if workload == "metadata":
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=1,
                  frameon=False)
    fig.suptitle("fluxon through FluxonFS vs peers over HTTP (hatched: frames flagged); "
                 "bars: median over rounds, whiskers: range", fontsize=10)
    fig.tight_layout()
    path = out / "remote.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def write(results: dict, out: Path) -> list[Path]:
    summaries = summarise(results["passes"], results["conditions"]["workload"]["batched_clips"])
    target_rows = targets(results, summaries)
    results = {**results, "summaries": summaries, "targets": [asdict(t) for t in target_rows]}
    return [*write_outputs(out, "remote", json.dumps(results, indent=1, default=str),
                           markdown(results, summaries, target_rows)), chart(summaries, out)]
