"""The remote benchmark's passes summed up: one summary per (workload, latency, row)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable

from tables import KiB, MiB


def label(row: dict) -> str:
    fam = row["family"]
    if fam == "fluxon":
        if row["cache"] == "local file":
            return "fluxon local file (reference: decode only, no store)"
        return f"fluxon {row['cache']}"
    if row["mode"] == "download":
        if row.get("union"):
            return f"{fam} · download (1 GET), K clips in one pass (union)"
        return f"{fam} · download (1 GET)"
    block = row.get("block_size")
    tool = {"s3fs": "s3fs", "obstore": "obstore reader"}.get(row["mode"], "fsspec")
    where = f"{tool} {size_text(block)}" if block else "fsspec 5 MiB (default)"
    if fam == "decord":
        return "decord · file object (reads it whole)"
    if fam == "torchcodec" and row.get("seek_mode") == "approximate":
        return f"torchcodec approximate · {where}"
    if fam == "torchcodec" and row.get("seek_mode") == "exact":
        return f"torchcodec exact · {where}"
    return f"{fam} · {where}"


def size_text(n: int) -> str:
    """256 KiB, 4 MiB."""
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n // KiB} KiB"


def row_key(row: dict) -> str:
    return json.dumps(row, sort_keys=True)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _merge_checks(checks: list[dict]) -> dict | None:
    checks = [c for c in checks if c]
    if not checks:
        return None
    return {"exact_required": checks[0]["exact_required"],
            "frames": sum(c["frames"] for c in checks),
            "bit_exact": sum(c["bit_exact"] for c in checks),
            "worst_mean_abs_diff": max(c["worst_mean_abs_diff"] for c in checks),
            "wrong": [w for c in checks for w in c["wrong"]],
            "off": [o for c in checks for o in c["off"]]}


def _verdict(passes: list[dict], check: dict | None, workload: str) -> tuple[bool, str]:
    for p in passes:
        if p.get("fatal"):
            return False, f"FAILED: {p['fatal']}"
    errors = [e for p in passes for e in p.get("errors", [])]
    count = sum(p.get("error_count", 0) for p in passes)
    if count:
        return False, f"FAILED on {count} item(s): {errors[0]}"
    wrong_meta = [w for p in passes for w in p.get("metadata_wrong", [])]
    if wrong_meta:
        n = sum(p.get("metadata_wrong_count", 0) for p in passes)
        return False, f"WRONG on {n} item(s): {wrong_meta[0]}"
    if check is not None:
        if check["wrong"]:
            return False, f"WRONG ({len(check['wrong'])}+): {check['wrong'][0]}"
        if check["off"]:
            return False, f"OFF ({len(check['off'])}+): {check['off'][0]}"
        if check["exact_required"] or check["bit_exact"] == check["frames"]:
            return True, "bit-exact"
        return True, f"ok (mad<={check['worst_mean_abs_diff']:.2f})"
    return True, "right" if workload == "metadata" else "–"


def _none_if_empty(pick: Callable[[list[float]], float], values: list[float]) -> float | None:
    return pick(values) if values else None


def _timing(group: list[dict], per_clip: int) -> dict:
    """clips/s per pass (median and range), item times, the passes' median item times."""
    rates = [len(p["item_ms"]) * per_clip / (sum(p["item_ms"]) / 1e3)
             for p in group if p.get("item_ms")]
    medians = [statistics.median(p["item_ms"]) for p in group if p.get("item_ms")]
    item_ms = [t for p in group for t in p.get("item_ms") or []]
    return {"items": len(item_ms), "clips": float(len(item_ms) * per_clip),
            "clips_per_s": _none_if_empty(statistics.median, rates),
            "clips_per_s_min": _none_if_empty(min, rates),
            "clips_per_s_max": _none_if_empty(max, rates), "rates": rates,
            "item_ms_p50": _pct(item_ms, 0.5), "item_ms_p99": _pct(item_ms, 0.99),
            "pass_median_ms_min": _none_if_empty(min, medians),
            "pass_median_ms_max": _none_if_empty(max, medians)}


def _traffic(group: list[dict], clips: float, items: int) -> dict:
    """What the servers counted: bytes and requests per clip and per item, connections."""
    servers = [p["server"] for p in group if p.get("server")]
    requests = float(sum(s.get("requests", 0) for s in servers))
    nbytes = float(sum(s.get("bytes", 0) for s in servers))
    conns = [s.get("connections_used", 0) for s in servers]
    return {"mib_per_clip": nbytes / clips / MiB if clips else None,
            "requests_per_clip": requests / clips if clips else None,
            "mib_per_item": nbytes / items / MiB if items else None,
            "requests_per_item": requests / items if items else None,
            "bytes_total": nbytes, "requests_total": requests,
            "connections_used": _none_if_empty(statistics.median, conns),
            "connections_used_max": _none_if_empty(max, conns),
            "connections_opened": sum(s.get("relay_opened", 0) for s in servers)}


def _fluxon_detail(group: list[dict], per_item: list[dict]) -> dict:
    """fluxon's own counts per item (from its read stats) and the read paths it took."""
    def mean(key: str) -> float:
        return sum(x.get(key, 0) for x in per_item) / len(per_item)
    return {"open_index_ms_p50": _pct([x.get("open_ms", 0) + x.get("index_ms", 0)
                                       for x in per_item], 0.5),
            "kv_round_trips_per_item": mean("kv_round_trips"),
            "stat_requests_per_item": mean("stat_requests"),
            "remote_reads_per_item": mean("remote_reads"),
            "frames_decoded_per_item": mean("frames_decoded"),
            "paths": _sum_dicts([p.get("extra", {}).get("paths", {}) for p in group]),
            "per_item": per_item}


def summarise(passes: list[dict], batched_clips: int) -> list[dict]:
    """One summary per (workload, latency, row), over the row's passes of every round."""
    groups: dict[tuple, list[dict]] = {}
    for p in passes:
        groups.setdefault((p["workload"], p["latency_ms"], row_key(p["row"])), []).append(p)
    out = []
    for (workload, latency, _), group in groups.items():
        row = group[0]["row"]
        timing = _timing(group, batched_clips if workload == "batched" else 1)
        check = _merge_checks([p.get("check") for p in group])
        ok, verdict = _verdict(group, check, workload)
        summary = {"workload": workload, "latency_ms": latency, "row": row, "label": label(row),
                   "passes": len(group), **timing,
                   **_traffic(group, timing["clips"], timing["items"]),
                   "ok": ok, "verdict": verdict, "check": check,
                   "fallbacks": sum(p.get("extra", {}).get("fallbacks", 0) for p in group)}
        per_item = [x for p in group for x in p.get("extra", {}).get("per_item", [])]
        if per_item:
            summary["fluxon"] = _fluxon_detail(group, per_item)
        out.append(summary)
    return out


def _sum_dicts(dicts: list[dict]) -> dict:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out
