"""PNG charts of the results (matplotlib, no display needed): grouped bars, flagged rows
hatched, for the local and the remote scenario."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MiB = 1 << 20
DPI = 80


def bars(ax: plt.Axes, rows: list[dict], group: str, ticks: list, key: str,
         colour: dict | None = None, ranges: bool = False) -> None:
    """One bar per row, grouped by ``row[group]`` in ``ticks`` order, one series per label;
    a flagged row is hatched (and its verdict written over it)."""
    names = list(dict.fromkeys(r["label"] for r in rows))
    width = 0.8 / max(len(names), 1)
    for n, name in enumerate(names):
        mine = [r for r in rows if r["label"] == name and r[group] in ticks]
        xs = [ticks.index(r[group]) + (n - (len(names) - 1) / 2) * width for r in mine]
        ys = [r[key] or 0 for r in mine]
        err = None
        if ranges:
            lo, hi = ("clips_per_s_min", "clips_per_s_max") if key == "clips_per_s" else \
                ("pass_median_ms_min", "pass_median_ms_max")
            err = [[max(y - (r[lo] if r[lo] is not None else y), 0) for r, y in zip(mine, ys)],
                   [max((r[hi] if r[hi] is not None else y) - y, 0) for r, y in zip(mine, ys)]]
        flagged = [not r["ok"] for r in mine]
        drawn = ax.bar(xs, ys, width, yerr=err, capsize=2 if ranges else 0,
                       color=(colour or {}).get(name),
                       label=("⚠ " if ranges and any(flagged) else "") + name)
        for bar, r, flag in zip(drawn, mine, flagged):
            if not flag:
                continue
            bar.set_hatch("xx")
            if not ranges:
                x, word = bar.get_x() + bar.get_width() / 2, r["verdict"].split(":")[0].lower()
                at = ((x, bar.get_height()), {}) if bar.get_height() > 0 else \
                    ((x, 0.02), {"xycoords": ("data", "axes fraction")})  # none on a log axis
                ax.annotate(word, at[0], ha="center", va="bottom", fontsize=6, rotation=90,
                            **at[1])
    ax.grid(axis="y", alpha=0.3)


def short(video: str) -> str:
    return video.rsplit(".", 1)[0].replace("_", "\n", 1)


def save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def local(results: dict, rows: list[dict], out: Path) -> list[Path]:
    """clips.png, sequential.png, batched.png and piece_size.png of bench/run.py."""
    main = [r for r in rows if not r["sweep"]]

    def panel(ax: plt.Axes, workload: str, key: str) -> None:
        mine = [r for r in main if r["workload"] == workload]
        videos = [v["video"] for v in results["videos"] if any(r["video"] == v["video"]
                                                               for r in mine)]
        bars(ax, mine, "video", videos, key)
        ax.set_xticks(range(len(videos)), [short(v) for v in videos], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel(key.replace("_per_s", "/s"))
        ax.set_title(results["workloads"][workload], fontsize=9)
        ax.legend(fontsize=7, ncol=4)

    fig, axes = plt.subplots(2, 1, figsize=(10, 8))
    for ax, workload in zip(axes, ("clips224", "clips-native")):
        panel(ax, workload, "clips_per_s")
    fig.suptitle("Clips per second (higher is better; hatched: flagged by the frame check, "
                 "not a result)", fontsize=10)
    paths = [save(fig, out / "clips.png")]
    fig, ax = plt.subplots(figsize=(10, 4))
    panel(ax, "sequential224", "frames_per_s")
    paths.append(save(fig, out / "sequential.png"))
    batched = [r for r in main if r["workload"] == "batched"]
    if batched:
        fig, ax = plt.subplots(figsize=(8, 3))
        ax.barh([("" if r["ok"] else "⚠ ") + r["label"] + (
            " (one call)" if r["contender"] == "fluxon read_many" else " (one by one)")
            for r in batched], [r["pass_ms"] or 0 for r in batched])
        ax.set_xlabel(f"ms for {batched[0]['info']['clips']} clips of {batched[0]['video']} "
                      "(lower is better)")
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", alpha=0.3)
        paths.append(save(fig, out / "batched.png"))
    if results["sweep"]:
        paths.append(sweep(results["sweep"], out))
    return paths


def sweep(points: list[dict], out: Path) -> Path:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for video in dict.fromkeys(p["video"] for p in points):
        rows = [p for p in points if p["video"] == video]
        sizes = [p["piece_size"] >> 10 for p in rows]
        left.plot(sizes, [(p["cold_remote_bytes"] or 0) / MiB for p in rows], "o-",
                  label=f"{short(video)} remote")
        left.axhline(rows[0]["needed_bytes"] / MiB, ls=":", color=left.lines[-1].get_color())
        right.plot(sizes, [p["cold_ms"] for p in rows], "o-", label=f"{short(video)} cold")
        right.plot(sizes, [p["warm_ms"] for p in rows], "s--", label=f"{short(video)} warm KV")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(size) for size in sizes])
        ax.set_xlabel("piece size, KiB")
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    left.set_ylabel("cold remote MiB (dotted: needed)")
    right.set_ylabel("ms per pass")
    return save(fig, out / "piece_size.png")


def remote(rows: list[dict], out: Path) -> Path:
    """remote.png of bench/remote.py: clips/s and metadata ms per latency, with ranges."""
    fig, axes = plt.subplots(1, 3, figsize=(18, 8))
    cmap = plt.get_cmap("tab20")
    colour = {name: cmap(i % 20) for i, name in enumerate(dict.fromkeys(r["label"]
                                                                         for r in rows))}
    panels = (("clips", "clips_per_s", "random clip per item: clips/s"),
              ("batched", "clips_per_s", "K clips of one video per item: clips/s"),
              ("metadata", "item_ms_p50", "metadata only: ms per video (p50, log)"))
    for ax, (workload, key, title) in zip(axes, panels):
        mine = [r for r in rows if r["workload"] == workload]
        lats = sorted({r["latency_ms"] for r in mine})
        bars(ax, mine, "latency_ms", lats, key, colour, ranges=True)
        ax.set_xticks(range(len(lats)), [f"L = {x:g} ms" for x in lats])
        if workload == "metadata":
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=1,
                  frameon=False)
    fig.suptitle("fluxon through FluxonFS vs peers over HTTP (hatched: frames flagged); "
                 "bars: median over rounds, whiskers: range", fontsize=10)
    return save(fig, out / "remote.png")
