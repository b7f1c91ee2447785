"""Every code block of README.md and docs/*.md is run or checked here, or says why not.

A block's language says what is done with it, and an HTML comment right before
it (blank lines between are allowed; it does not render) can say more:

    <!-- doc-test: setup=deployment -->          run in that prepared environment
    <!-- doc-test: setup=deployment continue --> python: after the page's previous block
    <!-- doc-test: setup=x raises=NameError -->  python: must end raising that exception
    <!-- doc-test: file=train.py -->             written to that file in the setup's
                                                 directory (a later block runs it)
    <!-- doc-test: check=layout -->              a named check (CHECKS below)
    <!-- doc-test: output -->                    what a program printed: not run
    <!-- doc-test: skip="the reason" -->          not runnable; the reason is required

and ``<!-- doc-test-file: setup=NAME -->`` sets the default setup of a page.

- ``python``: written to a script and run with this interpreter (``python
  snippet.py``, so a ``__main__`` guard and spawn work as for a user), in the
  setup's directory and environment, after the setup's prelude (the names the
  snippet takes as given, e.g. ``reader``).
- ``sh``, ``console``: run by bash in the setup's directory; ``console`` runs its
  ``$ `` lines. The blocks of one page share one bash per setup, as a reader's
  terminal would (``cd``, ``export``, background jobs carry over); a block that
  starts an agent (``--listen``) or a redis-server (``--port``) waits until it
  answers. Output need not match what the page shows; the commands must succeed.
- ``toml``: placeholders (``"<43 characters>"``, ``"sha256:<64 hex digits>"``)
  filled, then loaded by ``config_from_dict`` as a trainer or an agent would.
- ``json``: parsed.
- anything else must be marked ``output``, ``skip`` or ``check``: an unmarked block
  fails ``test_every_block_is_run_checked_or_marked``.

Setups (SETUPS below) are built once per worker process, when a page first asks
for one: small videos made by the ffmpeg CLI, config files, a real
redis-server and agent (``fluxon_video.testing``), moto's S3 server.
Placeholders such as ``127.0.0.1:8765`` or ``/tmp/qs`` are replaced by the
setup's own ports and paths before a block runs.
"""

from __future__ import annotations

import base64
import configparser
import hashlib
import json
import os
import queue
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fluxon_video.fs import tokens
from fluxon_video.fs.config import config_from_dict
from fluxon_video.testing import AgentProcess, RedisServer, S3Server, free_port
from tests.helpers import make_certificate

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*doc-test(-file)?:(.*?)-->")
FENCE = re.compile(r"```(\S*)\s*$")
SHELL_LANGS = {"sh", "bash", "shell", "console"}
OPTIONS = {"setup", "continue", "file", "check", "output", "skip", "raises"}
BLOCK_TIMEOUT_S = 240
FFMPEG = ["ffmpeg", "-nostdin", "-loglevel", "error", "-y"]


# ---- the pages' blocks ----

@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    options: dict[str, str | bool]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _options(text: str, where: str) -> dict[str, str | bool]:
    found: dict[str, str | bool] = {}
    for token in shlex.split(text):
        key, sep, value = token.partition("=")
        if key not in OPTIONS:
            raise ValueError(f"{where}: unknown doc-test option {key!r} (known: {sorted(OPTIONS)})")
        found[key] = value if sep else True
    return found


