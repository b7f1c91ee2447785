"""What every scenario shares around its measurements: its command line (--quick
defaults, sizes), the head of its results, and writing its JSON and markdown."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent


def parse_size(text: str) -> int:
    """Bytes from "256K", "1M", "4MiB" or a plain number."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
    return int(float(text.rstrip("KM")) * scale)


def scenario_parser(script: str, doc: str | None, quick: str, outputs: str,
                    render: bool = True) -> argparse.ArgumentParser:
    """A scenario's parser with the options every scenario has: --quick, --data, --out
    (and --render, which redraws the outputs from a saved JSON)."""
    ap = argparse.ArgumentParser(prog=f"python bench/{script}", description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help=f"{quick}; results to <data>/quick-results unless --out is given")
    ap.add_argument("--data", type=Path, default=BENCH / ".data",
                    help="generated videos and scratch files (default: bench/.data)")
    ap.add_argument("--out", type=Path, help=f"where {outputs} go (default: bench/results)")
    if render:
        ap.add_argument("--render", type=Path, metavar="JSON",
                        help=f"only redraw {outputs} from a saved JSON into --out")
    return ap


def finish(ap: argparse.ArgumentParser, args: argparse.Namespace, full: dict[str, Any],
           quick: dict[str, Any], at_least_one: Iterable[str] = ()) -> argparse.Namespace:
    """Options left unset take their --quick or full default; results go to
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


def header(script: str, argv: list[str] | None, seconds: float,
           args: argparse.Namespace, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """When, how and with which settings a scenario ran: the head of its JSON."""
    argv = sys.argv[1:] if argv is None else argv
    return {"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": f"python bench/{script}" + "".join(f" {a}" for a in argv),
            "duration_s": round(seconds, 1),
            "settings": {k: (str(v) if isinstance(v, Path) else v)
                         for k, v in vars(args).items() if k not in leave_out}}


def write_outputs(out: Path, stem: str, json_text: str | None, markdown: str) -> list[Path]:
    """<out>/<stem>.json (unless None: a redraw keeps the JSON it came from) and .md."""
    out.mkdir(parents=True, exist_ok=True)
    texts = {f"{stem}.md": markdown} if json_text is None else {f"{stem}.json": json_text,
                                                                f"{stem}.md": markdown}
    for name, text in texts.items():
        (out / name).write_text(text)
    return [out / name for name in texts]
