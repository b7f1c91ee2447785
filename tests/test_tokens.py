"""Bearer tokens and what an unauthenticated client may learn (issue 34, items 8, 9, 10, 15).

Real agent processes on loopback, real config files: hashed tokens, weak
tokens refused at the agent's start, `fluxon-video token new` end to end, the
warning for a config others can read, two tokens per identity, unknown exports
that name no other export, and http:// agents off loopback refused.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
import warnings
from pathlib import Path
from urllib.parse import urlencode

import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.fs.config import ClientSettings, FluxonFsConfig, FluxonFsExport, load_config
from fluxon_video.fs.storage import ExportStorage
from fluxon_video.fs.tokens import MIN_BITS, entropy_bits, hash_token
from fluxon_video.testing import AgentProcess, ServerStartError
from tests.helpers import IDENTITIES

pytestmark = pytest.mark.timeout(120)

VIDEO = "bucket/videos/h264_faststart.mp4"
ALICE, BOB = IDENTITIES["alice"], IDENTITIES["bob"]


def write_config(path: Path, identities: str, exports: str, mode: int = 0o600) -> Path:
    path.write_text(f"[identities]\n{identities}\n\n{exports}")
    path.chmod(mode)
    return path


def export_text(name: str, root: Path, allow: list[str], agent_url: str | None = None) -> str:
    url = f'agent_url = "{agent_url}"\n' if agent_url else ""
    return (f'[[exports]]\nname = "{name}"\nroot = "{root}"\n{url}'
            f"allow = {json.dumps(allow)}\n\n")


def get(url: str, token: str | None, **query: object) -> tuple[int, str]:
    """(status, body) of a GET to the agent; an HTTP error is an answer here."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"{url}?{urlencode(query)}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def stat(agent: AgentProcess, token: str | None, export: str = "train") -> tuple[int, str]:
    return get(agent.url + "/v1/stat", token, export=export, path=VIDEO)


# ---- item 9a: hashed tokens ----

def test_an_agent_config_with_sha256_tokens_authenticates_them(tmp_path, export_root):
    config = write_config(tmp_path / "agent.toml",
                          f'alice = "{hash_token(ALICE)}"\nbob = "{BOB}"',
                          export_text("train", export_root, ["alice", "bob"]))
    with AgentProcess(config) as agent:
        assert stat(agent, ALICE)[0] == 200  # hashed in the config
        assert stat(agent, BOB)[0] == 200  # plain in the config: checked the same way
        assert stat(agent, secrets.token_urlsafe(32))[0] == 401  # a wrong (strong) token
        assert stat(agent, hash_token(ALICE))[0] == 401  # the hash itself is no token
        assert stat(agent, None)[0] == 401
        # A trainer (its own config holds the plain token) reads through it.
        export = FluxonFsExport("train", str(export_root), agent_url=agent.url, allow=["alice"])
        with fv.FluxonFsPatcher(exports=[export], identities={"alice": ALICE},
                                identity="alice") as patcher:
            with patcher.open_video_reader("train", VIDEO, 8, 8, 1) as reader:
                assert reader.read_frames_numpy([0]).shape == (1, 8, 8, 3)


def test_a_hashed_token_cannot_be_a_trainers_identity(tmp_path, export_root):
    path = write_config(tmp_path / "trainer.toml", f'alice = "{hash_token(ALICE)}"',
                        export_text("train", export_root, ["alice"], "https://storage-01:8765"))
    config = load_config(path)
    with pytest.raises(errors.FluxonFsConfigError,
                       match=f"identity 'alice' has only sha256: tokens in {path}.*plain token"):
        fv.FluxonFsPatcher(config, identity="alice")
    with pytest.raises(errors.FluxonFsConfigError, match="a trainer cannot send"):
        fv.RequestIdentity("alice", hash_token(ALICE))


