"""Object-store faults reported for what they are (issue 35, items 2, 3, 4, 13).

Against a real S3-compatible server (moto's, the session's ``s3_server``), a
relay in front of it that answers chosen requests itself (503 SlowDown, 500),
a loopback port nobody listens on (a dead endpoint), one that accepts and
never answers (a timeout), and the real agent process. Small store timeouts
and retries keep each fault to a fraction of a second.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

import fluxon_video as fv
from fluxon_video import errors
from fluxon_video.fs.config import ClientSettings, FluxonFsConfig, FluxonFsExport
from fluxon_video.fs.tokens import new_token
from fluxon_video.testing import AgentProcess, ServerStartError, free_port
from tests.helpers import IDENTITIES, make_patcher
from tests.store_faults import FaultyRelay

BUCKET = "fault-videos"
ROOT = f"s3://{BUCKET}/train"
VIDEO = "clips/vp9.webm"
FAST = {"store_timeout_s": 2.0, "store_retries": 1}


@pytest.fixture(scope="module")
def store(s3_server, media):
    s3_server.upload(BUCKET, {f"train/{VIDEO}": media.path("vp9.webm")})
    return s3_server


@pytest.fixture
def relay(store):
    with FaultyRelay(store.url) as relay:
        yield relay


def dead_endpoint() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nobody listens there


def in_process(store, root=ROOT, **store_options):
    """make_patcher's exports served in this process, on the test store."""
    return make_patcher(None, root, store={**store.store_options(), **store_options}, **FAST)


def toml_value(value: object) -> str:
    return json.dumps(value)  # strings and booleans: TOML spells them as JSON does


def agent_config(path: Path, exports: dict[str, tuple[str, dict]],
                 identities: dict[str, str] = IDENTITIES) -> Path:
    """An agent config of ``{name: (root, store options)}``, each allowing alice."""
    lines = ["[identities]", *(f'{n} = "{t}"' for n, t in identities.items()), ""]
    for name, (root, options) in exports.items():
        table = ", ".join(f"{k} = {toml_value(v)}" for k, v in options.items())
        lines += ["[[exports]]", f'name = "{name}"', f'root = "{root}"', 'allow = ["alice"]',
                  f"store = {{ {table} }}", f"store_timeout_s = {FAST['store_timeout_s']}",
                  f"store_retries = {FAST['store_retries']}", ""]
    path.write_text("\n".join(lines))
    path.chmod(0o600)
    return path


def through(agent: AgentProcess, *exports: str, window_s: float = 0.0) -> fv.FluxonFsPatcher:
    """A trainer's patcher reaching ``exports`` through the agent (no retry window
    unless given: the first answer is the error)."""
    return fv.FluxonFsPatcher(
        exports=[FluxonFsExport(name, ROOT, agent_url=agent.url, allow=["alice"])
                 for name in exports],
        identities=IDENTITIES, identity="alice",
        client=ClientSettings(agent_retry_window_s=window_s))


# ---- the mapping, in-process: by type and status, never by the word "timeout" ----

def test_a_missing_bucket_is_not_found_and_names_the_bucket(store):
    with in_process(store, "s3://no-such-bucket/train") as patcher:
        with pytest.raises(errors.FluxonFsNotFoundError, match="bucket 'no-such-bucket'") as stat:
            patcher.file_version("train", VIDEO)
        with pytest.raises(errors.FluxonFsNotFoundError,
                           match=r"^train: bucket 'no-such-bucket' does not exist "
                                 r"\(the store answered 404 NoSuchBucket\)$"):
            list(patcher.list_files("train"))
    assert not isinstance(stat.value, errors.FluxonFsTimeoutError)
    assert "did not answer" not in str(stat.value) and store.url not in str(stat.value)


def test_a_dead_endpoint_is_an_io_error_saying_so_at_once(store):
    started = time.monotonic()
    with in_process(store, endpoint=dead_endpoint()) as patcher, \
            pytest.raises(errors.FluxonFsIOError) as failed:
        patcher.file_version("train", VIDEO)
    assert type(failed.value) is errors.FluxonFsIOError  # not a timeout
    assert str(failed.value) == (f"train:{VIDEO}: cannot reach the store for bucket "
                                 f"'{BUCKET}' (connection refused, after 1 retry)")
    assert time.monotonic() - started < 5