def page_blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, each with the options of the marker before it."""
    lines = page.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    defaults: dict[str, str | bool] = {}
    pending: tuple[int, dict[str, str | bool]] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        where = f"{page.relative_to(ROOT)}:{i + 1}"
        marker = MARKER.fullmatch(line.strip())
        if marker:
            options = _options(marker.group(2), where)
            if marker.group(1):
                defaults = options
            else:
                pending = (i + 1, options)
            i += 1
            continue
        if line.lstrip().startswith("```") and not line.startswith("```"):
            raise ValueError(f"{where}: an indented fence; write blocks at the left margin")
        fence = FENCE.match(line)
        if fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                raise ValueError(f"{where}: a fence that is never closed")
            options = {**defaults, **(pending[1] if pending else {})}
            blocks.append(Block(page, i + 1, fence.group(1), "\n".join(lines[i + 1:end]) + "\n",
                                options))
            pending = None
            i = end + 1
            continue
        if line.strip() and pending:
            raise ValueError(f"{page.relative_to(ROOT)}:{pending[0]}: a doc-test marker not "
                             "followed by a code block")
        i += 1
    return blocks


def plan(block: Block) -> str:
    """What is done with a block: skip, output, check:NAME, python, file, shell, toml, json."""
    options = block.options
    if "skip" in options:
        if not isinstance(options["skip"], str) or not options["skip"].strip():
            raise ValueError(f"{block.where}: skip needs a reason (skip=\"why\")")
        return "skip"
    if options.get("output"):
        return "output"
    if "check" in options:
        if options["check"] not in CHECKS:
            raise ValueError(f"{block.where}: unknown check {options['check']!r} "
                             f"(known: {sorted(CHECKS)})")
        return f"check:{options['check']}"
    if "raises" in options and not isinstance(options["raises"], str):
        raise ValueError(f"{block.where}: raises needs an exception name (raises=NAME)")
    if "setup" in options and options["setup"] not in SETUPS:
        raise ValueError(f"{block.where}: unknown setup {options['setup']!r} "
                         f"(known: {sorted(SETUPS)})")
    if block.lang == "python":
        return "file" if "file" in options else "python"
    if block.lang in SHELL_LANGS:
        return "shell"
    if block.lang == "toml":
        return "toml"
    if block.lang == "json":
        return "json"
    raise ValueError(f"{block.where}: a ```{block.lang or '(no language)'} block that is neither "
                     "run nor checked: mark it <!-- doc-test: output -->, <!-- doc-test: "
                     "check=NAME --> or <!-- doc-test: skip=\"why\" -->")


# ---- placeholders ----

QUOTED = re.compile(r'"([^"\n]*)"')


def fill_placeholders(text: str) -> str:
    """Quoted placeholders made real: "<43 characters>" a token, "sha256:<...>" a hash,
    "<password>" inside a URL its word; the same placeholder the same value."""
    def real(match: re.Match[str]) -> str:
        value = match.group(1)
        if "<" not in value and "..." not in value:
            return match.group(0)
        if "://" in value:
            return '"' + re.sub(r"<([^>]*)>", lambda m: re.sub(r"\W", "", m.group(1)), value) + '"'
        digest = hashlib.sha256(value.encode()).digest()
        if value.startswith(tokens.HASH_PREFIX):
            return f'"{tokens.HASH_PREFIX}{digest.hex()}"'
        return '"' + base64.urlsafe_b64encode(digest).decode().rstrip("=") + '"'
    return QUOTED.sub(real, text)


def substitute(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        text = re.sub(rf"(?<![\w.]){re.escape(old)}(?![\w])", lambda _m, new=new: new, text)
    return text


# ---- setups ----

def run(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120, **kw)


def make_video(out: Path, seconds: float, *, size: str = "256x144", rate: int = 30,
               codec: tuple[str, ...] = ("-c:v", "libx264", "-preset", "veryfast"),
               gop: int = 250, audio: bool = False, extra: tuple[str, ...] = ()) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        return out
    inputs = ["-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}"]
    if audio:
        inputs += ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"]
    tmp = out.with_name(out.stem + ".part" + out.suffix)
    run([*FFMPEG, *inputs, "-t", str(seconds), *codec, "-g", str(gop), "-pix_fmt", "yuv420p",
         *(("-c:a", "aac", "-ac", "2") if audio else ()), *extra, str(tmp)])
    tmp.replace(out)
    return out


@dataclass
class Setup:
    """A directory, an environment and what a snippet may take as given."""
    name: str
    dir: Path
    env: dict[str, str]
    prelude: str = ""
    replacements: dict[str, str] = field(default_factory=dict)
    closers: list = field(default_factory=list)
    redis_ports: set[int] = field(default_factory=set)  # daemonized by a page: shut down

    def close(self) -> None:
        for port in self.redis_ports:
            subprocess.run(["redis-cli", "-p", str(port), "shutdown", "nosave"],
                           capture_output=True, timeout=10)
        for close in reversed(self.closers):
            close()


class Setups:
    """Setups built on first use, kept for this worker's run of the module."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.assets = base / "assets"
        self.built: dict[str, Setup] = {}

    def get(self, name: str) -> Setup:
        if name not in self.built:
            directory = self.base / name
            directory.mkdir()
            env = dict(os.environ)
            env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
            for var in ("FLUXON_VIDEO_CONFIG", "FLUXON_VIDEO_IDENTITY", "FLUXON_KV_KEYS"):
                env.pop(var, None)
            setup = Setup(name, directory, env)
            try:
                SETUPS[name](self, setup)
            except BaseException:
                setup.close()
                raise
            self.built[name] = setup
        return self.built[name]

    def close(self) -> None:
        for setup in self.built.values():
            setup.close()

    # What several setups share, made once.
    def demo_videos(self) -> Path:
        """make demo's three videos by name, at 256x144 (the same 16:9, 300 frames, 10 s)."""
        root = self.assets / "demo" / "videos"
        make_video(root / "h264_720p_gop250.mp4", 10, extra=("-movflags", "+faststart"))
        make_video(root / "hevc_480p.mp4", 10,
                   codec=("-c:v", "libx265", "-preset", "ultrafast", "-x265-params",
                          "log-level=error", "-tag:v", "hvc1"))
        make_video(root / "vp9_360p.webm", 10,
                   codec=("-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8"))
        return root.parent

    def av_clip(self) -> Path:
        """A 6 s H.264 + AAC (44.1 kHz stereo) clip."""
        return make_video(self.assets / "av.mp4", 6, rate=25, gop=50, audio=True)


