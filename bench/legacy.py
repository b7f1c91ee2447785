"""The committed results of the retired scripts, read as records: a bench/run.py JSON
(suite "local"), a bench/remote.py one (suites "remote", "remote-s3", "remote-long"), a
bench/threads.py one ("threads"), a bench/dataloader.py one ("loader", "loader-s3"), a
bench/lerobot.py one ("lerobot") or a bench/av_clips.py one ("av"), converted by the same
functions that tally the runner's own passes."""

from __future__ import annotations

from typing import Any

from record import Record, Results
from tally import (av_note, av_records, codecs_records, lerobot_records, loader_records,
                   meta_of, rounds_records, threads_case)


def suite_of(data: dict[str, Any]) -> str:
    """The suite that replaces the command a legacy JSON was made by."""
    command = data.get("command", "")
    if "bench/run.py" in command:
        return "local"
    if "bench/threads.py" in command:
        return "threads"
    if "bench/av_clips.py" in command:
        return "av"
    if "bench/lerobot.py" in command:
        return "lerobot"
    if "bench/dataloader.py" in command:
        return "loader-s3" if data["conditions"]["export"].get("store") == "s3" else "loader"
    if "bench/remote.py" not in command:
        raise ValueError(f"not a result of a retired bench script: {command!r}")
    if data["conditions"]["store"].get("origin") == "s3":
        return "remote-s3"
    return "remote-long" if data["conditions"]["workload"].get("long_videos") else "remote"


def convert(data: dict[str, Any]) -> Results:
    """A legacy results JSON (with its ``passes``) as a results file of records."""
    suite = suite_of(data)
    if suite == "threads":
        return threads_results(data)
    if suite == "lerobot":  # its machine and versions stood at the top, LeRobot's apart
        data = {**data, "conditions": {"machine": data["machine"], "versions": {
            **data["versions"],
            **{f"LeRobot's {k}": v for k, v in data.get("lerobot_versions", {}).items()}}}}
    if suite == "av":  # its machine and versions stood at the top, its videos as names
        remote = {"latencies_ms": [data["settings"]["latency_ms"]],
                  "bandwidth_mbps_per_connection": 50.0} if data.get("remote") else None
        data = {**data, "videos": [], "skipped": {},
                "conditions": {"machine": data["machine"], "versions": data["versions"],
                               "store": remote},
                "notes": [av_note(data["videos"], data["settings"]["items"]),
                          "bench/av_clips.py kept only each row's fastest pass (by its median "
                          "item time): one pass per row, no CPU time or byte counts"]}
    records = (codecs_records(data) if suite == "local" else
               av_records(data) if suite == "av" else
               loader_records(data) if suite.startswith("loader") else
               lerobot_records(data) if suite == "lerobot" else rounds_records(data))
    return Results({**meta_of(data, suite), "converted_from": data.get("command")}, records)


def threads_results(data: dict[str, Any]) -> Results:
    """bench/threads.py kept only each row's summary (the median clips/s over passes, the
    verdict): a record each, without per-pass figures."""
    records = [Record(case=threads_case(contender, {"1": 1, "2": 2, "auto": 0}[key]),
                      video=video, items_per_s=s["clips_per_s"], ok=s["ok"],
                      verdict=s["verdict"], frames_per_item=16,
                      settings={"size": "224x224", "threads": key,
                                "repeat": data["settings"].get("repeat")})
               for video, rows in data["videos"].items()
               for contender, by in rows.items() for key, s in by.items()]
    meta = {"suite": "threads", "command": data.get("command"), "argv": None,
            "generated": data.get("generated"), "duration_s": data.get("duration_s"),
            "settings": data.get("settings", {}), "machine": data["machine"],
            "versions": data.get("versions", {}), "videos": [], "notes": [], "skipped": {},
            "converted_from": data.get("command")}
    return Results(meta, records)