@pytest.mark.parametrize("entry, message", [
    ('"sha256:abc"', r"\[identities\] alice: a sha256: token is 'sha256:' and 64 hex digits"),
    ('"scrypt:16384:8:1:c2FsdA:aGFzaA"', r"only the sha256:<64 hex digits> hash form"),
    ('"two words"', "printable ASCII without spaces"),
    ("[]", "a token is a string, or a list"),
    ("5", "must map identity names to a token string"),
    (f'["{ALICE}", ""]', r"\[identities\] alice\[1\]: a token must be a non-empty string"),
])
def test_token_entries_are_checked_naming_the_file_and_key(tmp_path, entry, message):
    path = write_config(tmp_path / "bad.toml", f"alice = {entry}", "")
    with pytest.raises(errors.FluxonFsConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


# ---- item 9b: weak tokens refused where they guard a network boundary ----

@pytest.mark.parametrize("identities, key", [
    ('alice = "a"', r"[identities] alice:"),
    (f'alice = ["{ALICE}", "token-alice"]', r"[identities] alice[1]:"),
])
def test_a_weak_token_refuses_the_agents_start(tmp_path, export_root, identities, key):
    path = write_config(tmp_path / "agent.toml", identities,
                        export_text("train", export_root, ["alice"]))
    agent = AgentProcess(path)
    try:
        with pytest.raises(ServerStartError) as info:
            agent.start()
    finally:
        agent.stop()  # had it started (today's agent did), it must not outlive the test
    message = str(info.value)
    assert f"{path}: {key} the token is too weak" in message
    assert f"at least {MIN_BITS} needed" in message and "fluxon-video token new" in message
    assert "token-alice" not in message  # the message never shows the token
    # In-process, nothing crosses a network: the same config serves (documented).
    with fv.FluxonFsPatcher(load_config(path), identity="alice") as patcher:
        assert patcher.file_version("train", VIDEO).size > 0


def test_entropy_estimate_from_length_and_alphabet():
    assert entropy_bits(secrets.token_urlsafe(32)) >= 250  # `token new`: 43 characters
    assert entropy_bits(secrets.token_urlsafe(16)) >= MIN_BITS  # 22 characters, 132 bits
    assert entropy_bits(secrets.token_hex(16)) == 128  # 32 hex digits
    assert entropy_bits(str(uuid.uuid4())) == 128  # dashes count nothing
    assert entropy_bits("".join(secrets.choice("0123456789") for _ in range(39))) > MIN_BITS
    assert entropy_bits("1234567890" * 4) < MIN_BITS  # 40 digits, but a repeated pattern
    for weak in ("a", "token-alice", "s3cret-trainer-token", secrets.token_hex(15),
                 "a" * 200, "ab" * 100, "abcdefg" * 30, "token-alice" * 5):
        assert entropy_bits(weak) < MIN_BITS, weak


# ---- `fluxon-video token new` ----

def test_token_new_output_works_end_to_end(tmp_path, export_root):
    cli = [sys.executable, "-m", "fluxon_video", "token"]
    help_text = subprocess.run([*cli, "new", "--help"], capture_output=True, text=True,
                               check=True).stdout
    assert "sha256:" in help_text and "128" in help_text and "agent's config" in help_text
    out = subprocess.run([*cli, "new", "alice"], capture_output=True, text=True,
                         check=True).stdout
    trainer_line, agent_line = [line for line in out.splitlines() if not line.startswith("#")]
    token = trainer_line.split(" = ")[1].strip('"')
    assert trainer_line.startswith("alice = ") and len(token) == 43
    assert agent_line == f'alice = "{hash_token(token)}"'
    hashed = subprocess.run([*cli, "hash"], input=token + "\n", capture_output=True, text=True,
                            check=True).stdout.strip()
    assert f'alice = "{hashed}"' == agent_line
    weak = subprocess.run([*cli, "hash"], input="token-alice\n", capture_output=True, text=True)
    assert weak.returncode == 1 and "too weak" in weak.stderr
    as_json = json.loads(subprocess.run([*cli, "new", "--json"], capture_output=True, text=True,
                                        check=True).stdout)
    assert as_json["sha256"] == hash_token(as_json["token"]) and as_json["name"] == "trainer"

    # The lines pasted into an agent's and a trainer's config, as the comments say.
    agent_config = write_config(tmp_path / "agent.toml", agent_line,
                                export_text("train", export_root, ["alice"]))
    with AgentProcess(agent_config) as agent:
        trainer_config = write_config(tmp_path / "trainer.toml", trainer_line,
                                      export_text("train", export_root, ["alice"], agent.url))
        listed = subprocess.run([sys.executable, "-m", "fluxon_video", "ls", "train:bucket/videos",
                                 "--config", str(trainer_config), "--json"],
                                capture_output=True, text=True, check=True).stdout
        assert VIDEO in [json.loads(line)["relpath"] for line in listed.splitlines()]
        assert stat(agent, token)[0] == 200


# ---- item 9c: a config others can read ----

def test_a_config_others_can_read_warns_and_a_0600_one_does_not(tmp_path, export_root, caplog):
    exports = export_text("train", export_root, ["alice"])
    plain = write_config(tmp_path / "plain.toml", f'alice = "{ALICE}"', exports, mode=0o644)
    with caplog.at_level(logging.WARNING, logger="fluxon_video.config"), \
            pytest.warns(UserWarning, match=f"{re.escape(str(plain))} holds secrets") as warned:
        load_config(plain)
    logged = [r.getMessage() for r in caplog.records if r.name == "fluxon_video.config"]
    assert len(logged) == 1 and len(warned) == 1
    for message in (logged[0], str(warned[0].message)):
        assert "[identities] alice" in message and "mode 0644" in message
        assert "chmod 600" in message and ALICE not in message
    assert warned[0].filename == __file__  # points at the caller of load_config
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fluxon_video.config"), \
            warnings.catch_warnings():
        warnings.simplefilter("error")
        plain.chmod(0o600)
        load_config(plain)
        # Hashes alone are no secret a reader could send: no warning at 0644 either.
        load_config(write_config(tmp_path / "hashed.toml", f'alice = "{hash_token(ALICE)}"',
                                 exports, mode=0o644))
    assert [r for r in caplog.records if r.name == "fluxon_video.config"] == []
    # The agent says so in its log at start.
    plain.chmod(0o640)
    with AgentProcess(plain) as agent:
        assert stat(agent, ALICE)[0] == 200
    assert "mode 0640" in agent.log.read_text()


# ---- item 10: two tokens per identity (rotation) ----

def test_two_tokens_per_identity_both_work_and_removing_one_revokes_it(tmp_path, export_root):
    new, old = secrets.token_urlsafe(32), ALICE
    exports = export_text("train", export_root, ["alice"])
    path = write_config(tmp_path / "agent.toml", f'alice = ["{new}", "{hash_token(old)}"]',
                        exports)
    # A trainer sending either: the first plain entry is the one a client sends.
    assert load_config(path).identity("alice").token == new
    assert load_config(path).identities["alice"] == (new, hash_token(old))
    with AgentProcess(path) as agent:
        assert stat(agent, new)[0] == 200 and stat(agent, old)[0] == 200
        agent.stop()
        write_config(path, f'alice = ["{new}"]', exports)
        agent.start()
        assert stat(agent, new)[0] == 200
        assert stat(agent, old)[0] == 401  # revoked
    # A str stays a str: config.identities keeps its public shape.
    assert FluxonFsConfig.build([], {"bob": BOB}).identities == {"bob": BOB}
    with pytest.raises(errors.FluxonFsConfigError, match=r"two identities share one token"):
        FluxonFsConfig.build([], {"alice": [new, hash_token(BOB)], "bob": BOB})


# ---- item 8: an unknown export tells an unauthenticated client nothing ----

def test_an_unknown_export_names_no_other_export(tmp_path, export_root):
    exports = "".join(export_text(name, export_root, allow) for name, allow in
                      (("train", ["alice"]), ("shared", ["alice", "bob"]),
                       ("payroll-videos", ["bob"])))
    path = write_config(tmp_path / "agent.toml", f'alice = "{ALICE}"\nbob = "{BOB}"', exports)
    secret_names = ("train", "shared", "payroll-videos")
    with AgentProcess(path) as agent:
        for token in (None, secrets.token_urlsafe(32)):
            status, body = stat(agent, token, export="zzz")
            assert status == 401, body
            assert not any(name in body for name in secret_names), body
        # Authenticated: a 404 naming the asked export and only what alice may read.
        status, body = stat(agent, ALICE, export="zzz")
        assert status == 404 and "'zzz'" in body and "payroll-videos" not in body, body
        assert "shared" in body and "train" in body
        # A bad token on a real export is the same 401 as on an unknown one.
        assert stat(agent, "x" * 43, export="train")[0] == 401
    # The in-process route shares ExportStorage: the same order of checks.
    storage = ExportStorage(load_config(path))
    with pytest.raises(errors.FluxonFsPermissionError) as info:
        storage.stat("zzz", VIDEO, None)
    assert not any(name in str(info.value) for name in secret_names)
    # The trainer's own config is its business: there the error lists what it configured.
    with fv.FluxonFsPatcher(load_config(path), identity="alice") as patcher:
        with pytest.raises(errors.FluxonFsNotFoundError, match="configured: payroll-videos"):
            patcher.file_version("zzz", VIDEO)


# ---- item 15: bearer tokens over http:// off loopback ----

LOOPBACK_OR_TLS = ["http://127.0.0.1:8765", "http://127.8.9.10:1", "http://[::1]:8765",
                   "http://localhost:8765", "http://LOCALHOST:8765",
                   "http://[::ffff:127.0.0.1]:8765", "https://storage-01:8765",
                   "https://10.255.255.1:8765"]


@pytest.mark.parametrize("url", ["http://10.255.255.1:8765", "http://storage-01:8765",
                                 "http://[2001:db8::1]:8765",
                                 ["https://storage-01:8765", "http://storage-02:8765"]])
def test_http_to_an_agent_off_loopback_is_refused_unless_allowed(tmp_path, url):
    bad = url if isinstance(url, str) else url[1]
    export = FluxonFsExport("train", "/nowhere", agent_url=url, allow=["alice"])
    with pytest.raises(errors.FluxonFsConfigError,
                       match=rf"exports\[0\] \(train\): agent_url '{re.escape(bad)}' would send "
                             r"bearer tokens in clear text.*allow_insecure_http = true"):
        fv.FluxonFsPatcher(exports=[export], identities={"alice": ALICE}, identity="alice")
    allowed = ClientSettings(allow_insecure_http=True)
    fv.FluxonFsPatcher(exports=[export], identities={"alice": ALICE}, client=allowed,
                       identity="alice").close()
    # From a file: the error names it, and the [client] key turns the check off.
    path = tmp_path / "trainer.toml"
    path.write_text(f'[identities]\nalice = "{ALICE}"\n\n[[exports]]\nname = "train"\n'
                    f'root = "/nowhere"\nagent_url = {json.dumps(url)}\nallow = ["alice"]\n')
    path.chmod(0o600)
    with pytest.raises(errors.FluxonFsConfigError, match=rf"{path}: exports\[0\] \(train\)"):
        load_config(path)
    path.write_text("[client]\nallow_insecure_http = true\n\n" + path.read_text())
    assert load_config(path).client.allow_insecure_http is True
    # Loopback over http, and https anywhere, need no setting.
    for ok in LOOPBACK_OR_TLS:
        FluxonFsConfig.build([FluxonFsExport("train", "/nowhere", agent_url=ok, allow=["alice"])],
                             {"alice": ALICE})