def link_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, copy_function=os.link, dirs_exist_ok=True)


def setup_plain(setups: Setups, setup: Setup) -> None:
    """An empty directory."""


def setup_clip(setups: Setups, setup: Setup) -> None:
    """clip.mp4: a video with audio."""
    os.link(setups.av_clip(), setup.dir / "clip.mp4")


def setup_reader(setups: Setups, setup: Setup) -> None:
    """``reader``: clip.mp4 opened at 224x224."""
    setup_clip(setups, setup)
    setup.prelude = ('import fluxon_video as fv\n'
                     'reader = fv.open_video("clip.mp4", height=224, width=224)\n\n')


def setup_long_reader(setups: Setups, setup: Setup) -> None:
    """``reader`` on a 160 s video at 30 fps (4,800 frames of 64x36), and ``np``."""
    make_video(setup.dir / "long.mp4", 160, size="64x36", gop=300,
               codec=("-c:v", "libx264", "-preset", "ultrafast"))
    setup.prelude = ('import numpy as np\n\nimport fluxon_video as fv\n\n'
                     'reader = fv.open_video("long.mp4")\n\n')


def setup_demo(setups: Setups, setup: Setup) -> None:
    """What `make demo` leaves: .demo-data/videos/ with its three videos."""
    link_tree(setups.demo_videos(), setup.dir / ".demo-data")