def test_a_store_that_accepts_and_never_answers_is_a_timeout(store):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"  # accepts, never answers
    with silent, make_patcher(None, ROOT, store={**store.store_options(), "endpoint": endpoint},
                              store_timeout_s=0.3, store_retries=0) as patcher, \
            pytest.raises(errors.FluxonFsTimeoutError,
                          match=rf"^train:{VIDEO}: the store did not answer \(stat\) for "
                                rf"bucket '{BUCKET}' within store_timeout_s = 0.3 s$"):
        patcher.file_version("train", VIDEO)


@pytest.mark.parametrize("call", ["stat", "read"])
def test_throttling_beyond_the_retries_is_an_overload_to_retry_later(store, relay, call):
    with in_process(store, endpoint=relay.url) as patcher:
        if call == "read":
            patcher.file_version("train", VIDEO)  # the read's stat: cached for the TTL
        relay.fail(503, VIDEO, 10)  # the HEAD's 503 has no body; the GET's says SlowDown
        with pytest.raises(errors.FluxonFsOverloadedError) as throttled:
            if call == "stat":
                patcher.file_version("train", VIDEO)
            else:
                patcher.read_range("train", VIDEO, 0, 100)
    assert relay.refused == 2  # the request and its one retry
    code = "" if call == "stat" else " SlowDown"
    assert str(throttled.value) == (f"train:{VIDEO}: the store is throttling requests to bucket "
                                    f"'{BUCKET}' (503{code}, after 1 retry); try again later")
    assert throttled.value.retry_after_s == 2.0


def test_a_store_failing_with_a_500_is_an_io_error_naming_its_answer(store, relay):
    with in_process(store, endpoint=relay.url) as patcher:
        relay.fail(500, "list-type", 10)
        with pytest.raises(errors.FluxonFsIOError) as failed:
            list(patcher.list_files("train"))
    assert type(failed.value) is errors.FluxonFsIOError
    assert str(failed.value) == (f"train: the store failed to answer (list) for bucket "
                                 f"'{BUCKET}': 500 InternalError, after 1 retry")


def test_store_failure_fields_are_read_from_obstores_fields_only():
    """The patterns read the status line and the debug dump's fields; the words
    "timeout" and "not found" elsewhere in the text mean nothing."""
    from fluxon_video.fs.object_origin import StoreFailure

    text = ("Generic S3 error: Error performing GET http://h/b?list-type=2 in 5ms, after 2 "
            "retries, max_retries: 2, retry_timeout: 3s  - Server returned non-2xx status code: "
            "503 Service Unavailable: <Error><Code>SlowDown</Code><Message>timeout, not found"
            "</Message></Error>\n\nDebug source:\nGeneric {\n    source: RetryError(\n"
            "        RetryErrorImpl {\n            retries: 2,\n            max_retries: 2,\n"
            "            retry_timeout: 3s,\n            inner: Status {\n"
            "                status: 503,\n")
    assert StoreFailure.of(RuntimeError(text)) == StoreFailure(503, "SlowDown", None, "", 2)
    connect = ('HTTP error: error sending request\n\nDebug source:\n    retries: 1,\n'
               '    retry_timeout: 3s,\n    inner: Http(\n        HttpError {\n'
               '            kind: Connect,\n            source: ConnectError(\n'
               '                "tcp connect error",\n                Os {\n'
               '                    code: 111,\n                    kind: ConnectionRefused,\n'
               '                    message: "Connection refused",\n')
    assert StoreFailure.of(RuntimeError(connect)) == StoreFailure(
        None, "", "Connect", "connection refused", 1)
    assert StoreFailure.of(RuntimeError("the request timed out; retry_timeout: 3s")) == \
        StoreFailure(None, "", None, "", 0)


# ---- store config checked at start ----

