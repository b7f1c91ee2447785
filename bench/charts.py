"""PNG charts of a results file (matplotlib, no display needed): one per workload, grouped
bars (by video, or by latency), flagged rows hatched; the piece-size sweep as lines."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from cases import WORKLOADS  # noqa: E402
from record import Record  # noqa: E402

MiB = 1 << 20
DPI = 80


def figure_of(r: Record) -> tuple[float, float, float]:
    """The bar's value and its range over rounds: clips/s, frames/s (sequential) or ms per
    video (metadata)."""
    if r.case.workload == "metadata":
        ms = r.round_median_ms or [r.item_ms_p50 or 0]
        return r.item_ms_p50 or 0, min(ms), max(ms)
    scale = r.clips_per_item * ((r.frames_per_item or 1) / r.clips_per_item
                                if r.case.workload == "sequential" else 1)
    rounds = r.items_per_s_rounds or [r.items_per_s or 0]
    return (r.items_per_s or 0) * scale, min(rounds) * scale, max(rounds) * scale


def bars(ax: plt.Axes, records: list[Record], ticks: list, tick_of: dict[int, object]) -> None:
    """One bar per record, grouped by its tick, one series per row label; a flagged row is
    hatched; whiskers span the rounds."""
    names = list(dict.fromkeys(r.case.label() for r in records))
    width = 0.8 / max(len(names), 1)
    cmap = plt.get_cmap("tab20")
    for n, name in enumerate(names):
        mine = [r for r in records if r.case.label() == name]
        xs = [ticks.index(tick_of[id(r)]) + (n - (len(names) - 1) / 2) * width for r in mine]
        values = [figure_of(r) for r in mine]
        err = [[max(v - lo, 0) for v, lo, _ in values], [max(hi - v, 0) for v, _, hi in values]]
        drawn = ax.bar(xs, [v for v, _, _ in values], width, yerr=err, capsize=2,
                       color=cmap(n % 20), label=("⚠ " if any(not r.ok for r in mine) else "")
                       + name)
        for bar, r in zip(drawn, mine):
            if not r.ok:
                bar.set_hatch("xx")
    ax.grid(axis="y", alpha=0.3)


def short(video: str) -> str:
    return video.rsplit(".", 1)[0].replace("_", "\n", 1)


def save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def draw(records: list[Record], out: Path, stem: str, videos: list[str]) -> list[Path]:
    """<stem>-<workload>.png per workload (sweep records apart: <stem>-piece-size.png)."""
    paths = []
    main = [r for r in records if r.case.piece_size is None]
    for workload in [w for w in WORKLOADS if any(r.case.workload == w for r in main)]:
        mine = [r for r in main if r.case.workload == workload]
        per_video = any(r.video for r in mine)
        tick_of = {id(r): (r.video if per_video else r.case.latency_ms) for r in mine}
        seen = list(dict.fromkeys(tick_of.values()))
        ticks = ([v for v in videos if v in seen] + [v for v in seen if v not in videos]
                 if per_video else sorted(seen))
        fig, ax = plt.subplots(figsize=(12 if per_video else 10, 6))
        bars(ax, mine, ticks, tick_of)
        ax.set_xticks(range(len(ticks)), [short(t) if per_video else f"L = {t:g} ms"
                                          for t in ticks], fontsize=7)
        unit = {"metadata": "ms per video (p50, log)", "sequential": "frames/s"}.get(
            workload, "clips/s")
        if per_video or workload == "metadata":
            ax.set_yscale("log")
        ax.set_ylabel(unit)
        ax.set_title(f"{workload}: {unit} (hatched: frames flagged, not a result; whiskers: "
                     "range over rounds)", fontsize=9)
        ax.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.08),
                  frameon=False)
        paths.append(save(fig, out / f"{stem}-{workload}.png"))
    sweep = [r for r in records if r.case.piece_size is not None]
    if sweep:
        paths.append(piece_sizes(sweep, out / f"{stem}-piece-size.png"))
    return paths


def piece_sizes(records: list[Record], path: Path) -> Path:
    """Cold remote MiB (dotted: needed) and ms per clip against the piece size."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for video in dict.fromkeys(r.video for r in records):
        for cache, style in (("cold", "o-"), ("warm-kv", "s--")):
            rows = sorted((r for r in records if r.video == video and r.case.cache == cache),
                          key=lambda r: r.case.piece_size or 0)
            sizes = [(r.case.piece_size or 0) >> 10 for r in rows]
            if cache == "cold":
                left.plot(sizes, [r.mib_per_item or 0 for r in rows], style,
                          label=f"{short(video or '')} cold")
                if rows and rows[0].needed_mib_per_item:
                    left.axhline(rows[0].needed_mib_per_item, ls=":",
                                 color=left.lines[-1].get_color())
            right.plot(sizes, [r.item_ms_p50 or 0 for r in rows], style,
                       label=f"{short(video or '')} {cache}")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("piece size, KiB")
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    left.set_ylabel("cold remote MiB per clip (dotted: needed)")
    right.set_ylabel("ms per clip (p50)")
    return save(fig, path)