def setup_deployment(setups: Setups, setup: Setup) -> None:
    """A trainer's fluxon.toml ($FLUXON_VIDEO_CONFIG) over a real redis-server and a real
    agent (HTTPS, --io-threads 16) serving three exports: demo (the demo data),
    train-videos (bucket/a/b/sample.mp4, a.mp4, b.mp4) and data (av.mp4); clip.mp4 and
    the agent's certificate (agent.crt) beside them. 127.0.0.1:8765 is the agent."""
    d = setup.dir
    setup_demo(setups, setup)
    h264 = setups.demo_videos() / "videos" / "h264_720p_gop250.mp4"
    for relpath in ("bucket/a/b/sample.mp4", "a.mp4", "b.mp4"):
        (d / "train-videos" / relpath).parent.mkdir(parents=True, exist_ok=True)
        os.link(h264, d / "train-videos" / relpath)
    (d / "data").mkdir()
    os.link(setups.av_clip(), d / "data" / "av.mp4")
    setup_clip(setups, setup)
    cert, key = make_certificate(d)
    shutil.copy(cert, d / "agent.crt")
    token = tokens.new_token()
    roots = {"demo": d / ".demo-data", "train-videos": d / "train-videos", "data": d / "data"}
    exports = "".join(f'\n[[exports]]\nname = "{name}"\nroot = "{root}"\nallow = ["trainer"]\n'
                      for name, root in roots.items())
    agent_toml = d / "agent.toml"
    agent_toml.write_text(f'[identities]\ntrainer = "{tokens.hash_token(token)}"\n{exports}')
    redis_server = RedisServer(d / "redis").start()
    setup.closers.append(redis_server.stop)
    agent = AgentProcess(agent_toml, args=["--io-threads", "16"], tls=(cert, key)).start()
    setup.closers.append(agent.stop)
    (d / "kv.key").write_text(tokens.new_token() + "\n")
    trainer = d / "fluxon.toml"
    trainer.write_text(
        f'[client]\nredis_url = "{redis_server.url}"\nkv_key_file = "{d / "kv.key"}"\n'
        f'agent_ca_bundle = "{cert}"\n\n[identities]\ntrainer = "{token}"\n'
        + exports.replace('allow = ["trainer"]', f'agent_url = "{agent.url}"\nallow = ["trainer"]'))
    trainer.chmod(0o600)
    setup.env["FLUXON_VIDEO_CONFIG"] = str(trainer)
    setup.replacements = {"127.0.0.1:8765": f"127.0.0.1:{agent.port}"}


def setup_quickstart(setups: Setups, setup: Setup) -> None:
    """docs/quickstart.md makes everything itself: its /tmp/qs, ports and token become
    this directory, free ports and a fresh token."""
    token = tokens.new_token()
    ports = [free_port() for _ in range(3)]
    setup.replacements = {
        "/tmp/qs": str(setup.dir), "6390": str(ports[0]), "8790": str(ports[1]),
        "8791": str(ports[2]),
        '"0q3X...43 characters...8Rw"': f'"{token}"',
        '"sha256:5a1e...64 hex digits...c9d2"': f'"{tokens.hash_token(token)}"'}
    setup.redis_ports.add(ports[0])


def setup_testing(setups: Setups, setup: Setup) -> None:
    """``tmp_path`` (an empty directory) and ``root`` (a directory with a video)."""
    (setup.dir / "videos").mkdir()
    os.link(setups.av_clip(), setup.dir / "videos" / "a.mp4")
    setup.prelude = ('from pathlib import Path\n'
                     'tmp_path = Path("work").resolve()\n'
                     'tmp_path.mkdir()\n'
                     'root = Path("videos").resolve()\n\n')


def setup_s3(setups: Setups, setup: Setup) -> None:
    """``patcher`` with export train on s3://videos/train (moto's S3 server, in-process),
    holding train/cam1/a.mp4."""
    server = S3Server(setup.dir / "s3").start()
    setup.closers.append(server.stop)
    h264 = setups.demo_videos() / "videos" / "h264_720p_gop250.mp4"
    server.upload("videos", {"train/cam1/a.mp4": h264})
    setup.prelude = (
        'import fluxon_video as fv\n'
        'patcher = fv.FluxonFsPatcher(\n'
        f'    exports=[fv.FluxonFsExport("train", "s3://videos/train", allow=["me"],\n'
        f'                               store={server.store_options()!r})],\n'
        f'    identities={{"me": {tokens.new_token()!r}}}, identity="me")\n\n')


def setup_lerobot(setups: Setups, setup: Setup) -> None:
    """pusht/: a LeRobot v3 dataset (tests/lerobot_data.py: 5 episodes, two cameras,
    AV1), and fluxon.toml ($FLUXON_VIDEO_CONFIG) exporting this directory in-process
    as "datasets" to identity trainer."""
    from tests.lerobot_data import write_dataset

    write_dataset(setup.dir / "pusht", "av1")
    config = setup.dir / "fluxon.toml"
    config.write_text(f'[identities]\ntrainer = "{tokens.new_token()}"\n\n'
                      f'[[exports]]\nname = "datasets"\nroot = "{setup.dir}"\n'
                      'allow = ["trainer"]\n')
    config.chmod(0o600)
    setup.env["FLUXON_VIDEO_CONFIG"] = str(config)