def test_an_unknown_store_option_refuses_the_agents_start(store, tmp_path):
    options = {**store.store_options()}
    options["endpont"] = options.pop("endpoint")
    config = agent_config(tmp_path / "agent.toml", {"train": (ROOT, options)})
    with pytest.raises(ServerStartError) as refused, AgentProcess(config):
        pass  # (an agent that starts is stopped)
    assert "exports[0] (train): store option 'endpont' is not one the S3 store knows" in str(
        refused.value)


def test_an_unknown_store_option_refuses_an_in_process_patcher(store):
    with pytest.raises(errors.FluxonFsConfigError,
                       match=r"exports\[0\] \(train\): store option 'endpont' is not one"):
        in_process(store, endpont="http://127.0.0.1:1")


def test_a_missing_bucket_refuses_the_agents_start_with_the_stores_reason(store, tmp_path):
    config = agent_config(tmp_path / "agent.toml", {
        "train": (ROOT, store.store_options()),
        "typo": ("s3://no-such-bucket/train", store.store_options())})
    with pytest.raises(ServerStartError) as refused, AgentProcess(config):
        pass  # (an agent that starts is stopped)
    assert ("exports[1] (typo): the store refused at start: bucket 'no-such-bucket' does not "
            "exist (the store answered 404 NoSuchBucket)") in str(refused.value)


def test_a_store_refusing_to_list_or_failing_at_start_is_served_anyway(store, relay):
    """An identity allowed s3:GetObject alone cannot list: the probe's 403
    AccessDenied is no reason to refuse. Refused credentials are."""
    from fluxon_video.fs.storage import ExportStorage

    def probe(options: dict) -> list:
        config = FluxonFsConfig.build([FluxonFsExport("train", ROOT, allow=["alice"],
                                                      store=options, **FAST)], IDENTITIES)
        return ExportStorage(config).probe_stores(config.exports.values())

    relay.fail(403, "list-type", 1)
    (denied,) = probe({**store.store_options(), "endpoint": relay.url})
    assert denied.reason == f"the store refused access to bucket '{BUCKET}' (403 AccessDenied)"
    relay.fail(500, "list-type", 2)
    (failing,) = probe({**store.store_options(), "endpoint": relay.url})
    assert failing.reason.endswith("500 InternalError, after 1 retry")
    assert probe(store.store_options()) == []


def test_refused_credentials_are_a_permission_error_that_refuses_the_start():
    import obstore

    from fluxon_video.fs.object_origin import refusal

    text = ("The operation lacked the necessary privileges to complete for path train: Error "
            "performing GET http://h/b?list-type=2 in 2ms - Server returned non-2xx status "
            "code: 403 Forbidden: <Error><Code>InvalidAccessKeyId</Code></Error>")
    mapped = refusal(obstore.exceptions.PermissionDeniedError(text), "train", "list",
                     "bucket 'b'", 30)
    assert isinstance(mapped, errors.FluxonFsPermissionError)
    assert str(mapped) == ("train: the store refused access to bucket 'b': it does not accept "
                           "the credentials (403 InvalidAccessKeyId)")


def test_a_reload_adding_a_missing_bucket_or_an_unknown_option_is_refused(store, tmp_path):
    import asyncio

    from fluxon_video.fs.agent import STORAGE_KEY, make_app, reload_config
    from fluxon_video.fs.config import load_config

    path = agent_config(tmp_path / "agent.toml", {"train": (ROOT, store.store_options())})
    app = make_app(load_config(path), threads=1)
    serving = app[STORAGE_KEY].current
    typo = {**store.store_options(), "regoin": "us-east-1"}
    for exports in ({"train": (ROOT, store.store_options()),
                     "typo": ("s3://no-such-bucket/x", store.store_options())},
                    {"train": (ROOT, typo)}):
        agent_config(path, exports)
        assert asyncio.run(reload_config(app, path)) is False
        assert app[STORAGE_KEY].current is serving
    agent_config(path, {"train": (ROOT, store.store_options()),
                        "more": (f"s3://{BUCKET}/other", store.store_options())})
    assert asyncio.run(reload_config(app, path)) is True


