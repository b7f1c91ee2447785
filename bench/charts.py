"""PNG charts of the benchmark results (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from report import label, select  # noqa: E402
from tables import MiB  # noqa: E402

DPI = 80


def _short(video: str) -> str:
    return video.rsplit(".", 1)[0].replace("_", "\n", 1)


def _name(record: dict) -> str:
    return label(record).removeprefix("⚠ ")


def _grouped_bars(ax: plt.Axes, results: dict, workload: str, key: str, title: str) -> None:
    records = select(results["records"], workload)
    videos = [v["video"] for v in results["videos"] if any(r["video"] == v["video"]
                                                           for r in records)]
    names = list(dict.fromkeys(_name(r) for r in records))
    width = 0.8 / max(len(names), 1)
    for n, name in enumerate(names):
        xs, ys, flags = [], [], []
        for x, video in enumerate(videos):
            for record in (r for r in records if r["video"] == video and _name(r) == name):
                s = record["summary"]
                xs.append(x + (n - (len(names) - 1) / 2) * width)
                ys.append(s[key] or 0)
                flags.append("" if s["ok"] else s["verdict"].split(":")[0].lower())
        bars = ax.bar(xs, ys, width, label=name)
        for bar, flag in zip(bars, flags):
            if flag:
                bar.set_hatch("xx")
                x = bar.get_x() + bar.get_width() / 2
                if bar.get_height() > 0:
                    ax.annotate(flag, (x, bar.get_height()), ha="center", va="bottom",
                                fontsize=6, rotation=90)
                else:  # failed: no bar on a log axis, so say it at the bottom
                    ax.annotate(flag, (x, 0.02), xycoords=("data", "axes fraction"),
                                ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(range(len(videos)), [_short(v) for v in videos], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel(key.replace("_per_s", "/s"))
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def draw(results: dict, out: Path) -> list[Path]:
    paths = []
    fig, axes = plt.subplots(2, 1, figsize=(10, 8))
    for ax, workload in zip(axes, ("clips224", "clips-native")):
        _grouped_bars(ax, results, workload, "clips_per_s", results["workloads"][workload])
    axes[0].legend(fontsize=7, ncol=4)
    fig.suptitle("Clips per second (higher is better; hatched: flagged by the frame check, "
                 "not a result)", fontsize=10)
    fig.tight_layout()
    paths.append(_save(fig, out / "clips.png"))

    fig, ax = plt.subplots(figsize=(10, 4))
    _grouped_bars(ax, results, "sequential224", "frames_per_s",
                  results["workloads"]["sequential224"])
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    paths.append(_save(fig, out / "sequential.png"))

    batched = select(results["records"], "batched")
    if batched:
        fig, ax = plt.subplots(figsize=(8, 3))
        names = [label(r) + (" (one call)" if r["contender"] == "fluxon read_many"
                             else " (one by one)") for r in batched]
        ax.barh(names, [r["summary"]["pass_ms"] or 0 for r in batched])
        ax.set_xlabel(f"ms for {batched[0]['clips']} clips of {batched[0]['video']} "
                      "(lower is better)")
        ax.tick_params(labelsize=7)
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        paths.append(_save(fig, out / "batched.png"))

    if results["sweep"]:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
        for video in dict.fromkeys(p["video"] for p in results["sweep"]):
            rows = [p for p in results["sweep"] if p["video"] == video]
            sizes = [p["piece_size"] >> 10 for p in rows]
            left.plot(sizes, [(p["cold_remote_bytes"] or 0) / MiB for p in rows], "o-",
                      label=f"{_short(video)} remote")
            left.axhline(rows[0]["needed_bytes"] / MiB, ls=":", color=left.lines[-1].get_color())
            right.plot(sizes, [p["cold_ms"] for p in rows], "o-", label=f"{_short(video)} cold")
            right.plot(sizes, [p["warm_ms"] for p in rows], "s--",
                       label=f"{_short(video)} warm KV")
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(size) for size in sizes])
            ax.set_xlabel("piece size, KiB")
            ax.legend(fontsize=6)
            ax.grid(alpha=0.3)
        left.set_ylabel("cold remote MiB (dotted: needed)")
        right.set_ylabel("ms per pass")
        fig.tight_layout()
        paths.append(_save(fig, out / "piece_size.png"))
    return paths


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