SETUPS = {"lerobot": setup_lerobot,
          "plain": setup_plain, "clip": setup_clip, "reader": setup_reader,
          "long-reader": setup_long_reader,
          "demo": setup_demo, "deployment": setup_deployment, "quickstart": setup_quickstart,
          "testing": setup_testing, "s3": setup_s3}


# ---- running blocks ----

class Shell:
    """One bash, as a reader's terminal: blocks are sourced into it in turn."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=setup.dir,
                                     env=setup.env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     bufsize=1, start_new_session=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.count = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def run(self, script: str, where: str) -> str:
        """Source script (stdin: /dev/null); the output, or a failure naming the command."""
        self.count += 1
        path = self.setup.dir / f".doc-test-{self.count}.sh"
        path.write_text(script)
        done = f"__doc_test_done_{uuid.uuid4().hex}__"
        assert self.proc.stdin is not None
        self.proc.stdin.write(
            f"trap 'echo \"__doc_test_failed__ $? $BASH_COMMAND\"' ERR\n"
            f". {shlex.quote(str(path))} < /dev/null\ntrap - ERR\necho {done}\n")
        self.proc.stdin.flush()
        output: list[str] = []
        deadline = time.monotonic() + BLOCK_TIMEOUT_S
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"{where}: no end after {BLOCK_TIMEOUT_S} s:\n" + "\n".join(output))
            if line is None:
                pytest.fail(f"{where}: the shell exited:\n" + "\n".join(output))
            if line == done:
                break
            output.append(line)
        failed = [line for line in output if line.startswith("__doc_test_failed__")]
        if failed:
            pytest.fail(f"{where}: a command failed ({failed[0]}):\n" + "\n".join(output))
        return "\n".join(output)

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


def console_commands(text: str) -> str:
    """The `$ ` lines of a console block (with their continuation lines)."""
    commands, lines = [], iter(text.splitlines())
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                command += "\n" + next(lines)
            commands.append(command)
    assert commands, "a console block without a `$ ` command"
    return "\n".join(commands) + "\n"


def wait_for_servers(script: str, where: str, shell_output: str) -> None:
    """Wait until the agents (--listen) and redis-servers (--port) a block started answer."""
    servers = [("http", m.group(1)) for m in re.finditer(r"agent\b[^\n]*--listen\s+(\S+)", script)]
    servers += [("redis", m.group(1))
                for m in re.finditer(r"redis-server\b[^\n]*--port\s+(\d+)", script)]
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    for kind, address in servers:
        host, _, port = address.rpartition(":")
        deadline = time.monotonic() + 30
        while True:
            try:
                if kind == "redis":
                    socket.create_connection((host or "127.0.0.1", int(port)), 1).close()
                else:
                    scheme = "https" if "--tls-cert" in script else "http"
                    urllib.request.urlopen(f"{scheme}://{address}/healthz", timeout=1,
                                           context=context if scheme == "https" else None).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"{where}: {address} never answered:\n{shell_output}")
                time.sleep(0.1)


def run_python(setup: Setup, code: str, where: str, raises: str | None = None) -> None:
    script = setup.dir / f"doc_test_{re.sub(r'[^0-9A-Za-z]+', '_', where)}.py"
    script.write_text(setup.prelude + code)
    try:
        result = subprocess.run([sys.executable, script.name], cwd=setup.dir, env=setup.env,
                                capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{where}: still running after {BLOCK_TIMEOUT_S} s:\n{exc.stdout}{exc.stderr}")
    if raises:
        last = (result.stderr.strip().splitlines() or [""])[-1]
        if result.returncode and re.match(rf"([\w.]+\.)?{re.escape(raises)}:", last):
            return
        pytest.fail(f"{where}: should end raising {raises}, but exit {result.returncode}\n"
                    f"{result.stdout}{result.stderr}")
    if result.returncode:
        pytest.fail(f"{where}: exit {result.returncode}\n--- script ---\n{setup.prelude + code}"
                    f"--- output ---\n{result.stdout}{result.stderr}")


def check_toml(text: str, where: str) -> None:
    try:
        config_from_dict(tomllib.loads(fill_placeholders(text)))
    except Exception as exc:  # noqa: BLE001 - the message is the point
        pytest.fail(f"{where}: the config does not load: {type(exc).__name__}: {exc}")


# ---- named checks ----

def _cli_parse(argv: list[str], where: str) -> None:
    from fluxon_video.cli import build_parser

    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{where}: `fluxon-video {shlex.join(argv)}` does not parse (exit {exc.code})")


def _commands(text: str) -> list[list[str]]:
    joined = re.sub(r"\\\n", " ", text)
    return [shlex.split(line, comments=True) for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def check_cli_args(block: Block, setups: Setups) -> None:
    """Each fluxon-video command parses with the command line's own parser (commands that
    start a server on a port and TLS files a test machine does not have)."""
    found = 0
    for argv in _commands(block.text):
        if argv[:1] == ["fluxon-video"]:
            _cli_parse(argv[1:], block.where)
            found += 1
    assert found, f"{block.where}: no fluxon-video command"


def check_systemd_unit(block: Block, setups: Setups) -> None:
    """The unit parses; ExecStart runs fluxon-video with options it takes; the limits
    leave the agent the time it asks for."""
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment]
    unit.read_string(re.sub(r"\\\n\s*", " ", block.text))
    service = unit["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0].endswith("/fluxon-video"), block.where
    _cli_parse(argv[1:], block.where)
    assert int(service["TimeoutStopSec"]) > 60, "the agent gives requests in flight 60 s"
    assert {"Unit", "Service", "Install"} <= set(unit.sections())


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w-]*):", makefile, re.M)}


def check_make_targets(block: Block, setups: Setups) -> None:
    """Each `make X` names a target of the Makefile."""
    targets = _make_targets()
    named = [argv[1] for argv in _commands(block.text) if argv[:1] == ["make"]]
    assert named, block.where
    missing = [t for t in named if t not in targets]
    assert not missing, f"{block.where}: no such make target: {missing}"


def check_bench_commands(block: Block, setups: Setups) -> None:
    """make targets exist, and each bench script named exists with the options given."""
    check_make_targets(block, setups)
    for argv in _commands(block.text):
        if argv[:1] == [".venv/bin/python"]:
            script = ROOT / argv[1]
            assert script.is_file(), f"{block.where}: no {argv[1]}"
            options = [a.split("=")[0] for a in argv[2:] if a.startswith("--") and a != "--help"]
            if options:
                help_text = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT,
                                           capture_output=True, text=True, timeout=120).stdout
                missing = [o for o in options if o not in help_text]
                assert not missing, f"{block.where}: {argv[1]} has no option {missing}"


def check_layout(block: Block, setups: Setups) -> None:
    """Every file the layout names exists, and every source file of the package is named."""
    named: set[Path] = set()
    parents: set[Path] = set()  # folders whose files are listed one by one
    stack: list[tuple[int, Path]] = []
    for line in block.text.splitlines():
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if not stripped or stripped.startswith("#") or indent >= 16:
            continue  # a comment, or a description's continuation
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ROOT
        names = []
        for token in stripped.split():
            if not re.fullmatch(r"[\w./*{},-]+", token) or not re.search(r"[./]", token):
                break
            names.append(token)
        assert names, f"{block.where}: no file named in {line!r}"
        parents.add(parent)
        for name in names:
            if "{" in name:  # _pagecache.{h,c}
                stem, alternatives = re.fullmatch(r"(.*)\{(.*)\}", name).groups()
                paths = [parent / (stem + alt) for alt in alternatives.split(",")]
            else:
                paths = [parent / name.rstrip("/")]
            for path in paths:
                if "*" in path.name:
                    matches = list(path.parent.glob(path.name))
                    assert matches, f"{block.where}: nothing matches {path.relative_to(ROOT)}"
                    named.update(matches)
                else:
                    assert path.exists(), f"{block.where}: {path.relative_to(ROOT)} does not exist"
                    named.add(path)
        if names[0].endswith("/"):
            stack.append((indent, parent / names[0].rstrip("/")))
    folders = {p for p in named if p.is_dir() and p not in parents}  # ops/: its files as one
    unnamed = []
    for path in sorted((ROOT / "fluxon_video").rglob("*")):
        if path.suffix not in {".py", ".pyx", ".pxd", ".h", ".c"} or path.name.startswith("__"):
            continue
        if path.suffix == ".c" and path.with_suffix(".pyx").exists():
            continue  # Cython's output
        if path.suffix == ".pxd" and {path.with_suffix(".pyx"), path.with_suffix(".h")} & named:
            continue  # the declarations of a named unit
        if path not in named and not any(folder in path.parents for folder in folders):
            unnamed.append(str(path.relative_to(ROOT)))
    assert not unnamed, f"{block.where}: the layout does not name {unnamed}"


TREE_LINE = re.compile(r"^([│ ]*)(?:[├└]── )?(\w+)(?:\s+\((\w+)\))?")


def check_error_tree(block: Block, setups: Setups) -> None:
    """The exception tree is the library's: each class derives from the one above it and
    from the builtin named beside it."""
    import builtins

    import fluxon_video as fv

    parents: list[tuple[int, type]] = []
    seen = 0
    for line in block.text.splitlines():
        match = TREE_LINE.match(line)
        if not match or not hasattr(fv, match.group(2)):
            continue  # a wrapped description
        depth = match.start(2)
        cls = getattr(fv, match.group(2))
        while parents and parents[-1][0] >= depth:
            parents.pop()
        if parents:
            assert issubclass(cls, parents[-1][1]), f"{block.where}: {cls.__name__} is not a " \
                                                    f"{parents[-1][1].__name__}"
        if match.group(3):
            assert issubclass(cls, getattr(builtins, match.group(3))), \
                f"{block.where}: {cls.__name__} is not a {match.group(3)}"
        parents.append((depth, cls))
        seen += 1
    errors = {name for name in dir(fv) if name.startswith("FluxonFs") and name.endswith("Error")}
    assert seen == len(errors), f"{block.where}: {seen} classes shown, {len(errors)} exported"


def check_kv_key(block: Block, setups: Setups) -> None:
    """docs/kv-format.md's example key, as the code makes it."""
    from fluxon_video.fs.kv import piece_key
    from fluxon_video.fs.origin import FileStat

    version = FileStat(5_000_000, 1700000000123456789, 1700000000223456789, 131075)
    assert block.text.strip() == piece_key("fluxonfs", "train", "bucket/videos/a.mp4", version,
                                           262144, 3)


