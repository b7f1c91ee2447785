"""remote-s3.md and remote-s3.json of ``bench/remote.py --store s3``: per workload, each
fluxon cache state against the best exact peer, with origin requests, bytes and round trips
per clip."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from remote_report import _check_text, _conditions, _dataset, _f, _order, _row_name, clips_table
from remote_summary import summarise
from scenario import write_outputs
from tables import fill, table, times

WORKLOADS = {"clips": "short videos (4-7.5 s), one random clip per video",
             "long": "long videos (2 min, 720p, about 45 MB), random clips"}


def round_trips(s: dict) -> float | None:
    """Round trips per clip before its frames: fluxon's own count (open_round_trips +
    first_frame_waits, to the agent or the KV); a peer's origin requests, which its
    single reader issues one after another."""
    if s["row"]["family"] != "fluxon":
        return s["requests_per_clip"]
    per_item = s.get("fluxon", {}).get("per_item") or []
    if not per_item:
        return None
    return statistics.mean(x["open_round_trips"] + x["first_frame_waits"] for x in per_item)


def best_exact_peer(rows: list[dict]) -> dict | None:
    peers = [s for s in rows if s["row"]["family"] != "fluxon" and s["ok"] and s["clips_per_s"]]
    return max(peers, key=lambda s: s["clips_per_s"]) if peers else None


def ratio(s: dict, top: dict | None, key: str) -> float | None:
    if not top or not s.get(key) or not top.get(key):
        return None
    return s[key] / top[key]


def workload_rows(summaries: list[dict], workload: str) -> list[list[str]]:
    rows = []
    for lat in sorted({s["latency_ms"] for s in summaries if s["workload"] == workload}):
        group = [s for s in _order(summaries, workload) if s["latency_ms"] == lat]
        top = best_exact_peer(group)
        for s in group:
            vs = ("best exact peer" if s is top else
                  f"{times(ratio(s, top, 'clips_per_s'))} clips/s, "
                  f"{times(ratio(s, top, 'mib_per_clip'))} bytes")
            rows.append([f"{lat:g}", _row_name(s),
                         f"{_f(s['clips_per_s'])} ({_f(s['clips_per_s_min'])}–"
                         f"{_f(s['clips_per_s_max'])})", vs,
                         _f(s["requests_per_clip"], 1), _f(s["mib_per_clip"]),
                         _f(round_trips(s), 1), _f(s["connections_used"], 0), _check_text(s)])
    return rows


def summary_table(summaries: list[dict], workload: str) -> list[str]:
    return table(["L ms", "row", "clips/s (median, range)", "÷ best exact peer",
                  "origin req/clip", "origin MiB/clip", "round trips/clip", "conns", "frames"],
                 workload_rows(summaries, workload))


def headlines(summaries: list[dict]) -> list[str]:
    """One line per workload and fluxon row: its ratios to the best exact peer."""
    out = []
    for workload in WORKLOADS:
        for lat in sorted({s["latency_ms"] for s in summaries if s["workload"] == workload}):
            group = [s for s in summaries if s["workload"] == workload and s["latency_ms"] == lat]
            top = best_exact_peer(group)
            if not top:
                continue
            parts = [f"{s['row']['cache']} {times(ratio(s, top, 'clips_per_s'))}"
                     for s in _order(group, workload) if s["row"]["family"] == "fluxon"
                     and s["row"]["cache"] != "local file"]
            cold = next((s for s in group if s["row"].get("cache") == "cold"), None)
            extra = (f"; cold origin requests {_f(cold['requests_per_clip'], 1)}/clip vs "
                     f"{_f(top['requests_per_clip'], 1)}, bytes "
                     f"{times(ratio(cold, top, 'mib_per_clip'))}" if cold else "")
            out.append(f"- {workload}, L = {lat:g} ms: fluxon ÷ {top['label']} "
                       f"({_f(top['clips_per_s'])} clips/s): " + ", ".join(parts) + extra)
    return out


def markdown(results: dict, summaries: list[dict]) -> str:
    notes = [f"- {n}" for n in results.get("notes", [])]
    notes += [f"- {family} skipped: {why}" for family, why in results.get("skipped", {}).items()]
    wl = results["conditions"]["workload"]
    sections = []
    for workload, what in WORKLOADS.items():
        if any(s["workload"] == workload for s in summaries):
            sections += [f"## {workload}: {what}", "", *summary_table(summaries, workload), "",
                         "Detail:", "", *clips_table(summaries, workload), ""]
    return fill("remote-s3", **_conditions(results), blocks=wl.get("block_sizes", ""),
                long_videos=wl.get("long_videos", 0), long_items=wl.get("long_items", 0),
                dataset_table="\n".join(_dataset(results)),
                headlines="\n".join(headlines(summaries)), sections="\n".join(sections),
                tail="".join("\n" + line for line in notes))


def write(results: dict, out: Path) -> list[Path]:
    summaries = summarise(results["passes"], results["conditions"]["workload"]["batched_clips"])
    results = {**results, "summaries": summaries}
    return write_outputs(out, "remote-s3", json.dumps(results, indent=1, default=str),
                         markdown(results, summaries))
