"""dataloader.md from the DataLoader benchmark's results (bench/dataloader.py)."""

from __future__ import annotations

from typing import Any

from tables import DASH, fill, listing, machine_line, mib, num, table


def short(check: dict[str, Any]) -> str:
    """A codec's frame verdict for the table (the full one is in the JSON)."""
    if check["verdict"].startswith("OFF"):
        return f"OFF (right frames, mad up to {check['worst_mean_abs_diff']:.1f} > 3)"
    if check["verdict"].startswith("WRONG"):
        return f"WRONG ({check['verdict'].split(': ', 1)[1]})"
    return check["verdict"]


def frames_cell(r: dict[str, Any]) -> str:
    if r["errors"]:
        return f"⚠ {r['errors']} failed reads: {r['first_error']}"
    if r["check"] and not r["check"]["ok"]:
        return "⚠ " + " · ".join(f"{c} {short(v)}" for c, v in r["check"]["by_codec"].items())
    return r["check"]["verdict"] if r["check"] else DASH


def row(r: dict[str, Any]) -> list[str]:
    s = r["fluxon_stats"]
    fluxon = ([str(s["reads"]), f"{s['kv_hits']}/{s['kv_misses']}", mib(s["remote_bytes"]),
               f"{s['index_scans']}/{s['index_from_kv']}"] if s else [DASH] * 4)
    return [r["contender"], r["order"], r["cache"],
            f"{r['clips_per_s']:.1f} ({r['clips_per_s_min']:.1f}–{r['clips_per_s_max']:.1f})",
            num(r["epoch_s"]), num(r["workers_up_s"]), num(r["first_batch_s"]),
            f"{r['other_cpu_cores']:.2f}" + (f" ({r['redone']} redone)" if r["redone"] else ""),
            *fluxon, frames_cell(r)]


def summary(results: dict[str, Any]) -> list[str]:
    """fluxon warm KV against each peer, per order (> 1: fluxon faster)."""
    rows = {(r["contender"], r["order"], r["cache"]): r for r in results["rows"]}
    out = []
    for order in ("per-clip", "batched"):
        fluxon = rows.get(("fluxon", order, "warm KV"))
        if fluxon is None:
            continue
        parts = [f"{fluxon['clips_per_s'] / r['clips_per_s']:.2f}× {contender}"
                 + ("" if r["check"]["ok"] and not r["errors"] else " (⚠ frames)")
                 for (contender, o, _), r in rows.items() if contender != "fluxon" and o == order]
        if parts:
            out.append(f"- {order}: fluxon warm KV {fluxon['clips_per_s']:.1f} clips/s = "
                       + ", ".join(parts))
    if out:
        out = ["fluxon warm KV ÷ peer, clips/s (> 1: fluxon faster; ⚠: the peer's frames did "
               "not pass the check, see the frames column):", "", *out, ""]
    return out


def tail(results: dict[str, Any]) -> list[str]:
    """The warm-up's misses, the skipped peers and the notes, as condition lines."""
    out = []
    topup, warmup = results.get("topup_fluxon_stats"), results.get("warmup_fluxon_stats")
    if topup and warmup:
        out.append(f"- warm-up: the per-clip warm-up epoch's workers missed "
                   f"{warmup['kv_misses']} pieces and queued {warmup['backfills_queued']} "
                   "backfills; the top-up pass afterwards (every planned clip read in this "
                   f"process) missed {topup['kv_misses']} pieces (> 0: backfills still queued "
                   "when a warm-up worker exited were lost)")
    out += [f"- {peer} skipped: {why}" for peer, why in results["skipped"].items()]
    return out + [f"- note: {n}" for n in results["notes"]]


def markdown(results: dict[str, Any]) -> str:
    c, s = results["conditions"], results["settings"]
    loader, export = c["loader"], c["export"]
    kinds: dict[str, int] = {}
    for v in results["videos"]:
        key = f"{v['codec']} {v['width']}x{v['height']} {v['layout']}"
        kinds[key] = kinds.get(key, 0) + 1
    frames = [v["frames"] for v in results["videos"]]
    summary_lines = summary(results)
    return fill(
        "dataloader", command=results["command"], generated=results["generated"],
        duration=f"{results['duration_s']:.0f}",
        table="\n".join(table(["contender", "reads", "cache", "clips/s (min–max)", "epoch s",
                               "workers up s", "first batch s", "other CPU", "fluxon reads",
                               "KV hit/miss", "agent MiB", "index scan/KV", "frames"],
                              map(row, results["rows"]))),
        summary="\n".join(summary_lines) + "\n" if summary_lines else "",
        items=loader["items"], clip=loader["clip"], videos=len(results["videos"]),
        groups=loader["items"] // loader["clips_per_video_batched"],
        per_video=loader["clips_per_video_batched"], seed=s["seed"], repeat=s["repeat"],
        cores=c["machine"]["cores"], max_other_cpu=s["max_other_cpu"], retries=s["retries"],
        kinds=", ".join(f"{n} × {k}" for k, n in kinds.items()),
        frames=f"{min(frames)}–{max(frames)}",
        dataset_mib=f"{sum(v['file_bytes'] for v in results['videos']) / 2**20:.1f}",
        workers=loader["workers"], start_method=loader["start_method"],
        batch_size=loader["batch_size"], threads=loader["decoder_threads"],
        where=export["where"], latency=f"{export['agent_latency_ms']:g}", kv=export["kv"],
        machine=machine_line(c["machine"]), versions=listing(c["versions"].items()),
        tail="".join("\n" + line for line in tail(results)))