def check_redis_acl(block: Block, setups: Setups) -> None:
    """security.md's redis.conf: a Redis started with it (a test certificate, a free port)
    serves a trainer that reads as its ACL user: pieces, index blobs, shared stats, fetch
    claims and TTLs all go through, with no KV error."""
    d = setups.base / "redis-acl"
    d.mkdir()
    cert, key = make_certificate(d)
    port = free_port()
    conf = block.text
    for option, value in (("tls-port", str(port)), ("tls-cert-file", str(cert)),
                          ("tls-key-file", str(key)), ("tls-ca-cert-file", str(cert))):
        conf, n = re.subn(rf"^{option} .*$", f"{option} {value}", conf, flags=re.M)
        assert n == 1, f"{block.where}: no {option} line"
    (d / "redis.conf").write_text(conf + f'dir {d}\nsave ""\nappendonly no\n')
    server = subprocess.Popen(["redis-server", str(d / "redis.conf")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT)
    try:
        import fluxon_video as fv
        from fluxon_video.fs.config import ClientSettings

        root = setups.demo_videos()
        url = f"rediss://trainer:CHANGE-ME@127.0.0.1:{port}/0"
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "redis did not start"
                time.sleep(0.1)
        export = fv.FluxonFsExport("demo", str(root), allow=["me"], cache_ttl_s=3600,
                                   single_flight_across_nodes=True)
        client = ClientSettings(redis_url=url, redis_ca_bundle=str(cert),
                                kv_keys=[tokens.new_token()])
        for attempt in ("cold", "warm"):
            with fv.FluxonFsPatcher(exports=[export], identities={"me": tokens.new_token()},
                                    client=client, identity="me") as patcher:
                with patcher.open_video_reader("demo", "videos/vp9_360p.webm", 64, 64) as reader:
                    reader.read_frames_numpy([0, 100, 200])
                stats = patcher.stats()
            assert stats.kv_errors == 0, f"{block.where}: KV errors as the ACL user ({attempt})"
        assert stats.kv_hits > 0 and stats.remote_bytes == 0 and stats.index_from_kv > 0, stats
    finally:
        server.terminate()
        server.wait(10)


CHECKS = {"cli-args": check_cli_args, "systemd-unit": check_systemd_unit,
          "make-targets": check_make_targets, "bench-commands": check_bench_commands,
          "layout": check_layout, "error-tree": check_error_tree, "kv-key": check_kv_key,
          "redis-acl": check_redis_acl}


# ---- the tests ----

def test_every_block_is_run_checked_or_marked():
    problems, counts = [], {}
    for page in PAGES:
        try:
            for block in page_blocks(page):
                kind = plan(block)
                counts[kind] = counts.get(kind, 0) + 1
        except ValueError as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(problems)
    assert counts.get("python", 0) >= 10 and counts.get("shell", 0) >= 10, counts


@pytest.fixture(scope="module")
def setups(tmp_path_factory):
    built = Setups(tmp_path_factory.mktemp("doc-setups"))
    yield built
    built.close()


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_blocks(page, setups):
    """The page's blocks in order: python and shell run, configs load, checks pass."""
    shells: dict[str, Shell] = {}
    chains: dict[str, str] = {}  # setup -> the python the next `continue` block follows
    blocks = page_blocks(page)
    try:
        for i, block in enumerate(blocks):
            kind = plan(block)
            if kind in ("skip", "output"):
                continue
            if kind.startswith("check:"):
                CHECKS[kind.split(":", 1)[1]](block, setups)
                continue
            if kind == "json":
                json.loads(block.text)
                continue
            if kind == "toml" and "file" not in block.options and "setup" not in block.options:
                check_toml(block.text, block.where)
                continue
            setup = setups.get(str(block.options.get("setup", "plain")))
            text = substitute(block.text, setup.replacements)
            if kind == "toml":
                check_toml(text, block.where)
                if "file" in block.options:
                    path = setup.dir / str(block.options["file"])
                    path.write_text(fill_placeholders(text))
                    path.chmod(0o600)
            elif kind == "file":
                name = str(block.options["file"])
                assert any(name in later.text for later in blocks[i + 1:]), \
                    f"{block.where}: {name} is written but no later block runs it"
                (setup.dir / name).write_text(text)
            elif kind == "python":
                code = chains.get(setup.name, "") + text if block.options.get("continue") else text
                run_python(setup, code, block.where, block.options.get("raises"))
                chains[setup.name] = code
            elif kind == "shell":
                if setup.name not in shells:
                    shells[setup.name] = Shell(setup)
                script = console_commands(text) if block.lang == "console" else text
                for m in re.finditer(r"redis-server\b[^\n]*--port\s+(\d+)", script):
                    setup.redis_ports.add(int(m.group(1)))
                output = shells[setup.name].run(script, block.where)
                wait_for_servers(script, block.where, output)
    finally:
        for shell in shells.values():
            shell.close()


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, counts = set(), {}
    in_block = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_block = not in_block
        if in_block or not line.startswith("#"):
            continue
        slug = github_anchor(line.lstrip("#"))
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_links_between_pages_resolve():
    """Every relative link of the README and docs/ names a file of the repository, and
    its #anchor a heading of that page."""
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_is_a_front_page():
    """The README stays what a user needs first; the rest lives in docs/."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    for page in ("docs/quickstart.md", "docs/benchmarks.md", "docs/reading.md"):
        assert f"]({page}" in text, page
