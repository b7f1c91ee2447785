"""The harness every scenario shares: its command line, the machine facts, the timed pass
and its frame check, child processes, a row's verdict over its passes, tables and the
result files."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import string
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from frames import CheckResult, Reference

BENCH = Path(__file__).resolve().parent
DASH = "–"
KiB, MiB = 1 << 10, 1 << 20
KEPT = 5  # failures kept by name; the rest are counted
T = TypeVar("T")


# ---- command line ----

def doc(script: str) -> str:
    """The section of bench/README.md about ``script``: its --help."""
    text = (BENCH / "README.md").read_text().split(f"## bench/{script}\n", 1)[-1]
    return text.split("\n## ", 1)[0].strip()


def tool_parser(script: str, about: str | None = None) -> argparse.ArgumentParser:
    """A parser described by ``about``, else by the script's section of bench/README.md."""
    return argparse.ArgumentParser(prog=f"python bench/{script}", description=about or doc(script),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def scenario_parser(script: str, about: str | None, quick: str, outputs: str,
                    render: bool = True) -> argparse.ArgumentParser:
    """A scenario's parser with the options every scenario has: --quick, --data, --out (and
    --render, which redraws the outputs from a saved JSON)."""
    ap = tool_parser(script, about)
    ap.add_argument("--quick", action="store_true",
                    help=f"{quick}; results to <data>/quick-results unless --out is given")
    ap.add_argument("--data", type=Path, default=BENCH / ".data",
                    help="generated videos and scratch files (default: bench/.data)")
    ap.add_argument("--out", type=Path, help=f"where {outputs} go (default: bench/results)")
    if render:
        ap.add_argument("--render", type=Path, metavar="JSON",
                        help=f"only redraw {outputs} from a saved JSON into --out")
    return ap


def add_options(ap: argparse.ArgumentParser, rows: Iterable[tuple]) -> tuple[dict, dict]:
    """Options from rows (flag, type or choices, default, [quick default,] help); unset ones
    are None until ``finish``. Returns the full and the quick defaults."""
    full: dict[str, Any] = {}
    quick: dict[str, Any] = {}
    for flag, kind, default, *rest in rows:
        fast, text = rest if len(rest) == 2 else (default, rest[0])
        dest = flag[2:].replace("-", "_")
        full[dest], quick[dest] = default, fast
        shown = "" if default is None else f" (default: {default}" + (
            f", quick: {fast})" if fast != default else ")")
        ap.add_argument(flag, help=text + shown,
                        **({"choices": kind} if isinstance(kind, tuple) else {"type": kind}))
    return full, quick


def finish(ap: argparse.ArgumentParser, args: argparse.Namespace, full: dict[str, Any],
           quick: dict[str, Any], at_least_one: Iterable[str] = ()) -> argparse.Namespace:
    """Unset options take their --quick or full default; results go to
    <data>/quick-results for a quick run unless --out says otherwise."""
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.out is None:
        args.out = args.data / "quick-results" if args.quick else BENCH / "results"
    for name in at_least_one:
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def say(text: str, t0: list[float] = [time.perf_counter()]) -> None:  # noqa: B006 - the start
    print(f"[{time.perf_counter() - t0[0]:6.0f} s] {text}", flush=True)


# ---- machine and versions ----

def run(*cmd: str) -> str:
    """A command's stdout, stripped; "?" when it cannot run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def machine() -> dict[str, Any]:
    """CPU model, cores, memory, OS and the git revision measured."""
    def proc(name: str, key: str) -> str | None:
        return next((line.split(":", 1)[1].strip() for line in
                     Path(f"/proc/{name}").read_text().splitlines() if line.startswith(key)), None)
    memory = int((proc("meminfo", "MemTotal") or "0 kB").split()[0]) * 1024
    return {"cpu": proc("cpuinfo", "model name") or platform.processor(),
            "cores": os.cpu_count(), "memory_gib": round(memory / (1 << 30), 1),
            "os": platform.platform(),
            "git": run("git", "-C", str(BENCH.parent), "describe", "--always", "--dirty")}


def machine_line(m: dict) -> str:
    return f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, git {m['git']}"


def report_head(title: str, results: dict) -> list[str]:
    """A report's first lines: its title, the command and when it ran, machine, versions."""
    return [f"# {title}", "", f"`{results['command']}`, {results['generated']}, "
            f"{results['duration_s']} s", "", f"Machine: {machine_line(results['machine'])}", "",
            "Versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()), ""]


def fluxon_versions() -> dict[str, str]:
    import fluxon_video
    from fluxon_video.native import require_native

    return {"fluxon_video": fluxon_video.__version__,
            **{f"fluxon's {k}": v for k, v in require_native()[1].library_versions().items()}}


def module_versions(*names: str, missing: str | None = None) -> dict[str, str]:
    """Each module's __version__ where it imports, else ``missing`` (None: left out)."""
    found = {}
    for name in names:
        try:
            found[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - a library that does not import is a note
            if missing is not None:
                found[name] = missing
    return found


def versions() -> dict[str, str]:
    """Python, numpy, fluxon_video and the libav* it runs on, the ffmpeg CLI, redis-server."""
    found = {"python": platform.python_version(), "numpy": np.__version__}
    try:
        found.update(fluxon_versions())
    except Exception:  # noqa: BLE001 - a build without FFmpeg still benchmarks its peers
        pass
    found["ffmpeg CLI"] = (run("ffmpeg", "-version").splitlines() or ["? ? ?"])[0].split()[2]
    redis_line = run("redis-server", "--version").split()
    found["redis-server"] = redis_line[2].removeprefix("v=") if len(redis_line) > 2 else "?"
    return found


# ---- result files ----

def header(script: str, argv: list[str] | None, seconds: float,
           args: argparse.Namespace, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """When, how and with which settings a scenario ran: the head of its JSON."""
    argv = sys.argv[1:] if argv is None else argv
    return {"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": f"python bench/{script}" + "".join(f" {a}" for a in argv),
            "duration_s": round(seconds, 1),
            "settings": {k: (str(v) if isinstance(v, Path) else v)
                         for k, v in vars(args).items() if k not in leave_out}}


def write_outputs(out: Path, stem: str, results: dict | None, markdown: str) -> list[Path]:
    """<out>/<stem>.json (unless None: a redraw keeps the JSON it came from) and .md."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(markdown)
    if results is not None:
        (out / f"{stem}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    return [out / f"{stem}.{ext}" for ext in ("md", "json")[:1 + (results is not None)]]


def publish(args: argparse.Namespace, stem: str, render: Callable[[dict], str],
            results: dict | None = None) -> None:
    """A run's <stem>.json and .md into --out; without ``results``, the --render JSON's
    report redrawn (the JSON stays where it is)."""
    saved = json.loads(args.render.read_text()) if results is None else results
    for path in write_outputs(args.out, stem, results, render(saved)):
        say(f"wrote {path}")


def fill(template: str, **values: object) -> str:
    """bench/templates/<template>.md with its $names replaced (the reports' prose lives
    there, so that the code around it is only the figures)."""
    text = (BENCH / "templates" / f"{template}.md").read_text()
    return string.Template(text).substitute(values)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def num(value: float | None, digits: int = 2, grouped: bool = False) -> str:
    if value is None:
        return DASH
    return f"{value:,.{digits}f}" if grouped else f"{value:.{digits}f}"


def mib(value: float | None) -> str:
    return DASH if value is None else f"{value / MiB:.2f}"


def times(value: float | None, missing: str = DASH) -> str:
    """A ratio as "1.23×"."""
    return missing if value is None else f"{value:.2f}×"


def listing(pairs: Iterable[tuple[object, object]]) -> str:
    """"k v, k v": versions and the like, in one line."""
    return ", ".join(f"{k} {v}" for k, v in pairs)


def grouped(items: Iterable[T], key: Callable[[T], Any],
            value: Callable[[T], Any] = lambda x: x) -> dict[Any, list]:
    """``value`` of the items in lists by ``key``, the keys in the order they first come."""
    out: dict[Any, list] = {}
    for item in items:
        out.setdefault(key(item), []).append(value(item))
    return out


def kinds_of(videos: Iterable[dict]) -> dict[str, list[dict]]:
    """Video facts grouped by kind: codec, size and layout."""
    return grouped(videos, lambda v: f"{v['codec']} {v['width']}x{v['height']} {v['layout']}")


# ---- the timed pass ----

def error_text(exc: BaseException, limit: int = 200) -> str:
    """An exception in one line: its type and the first line of its message."""
    text = str(exc).splitlines()[0][:limit] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


def metadata_error(video: dict, frames: int, fps: float, duration: float) -> str:
    """'' when frame count, fps and duration are right (fps within 1%, duration within 2 frames)."""
    want_frames, want_fps = video["frames"], video["fps"]
    if frames != want_frames:
        return f"{video['name']}: {frames} frames, the ffmpeg CLI decodes {want_frames}"
    if abs(fps - want_fps) > 0.01 * want_fps:
        return f"{video['name']}: {fps:.3f} fps, expected {want_fps}"
    if abs(duration - want_frames / want_fps) > 2 / want_fps:
        return f"{video['name']}: duration {duration:.3f} s, expected {want_frames / want_fps:.3f}"
    return ""


@dataclass
class Pass:
    """One contender reading a list of items: every item's time and video, the frame check
    (None: metadata only), the failures, and what it counted per item."""

    row: dict
    check: CheckResult | None
    extra: dict = field(default_factory=dict)
    item_ms: list[float] = field(default_factory=list)
    item_cpu_s: list[float] = field(default_factory=list)  # the process's CPU, every thread
    item_videos: list[str] = field(default_factory=list)
    flagged: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    metadata_wrong: list[str] = field(default_factory=list)

    def time(self, video: str, read: Callable[[], T]) -> T | None:
        """``read()``, timed as one item; None when it raised (the video is flagged)."""
        try:
            started = self.clock()
            out = read()
        except Exception as exc:  # noqa: BLE001 - a failing read is a finding, not a crash
            self.errors.append(f"{video}: {error_text(exc)}")
            self.flagged.append(video)
            return None
        self.took(started)
        self.item_videos.append(video)
        return out

    @staticmethod
    def clock() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def took(self, started: tuple[float, float]) -> None:
        """One item's wall time and CPU time since ``started`` (a ``clock()``)."""
        self.item_ms.append((time.perf_counter() - started[0]) * 1e3)
        self.item_cpu_s.append(time.process_time() - started[1])

    def check_item(self, video: str, clips: Sequence[Sequence[int]],
                   outs: Sequence[np.ndarray], ref: Reference) -> None:
        """Check one item's clips into the pass's check; flag the video if they fail."""
        assert self.check is not None
        item = CheckResult(exact_required=self.check.exact_required)
        for clip, frames in zip(clips, outs):
            item.add(frames, clip, ref)
        self.check.absorb(item, prefix=f"{video}: ")
        if not item.ok:
            self.flagged.append(video)

    def check_metadata(self, video: dict, frames: int, fps: float, duration: float) -> None:
        wrong = metadata_error(video, frames, fps, duration)
        if wrong:
            self.metadata_wrong.append(wrong)

    def add_stats(self, video: str, stats: dict[str, Any] | None) -> None:
        """One item's counts (fluxon's read stats), kept per item."""
        if stats is not None:
            self.extra.setdefault("per_item", []).append({"video": video, **stats})

    def result(self, server: dict) -> dict[str, Any]:
        out = {"row": self.row, "item_ms": self.item_ms, "item_cpu_s": self.item_cpu_s,
               "item_videos": self.item_videos,
               "flagged_videos": sorted(set(self.flagged)), "server": server,
               "check": self.check.as_dict() if self.check is not None else None,
               "errors": self.errors[:KEPT], "error_count": len(self.errors),
               "extra": self.extra}
        if self.check is None:
            out.update(metadata_wrong=self.metadata_wrong[:KEPT],
                       metadata_wrong_count=len(self.metadata_wrong))
        return out


def failed_pass(row: dict, fatal: str) -> dict[str, Any]:
    """A pass whose process died before it answered."""
    return {**Pass(row, None, errors=[fatal]).result({}), "fatal": fatal}


def reset_peak_rss() -> None:
    """Start a new high-water mark of this process's RSS (Linux >= 4.0; else a no-op)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss_mib() -> float:
    """This process's RSS high-water mark since the last reset_peak_rss(), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# ---- child processes ----

class Child:
    """A spawned process of its own (a new one, or kept for a whole run: a peer worker);
    ``call`` returns what the function returned, or {"fatal": why} when it raised, hung or
    the process died."""

    def __init__(self, init: Callable[..., Any] | None = None, *init_args: Any) -> None:
        self.pool = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"),
                                        initializer=init, initargs=init_args)

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 900) -> Any:
        try:
            return self.pool.submit(fn, *args).result(timeout=timeout)
        except TimeoutError:
            self.stop(kill=True)
            return {"fatal": f"no answer within {timeout:g} s"}
        except Exception as exc:  # noqa: BLE001 - the caller records the failure
            return {"fatal": error_text(exc)}

    def stop(self, kill: bool = False) -> None:
        for proc in list((self.pool._processes or {}).values()) if kill else []:
            proc.kill()
        self.pool.shutdown(wait=True, cancel_futures=True)


def once(fn: Callable[..., Any], *args: Any, timeout: float = 900) -> Any:
    """``fn(*args)`` in a new spawned process."""
    child = Child()
    try:
        return child.call(fn, *args, timeout=timeout)
    finally:
        child.stop()


# ---- over a row's passes ----

def median(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def merge_checks(checks: list[dict | None]) -> dict | None:
    kept = [c for c in checks if c]
    if not kept:
        return None
    return {"exact_required": kept[0]["exact_required"],
            "frames": sum(c["frames"] for c in kept),
            "bit_exact": sum(c["bit_exact"] for c in kept),
            "worst_mean_abs_diff": max(c["worst_mean_abs_diff"] for c in kept),
            "wrong": [w for c in kept for w in c["wrong"]],
            "off": [o for c in kept for o in c["off"]]}


def verdict(passes: list[dict], check: dict | None, none: str = DASH) -> tuple[bool, str]:
    """(ok, the verdict text) of a row over its passes."""
    fatal = next((p["fatal"] for p in passes if p.get("fatal")), None)
    count = sum(p.get("error_count", 0) for p in passes)
    wrong_meta = [w for p in passes for w in p.get("metadata_wrong", [])]
    if fatal:
        return False, f"FAILED: {fatal}"
    if count:
        return False, f"FAILED on {count} item(s): {[e for p in passes for e in p['errors']][0]}"
    if wrong_meta:
        n = sum(p.get("metadata_wrong_count", 0) for p in passes)
        return False, f"WRONG on {n} item(s): {wrong_meta[0]}"
    if check is None:
        return True, none
    for kind in ("wrong", "off"):
        if check[kind]:
            return False, f"{kind.upper()} ({len(check[kind])}+): {check[kind][0]}"
    if check["exact_required"] or check["bit_exact"] == check["frames"]:
        return True, "bit-exact"
    return True, f"ok (mad<={check['worst_mean_abs_diff']:.2f})"


def count(per_item: list[dict]) -> dict[str, Any]:
    """Numbers summed over a pass's items; each distinct text kept (read paths, reasons)."""
    out: dict[str, Any] = {}
    for x in per_item:
        for key, value in x.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = out.get(key, 0) + value
            elif isinstance(value, str) and value and key != "video":
                out.setdefault(key, {})
                out[key][value] = out[key].get(value, 0) + 1
    return out