# ---- through the agent: the kind passed on, one log line, no traceback ----

@pytest.fixture(scope="module")
def served(store, tmp_path_factory):
    """An agent serving "train" through a faulty relay and "nowhere" on a dead
    endpoint (it starts anyway: the store may come back), and a scratch bucket
    deleted once it serves."""
    store.upload("scratch-videos", {"train/a.bin": b"a" * 100})
    with FaultyRelay(store.url) as relay:
        path = tmp_path_factory.mktemp("served") / "agent.toml"
        config = agent_config(path, {
            "train": (ROOT, {**store.store_options(), "endpoint": relay.url}),
            "nowhere": (ROOT, {**store.store_options(), "endpoint": dead_endpoint()}),
            "scratch": ("s3://scratch-videos/train", store.store_options())})
        with AgentProcess(config) as agent:
            client = store.client()
            client.delete_object(Bucket="scratch-videos", Key="train/a.bin")
            client.delete_bucket(Bucket="scratch-videos")
            yield agent, relay


def test_an_unreachable_store_lets_the_agent_start_with_an_error_logged(served):
    agent, _ = served
    log = agent.log.read_text()
    assert ("export 'nowhere' (s3://fault-videos/train): its store did not answer as it "
            "should at start: cannot reach the store for bucket 'fault-videos' (connection "
            "refused, after 1 retry); serving it anyway") in log


def test_the_agent_answers_an_unreachable_store_502_io_and_logs_one_line(served):
    agent, _ = served
    with through(agent, "nowhere") as patcher:
        for _ in range(3):
            with pytest.raises(errors.FluxonFsIOError) as failed:
                patcher.file_version("nowhere", VIDEO)
    assert type(failed.value) is errors.FluxonFsIOError
    assert str(failed.value) == (f"nowhere:{VIDEO}: cannot reach the store for bucket "
                                 f"'{BUCKET}' (connection refused, after 1 retry) (the agent "
                                 "answered 502)")
    log = agent.log.read_text()
    assert log.count("export 'nowhere': answering 502 (io) to /v1/stat") == 1
    assert "internal error" not in log and "Traceback" not in log


def test_the_agent_answers_throttling_503_and_a_client_retries_it_later(served):
    agent, relay = served
    with through(agent, "train") as patcher:
        relay.fail(503, VIDEO, 2)  # the agent's request and its retry
        with pytest.raises(errors.FluxonFsOverloadedError) as throttled:
            patcher.file_version("train", VIDEO)
    assert throttled.value.retry_after_s == 2.0
    assert "the store is throttling requests to bucket 'fault-videos' (503, after 1 retry)" in \
        str(throttled.value)
    with through(agent, "train", window_s=10) as patcher:
        relay.fail(503, VIDEO, 2)
        started = time.monotonic()
        assert patcher.file_version("train", VIDEO).size > 0  # waited Retry-After, then served
        assert 1.5 < time.monotonic() - started < 8
    assert "Traceback" not in agent.log.read_text()


def test_the_agent_answers_a_bucket_gone_404_and_no_client_waits_for_it(served):
    agent, _ = served
    with through(agent, "scratch", window_s=10) as patcher:
        started = time.monotonic()
        with pytest.raises(errors.FluxonFsNotFoundError,
                           match=r"^scratch: bucket 'scratch-videos' does not exist \(the store "
                                 r"answered 404 NoSuchBucket\) \(the agent answered 404\)$"):
            list(patcher.list_files("scratch"))
        with pytest.raises(errors.FluxonFsNotFoundError,
                           match="^scratch:a.bin: no such object in bucket 'scratch-videos'"):
            patcher.file_version("scratch", "a.bin")
        assert time.monotonic() - started < 3  # an answer: not waited for


# ---- S3 folder markers ----

