"""LeRobot's own training script with fluxon_video.lerobot's dataset swapped in.

``lerobot-train`` (LeRobot 0.6.1, unmodified, in its own virtualenv on Python 3.12)
trains a policy for a few steps on the dataset LeRobot wrote for the lerobot suite, twice
with the same seed: once with LeRobot's ``LeRobotDataset``, once with
``fluxon_video.lerobot.LeRobotDataset`` put in its place the way docs/lerobot.md shows
(``lerobot.datasets.factory.LeRobotDataset = ...``). Each run records, per step, a digest
of the batch the script handed the policy, the loss, and the script's own data wait
(``dataloading_s``: the DataLoader's ``next`` plus LeRobot's preprocessing). The swap is
right when every batch digest and every loss is the same in both runs.

    python bench/lerobot_train.py                 # ACT, 12 steps, batch 4, 0 and 2 workers (~6 min)
    python bench/lerobot_train.py --steps 10 --workers 0 --out /tmp/x

Writes ``<out>/lerobot-train.{json,md}`` (default bench/results). The first run installs
LeRobot and builds fluxon_video into LeRobot's virtualenv.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# LeRobot's dataset; fluxon's on the local folder; fluxon's through FluxonFS (a real agent
# serving the dataset's folder as export "lerobot", a real Redis as the shared cache)
IMPLS = ("lerobot", "fluxon", "fluxon-agent")
NAMES = {"lerobot": "LeRobot's", "fluxon": "fluxon's (local folder)",
         "fluxon-agent": "fluxon's (agent + Redis)"}
EXPORT = "lerobot"


def child(impl: str, root: Path, steps: int, batch: int, workers: int, work: Path) -> None:
    """Run in LeRobot's virtualenv: one training run, its steps as a JSON line."""
    # the bench's own modules stay out of the way of LeRobot's
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH]
    import torch
    from lerobot.scripts import lerobot_train

    import lerobot.datasets.factory as factory

    from fluxon_video.lerobot import LeRobotDataset, LeRobotDatasetMetadata
    where = str(root)
    if impl == "fluxon":  # the swap docs/lerobot.md documents
        factory.LeRobotDataset = LeRobotDataset
    elif impl == "fluxon-agent":  # and its FluxonFS form: both classes, given the patcher
        import fluxon_video as fv

        patcher = fv.FluxonFsPatcher.from_config_file(os.environ["FLUXON_VIDEO_CONFIG"],
                                                      identity="trainer")
        factory.LeRobotDataset = functools.partial(LeRobotDataset, patcher=patcher)
        factory.LeRobotDatasetMetadata = functools.partial(LeRobotDatasetMetadata,
                                                           patcher=patcher)
        where = f"{EXPORT}:{root.name}"
    seen: list[dict[str, Any]] = []
    update_policy = lerobot_train.update_policy

    def recorded(tracker: Any, policy: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        digest = hashlib.sha256()
        for key in sorted(batch):
            value = batch[key]
            if torch.is_tensor(value):
                digest.update(key.encode())
                digest.update(value.detach().cpu().contiguous().numpy().tobytes())
        started = time.perf_counter()
        out = update_policy(tracker, policy, batch, *args, **kwargs)
        seen.append({"batch": digest.hexdigest()[:16], "loss": float(out[0].loss.val),
                     "data_s": float(tracker.dataloading_s.val),
                     "update_s": time.perf_counter() - started})
        return out

    lerobot_train.update_policy = recorded
    sys.argv = ["lerobot-train", f"--dataset.repo_id=local/{root.name}",
                f"--dataset.root={where}", "--dataset.image_transforms.enable=false",
                "--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false",
                "--policy.pretrained_backbone_weights=null", f"--steps={steps}",
                f"--batch_size={batch}", f"--num_workers={workers}", "--wandb.enable=false",
                "--save_checkpoint=false", f"--log_freq={steps}", "--seed=1000",
                f"--output_dir={work / f'{impl}-{workers}w-{time.time_ns()}'}"]
    started = time.perf_counter()
    lerobot_train.main()
    print(json.dumps({"impl": impl, "workers": workers, "wall_s": time.perf_counter() - started,
                      "steps": seen}))


def prepare(data: Path, episodes: int, seed: int) -> tuple[Path, Path]:
    """LeRobot's virtualenv with fluxon_video built into it, and the dataset LeRobot wrote
    (the lerobot suite's, written here when missing)."""
    sys.path.insert(0, str(BENCH))
    from install_peers import install_lerobot

    python = install_lerobot(data / "venv-lerobot")
    if python is None:
        sys.exit("bench: LeRobot did not install (see above)")
    stamp = python.parent.parent / ".fluxon-video-source"
    source = source_digest()
    if not stamp.exists() or stamp.read_text() != source:
        print("bench: building fluxon_video into LeRobot's virtualenv", flush=True)
        if subprocess.run([str(python), "-m", "pip", "install", "-q", "--force-reinstall",
                           "--no-deps", str(ROOT)]).returncode or subprocess.run(
                [str(python), "-m", "pip", "install", "-q", f"{ROOT}[lerobot]"]).returncode:
            sys.exit("bench: fluxon_video did not build for LeRobot's Python")
        stamp.write_text(source)
    from lerobot_group import lerobot_dataset

    return python, lerobot_dataset(python, data, episodes, seed)[0]


class FluxonFs:
    """A real agent serving ``folder`` as export "lerobot" to identity "trainer", a real
    Redis as the shared cache, and the trainer's config file naming both."""

    def __init__(self, folder: Path, work: Path) -> None:
        from fluxon_video.fs import tokens
        from fluxon_video.testing import AgentProcess, RedisServer

        token = tokens.new_token()
        export = f'[[exports]]\nname = "{EXPORT}"\nroot = "{folder}"\nallow = ["trainer"]\n'
        agent_config = work / "agent.toml"
        agent_config.write_text(f'[identities]\ntrainer = "{tokens.hash_token(token)}"\n\n'
                                + export)
        agent_config.chmod(0o600)
        self.redis = RedisServer(work / "redis").start()
        try:
            self.agent = AgentProcess(agent_config).start()
        except BaseException:
            self.redis.stop()
            raise
        (work / "kv.key").write_text(tokens.new_token() + "\n")
        self.trainer_config = work / "fluxon.toml"
        self.trainer_config.write_text(
            f'[client]\nredis_url = "{self.redis.url}"\nkv_key_file = "{work / "kv.key"}"\n\n'
            f'[identities]\ntrainer = "{token}"\n\n'
            + export.replace("allow =", f'agent_url = "{self.agent.url}"\nallow ='))
        self.trainer_config.chmod(0o600)

    def __enter__(self) -> FluxonFs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.agent.stop()
        self.redis.stop()


def source_digest() -> str:
    """What the package is built from: a build is redone when this changes."""
    digest = hashlib.sha256()
    for path in sorted([ROOT / "setup.py", ROOT / "pyproject.toml",
                        *(p for p in (ROOT / "fluxon_video").rglob("*")
                          if p.suffix in (".py", ".pyx", ".pxd", ".h") or p.suffix == ".c"
                          and not p.with_suffix(".pyx").exists())]):  # not Cython's output
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def compare(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The runs of one worker count: does each fluxon run's every batch and loss agree
    with LeRobot's run, and the data waits of each."""
    base = runs["lerobot"]["steps"]
    out: dict[str, Any] = {}
    for impl, run in runs.items():  # the first step also starts the workers: kept apart
        steps = run["steps"]
        out[impl] = {"steps": len(steps), "wall_s": run["wall_s"],
                     "same_batches": sum(x["batch"] == y["batch"] for x, y in zip(steps, base)),
                     "same_losses": sum(x["loss"] == y["loss"] for x, y in zip(steps, base)),
                     "loss_first_last": [steps[0]["loss"], steps[-1]["loss"]],
                     "first_data_s": steps[0]["data_s"],
                     "data_s_median": statistics.median(s["data_s"] for s in steps[1:]),
                     "data_s_total": sum(s["data_s"] for s in steps[1:]),
                     "update_s_median": statistics.median(s["update_s"] for s in steps[1:])}
    out["agree"] = all(c["steps"] == len(base) == c["same_batches"] == c["same_losses"]
                       for c in out.values())
    return out


def markdown(result: dict[str, Any]) -> str:
    a = result["args"]
    lines = [
        "# LeRobot's training script with fluxon_video.lerobot swapped in", "",
        f"`{result['command']}`: {a['steps']} steps of ACT (`lerobot-train --policy.type=act`, "
        f"CPU, no pretrained backbone), batch {a['batch_size']}, seed 1000, on the dataset "
        f"LeRobot wrote ({a['episodes']} episodes, AV1, a keyframe every 2 frames); LeRobot "
        f"{result['versions']['lerobot']}, torch {result['versions']['torch']}, Python "
        f"{result['versions']['python']}. {result['machine']}.", "",
        "| workers | dataset | steps | same batches as LeRobot's | same losses | loss first → "
        "last | data wait median ms | data wait total s | first batch s | update median s |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for workers, by_impl in result["by_workers"].items():
        for impl in IMPLS:
            c = by_impl[impl]
            first, last = c["loss_first_last"]
            lines.append(
                f"| {workers} | {NAMES[impl]} | {c['steps']} | {c['same_batches']}/{c['steps']} "
                f"| {c['same_losses']}/{c['steps']} | {first:.4f} → {last:.4f} | "
                f"{c['data_s_median'] * 1e3:.0f} | {c['data_s_total']:.2f} | "
                f"{c['first_data_s']:.2f} | {c['update_s_median']:.2f} |")
    lines += ["", "Data wait: LeRobot's `dataloading_s`, the time `next()` on the DataLoader "
              "plus its preprocessing took in the training loop, over the steps after the "
              "first (the first also starts the workers). A batch digest is SHA-256 over every "
              "tensor of the preprocessed batch the script hands `update_policy`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from harness import tool_parser

    ap = tool_parser("lerobot_train.py", __doc__)
    ap.add_argument("--steps", type=int, default=12, help="training steps per run (12)")
    ap.add_argument("--batch-size", type=int, default=4, help="batch size (4)")
    ap.add_argument("--workers", default="0,2", help="DataLoader worker counts (0,2)")
    ap.add_argument("--episodes", type=int, default=12,
                    help="episodes of the LeRobot-written dataset (12, bench/lerobot.py's)")
    ap.add_argument("--seed", type=int, default=7, help="the dataset's seed (7)")
    ap.add_argument("--data", type=Path, default=BENCH / ".data", help="bench data folder")
    ap.add_argument("--out", type=Path, default=BENCH / "results", help="results folder")
    ap.add_argument("--child", choices=IMPLS, help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    work = args.data / "lerobot-train"
    if args.child:
        child(args.child, args.root, args.steps, args.batch_size, int(args.workers), work)
        return 0
    python, root = prepare(args.data, args.episodes, args.seed)
    work.mkdir(parents=True, exist_ok=True)
    by_workers: dict[str, Any] = {}
    with FluxonFs(root.parent, work) as fluxonfs:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "PYTHONPATH": "", "FLUXON_VIDEO_CONFIG": str(fluxonfs.trainer_config)}
        for workers in [int(w) for w in args.workers.split(",")]:
            runs = {}
            for impl in IMPLS:
                print(f"bench: lerobot-train, {NAMES[impl]} dataset, {workers} workers",
                      flush=True)
                proc = subprocess.run(
                    [str(python), __file__, "--child", impl, "--root", str(root),
                     "--steps", str(args.steps), "--batch-size", str(args.batch_size),
                     "--workers", str(workers), "--data", str(args.data)],
                    capture_output=True, text=True, env=env, cwd=work)
                lines = [x for x in proc.stdout.splitlines() if x.startswith('{"impl"')]
                if proc.returncode or not lines:
                    sys.exit(f"bench: lerobot-train failed with {NAMES[impl]} dataset:\n"
                             f"{proc.stderr[-3000:]}")
                runs[impl] = json.loads(lines[-1])
            by_workers[str(workers)] = {**compare(runs), "runs": runs}
    versions = json.loads(subprocess.run(
        [str(python), "-c", "import json, sys, torch, lerobot; print(json.dumps({'lerobot': "
         "lerobot.__version__, 'torch': torch.__version__, 'python': sys.version.split()[0]}))"],
        capture_output=True, text=True, cwd="/").stdout)
    from harness import machine, machine_line

    result = {"command": "python bench/lerobot_train.py " + " ".join(argv or sys.argv[1:]),
              "args": {"steps": args.steps, "batch_size": args.batch_size,
                       "episodes": args.episodes}, "versions": versions,
              "machine": machine_line(machine()), "by_workers": by_workers}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lerobot-train.json").write_text(json.dumps(result, indent=1))
    (args.out / "lerobot-train.md").write_text(markdown(result))
    print(markdown(result))
    return 0 if all(c["agree"] for c in by_workers.values()) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH))
    sys.exit(main())