def test_folder_markers_are_not_listed_and_everything_listed_warms(store, media):
    store.upload(BUCKET, {"train/clips/": b"", "train/empty/": b"", "train/": b"",
                          "train/zero.bin": b""})
    with in_process(store) as patcher:
        everything = [(e.relpath, e.size) for e in patcher.list_files("train")]
        assert ("clips", 0) not in everything and ("empty", 0) not in everything
        assert ("", 0) not in everything and ("zero.bin", 0) in everything
        assert [e.relpath for e in patcher.list_files("train", "clips/")] == [VIDEO]
        assert [e.relpath for e in patcher.list_files("train", "clips", recursive=False)] == [
            VIDEO]
        top = [(e.relpath, e.is_dir) for e in patcher.list_files("train", recursive=False)]
        assert top == [("clips", True), ("empty", True), ("zero.bin", False)]
        paged = [e.relpath for e in patcher.client.files.list_files(
            patcher.identity, "train", page_size=1)]
        assert paged == [VIDEO, "zero.bin"]
        for relpath, _ in everything:  # what `warm --glob` does with each listed file
            patcher.warm_file("train", relpath)


# ---- a refused token names the identity and where it is configured ----

def test_a_refused_token_names_the_identity_and_its_config_key(served, tmp_path):
    agent, _ = served
    wrong = new_token()
    trainer = tmp_path / "trainer.toml"
    trainer.write_text(f'[identities]\nalice = "{wrong}"\n\n[[exports]]\nname = "train"\n'
                       f'root = "{ROOT}"\nagent_url = "{agent.url}"\nallow = ["alice"]\n')
    trainer.chmod(0o600)
    refused = (f"agent {agent.url} refused identity 'alice''s token ([identities] alice in "
               f"{trainer}): no identity has this bearer token (the agent answered 401)")
    with fv.FluxonFsPatcher.from_config_file(trainer, "alice") as patcher:
        with pytest.raises(errors.FluxonFsAuthenticationError) as listing:
            list(patcher.list_files("train"))
        with pytest.raises(errors.FluxonFsAuthenticationError) as stat:
            patcher.file_version("train", VIDEO)
    assert str(listing.value) == f"train: {refused}"
    assert str(stat.value) == f"train:{VIDEO}: {refused}"
    log = agent.log.read_text()  # no --access-log
    assert "refused a token for export 'train' from 127.0.0.1 (no identity has it" in log
    assert wrong not in log


@pytest.mark.parametrize("origin", ["bucket", "directory"])
def test_no_message_names_an_export_with_an_empty_relpath(store, export_root, origin):
    root, options = (ROOT, {"store": store.store_options(), **FAST}) if origin == "bucket" \
        else (str(export_root), {})
    config = FluxonFsConfig.build([FluxonFsExport("train", root, allow=["alice"], **options)],
                                  IDENTITIES)
    with fv.FluxonFsPatcher(config=config, identity="alice") as patcher:
        with pytest.raises(errors.FluxonFsBadRequestError) as bad:
            list(patcher.list_files("train", pattern="x" * 2000))
        with patcher.using_identity("bob"), \
                pytest.raises(errors.FluxonFsPermissionError) as refused:
            list(patcher.list_files("train"))
    assert str(bad.value) == "train: pattern is 2000 characters, at most 1024"
    assert str(refused.value) == "train: identity 'bob' is not allowed to read this export"


def test_a_process_forked_after_an_in_process_store_was_used_is_refused_not_hung(store):
    """obstore hangs in a child forked after its parent made a request: the child's
    first request is refused with a message saying what to do instead."""
    import multiprocessing

    with in_process(store) as patcher:
        patcher.file_version("train", VIDEO)  # the parent's request
        context = multiprocessing.get_context("fork")
        with context.Pool(1) as pool:
            result = pool.apply_async(_version_in_child, (patcher,))
            message = result.get(timeout=60)  # the old code never returned
    assert "forked after its parent used an object store" in message
    assert "spawn" in message and "agent" in message


def _version_in_child(patcher: fv.FluxonFsPatcher) -> str:
    try:
        patcher.file_version("train", VIDEO)
    except errors.FluxonFsConfigError as exc:
        return str(exc)
    return "no error"

