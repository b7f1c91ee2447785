"""An agent serves nothing outside its export roots (issue 34, items 3 and 13).

Real files, real symlinks and real renames: a directory of the path swapped
for a symlink leading out, over and over while stats, reads and listings run
(in-process through ExportStorage, and through a real agent); symlinks that
stay inside the root still served, every way out refused; and the listing's
bounds on what a client's pattern and prefix may cost.
"""

from __future__ import annotations

import fnmatch
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

import pytest

from fluxon_video import errors
from fluxon_video.fs import listing
from fluxon_video.fs.config import load_config
from fluxon_video.fs.origin import FileStat
from fluxon_video.fs.paths import MAX_DEPTH, MAX_SYMLINKS
from fluxon_video.fs.storage import ExportStorage
from fluxon_video.testing import AgentProcess
from tests.helpers import IDENTITIES, agent_config_text, http_get

TOKEN = IDENTITIES["alice"]
INSIDE = b"INSIDE!!" * 512  # what the export holds
OUTSIDE = b"OUTSIDE!" * 512  # the same size, so only the bytes tell them apart
RACE_SECONDS = 3.0
CLIP = "sub/clip.mp4"


def write_config(directory: Path, root: Path) -> Path:
    path = directory / "agent.toml"
    path.write_text(agent_config_text(root))
    path.chmod(0o600)  # it holds tokens
    return path


def storage_of(directory: Path, root: Path) -> ExportStorage:
    return ExportStorage(load_config(write_config(directory, root)))


def fds_under(path: Path) -> list[str]:
    """What this process's descriptors open under path (other threads' are not counted)."""
    path, found = os.path.realpath(path), []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listdir's own descriptor, say)
            continue
        if target.startswith(f"{path}/") or target == str(path):
            found.append(target)
    return found


# ---- the race: a directory of the path swapped for a symlink out of the root ----

def race_tree(base: Path) -> tuple[Path, Path]:
    """(root, outside): root/sub/clip.mp4 holds INSIDE; outside/sub/clip.mp4 (the
    same relpath from outside/) holds OUTSIDE, with a name only it has."""
    root, outside = base / "root", base / "outside"
    for directory in (root / "sub", outside / "sub"):
        directory.mkdir(parents=True)
    (root / CLIP).write_bytes(INSIDE)
    (outside / CLIP).write_bytes(OUTSIDE)
    (outside / "sub" / "outside_only.mp4").write_bytes(OUTSIDE)
    return root, outside


@contextmanager
def swapping(root: Path, outside: Path) -> Iterator[list[int]]:
    """A thread that keeps renaming root/sub between the real directory and a
    symlink to outside/sub (each name change one atomic rename) until the block
    ends, then leaves the real directory in place. Yields [swaps done]."""
    sub, real, link = root / "sub", root / "sub.real", root / "sub.link"
    link.symlink_to(outside / "sub")
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        while not stop.is_set():
            sub.rename(real)
            link.rename(sub)
            sub.rename(link)
            real.rename(sub)
            swaps[0] += 1

    thread = threading.Thread(target=swap, name="symlink-swapper")
    thread.start()
    try:
        yield swaps
    finally:
        stop.set()
        thread.join()
        link.unlink()


def race_reads(storage: ExportStorage, outside: Path, seconds: float) -> tuple[int, int]:
    """(reads that served INSIDE, stats or reads that reached the file outside) of
    stat + read_chunk and stat_head of CLIP in a loop for ``seconds``. Other
    refusals (the name missing for an instant, a path leading out) are expected."""
    served = leaked = 0
    outside_inode = (outside / CLIP).stat().st_ino
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            head_version, head = storage.stat_head("train", CLIP, len(INSIDE), TOKEN)
            leaked += head_version.inode == outside_inode or head == OUTSIDE
            served += head == INSIDE
        except errors.FluxonFsError:
            pass
        try:
            version = storage.stat("train", CLIP, TOKEN)
            if version.inode == outside_inode:  # its stat is a leak already
                leaked += 1
                continue
            data = storage.read_chunk("train", CLIP, 0, len(INSIDE), version, TOKEN)
        except errors.FluxonFsError:
            continue
        leaked += data == OUTSIDE
        served += data == INSIDE
    return served, leaked


def race_listings(storage: ExportStorage, seconds: float) -> tuple[int, int]:
    """(listings that named CLIP, listings that named anything outside) of the
    whole export and of prefixes through sub, in a loop for ``seconds``."""
    good = leaked = 0
    deadline = time.monotonic() + seconds
    queries = [("", True), ("sub", True), ("sub/", False), ("sub/c", True), ("sub/o", True)]
    while time.monotonic() < deadline:
        for prefix, recursive in queries:
            try:
                entries, _ = storage.list("train", prefix, recursive, None, None, 1000, TOKEN)
            except errors.FluxonFsError:
                continue
            names = [entry.relpath for entry in entries]
            leaked += any("outside_only" in name for name in names)
            good += CLIP in names
    return good, leaked


def test_a_swapped_directory_never_serves_a_file_outside_the_root(tmp_path):
    root, outside = race_tree(tmp_path)
    storage = storage_of(tmp_path, root)
    with swapping(root, outside) as swaps:
        served, leaked = race_reads(storage, outside, RACE_SECONDS)
    assert leaked == 0, f"{leaked} stats or reads reached the file outside the root"
    assert swaps[0] > 100 and served > 0, (swaps, served)  # the race did run, both ways
    assert fds_under(tmp_path) == []  # every descriptor opened was closed, on every path
    assert storage.read_chunk("train", CLIP, 0, 8, storage.stat("train", CLIP, TOKEN),
                              TOKEN) == INSIDE[:8]


def test_a_listing_under_the_swap_names_nothing_outside(tmp_path):
    root, outside = race_tree(tmp_path)
    storage = storage_of(tmp_path, root)
    with swapping(root, outside) as swaps:
        good, leaked = race_listings(storage, RACE_SECONDS)
    assert leaked == 0, f"{leaked} listings named a file outside the root"
    assert swaps[0] > 100 and good > 0, (swaps, good)
    assert fds_under(tmp_path) == []


def test_the_agent_under_the_swap_serves_nothing_outside(tmp_path):
    root, outside = race_tree(tmp_path)
    with AgentProcess(write_config(tmp_path, root)) as agent, swapping(root, outside) as swaps:
        served = leaked = 0
        outside_inode = (outside / CLIP).stat().st_ino
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            query = {"export": "train", "path": CLIP}
            status, body = http_get(f"{agent.url}/v1/stat?{urlencode(query)}")
            if status != 200:
                assert status in (403, 404), body
                continue
            version = {k: v for k, v in json.loads(body).items() if k in FileStat.INTS}
            leaked += version["inode"] == outside_inode
            query.update(version, offset=0, length=len(INSIDE))
            status, data = http_get(f"{agent.url}/v1/read?{urlencode(query)}")
            leaked += status == 200 and data == OUTSIDE
            served += status == 200 and data == INSIDE
            status, body = http_get(f"{agent.url}/v1/list?" + urlencode({"export": "train"}))
            leaked += b"outside_only" in body
            status, body = http_get(f"{agent.url}/v1/stat?" + urlencode(
                {"export": "train", "path": CLIP, "head": len(INSIDE)}))
            if status == 200:
                line, _, head = body.partition(b"\n")
                leaked += json.loads(line)["inode"] == outside_inode or head == OUTSIDE
                served += head == INSIDE
    assert leaked == 0, f"{leaked} stats, reads or listings reached outside the root"
    assert swaps[0] > 100 and served > 0, (swaps, served)


# ---- symlinks: inside the root served, every way out refused ----

@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, Path]:
    """(root, the configured root: a symlink to it). Links of every kind inside."""
    base = tmp_path_factory.mktemp("confine")
    root, outside = base / "root", base / "outside"
    (root / "videos" / "deep").mkdir(parents=True)
    (outside / "videos").mkdir(parents=True)
    (root / "videos" / "clip.mp4").write_bytes(INSIDE)
    (outside / "secret.mp4").write_bytes(OUTSIDE)
    (outside / "videos" / "clip.mp4").write_bytes(OUTSIDE)
    alias = base / "alias"  # the export's root as configured: a symlink to root
    alias.symlink_to(root)
    links = {
        # inside the root: served
        "videos/rel.mp4": "clip.mp4",
        "videos/abs_real.mp4": f"{root}/videos/clip.mp4",
        "videos/abs_configured.mp4": f"{alias}/videos/clip.mp4",
        "videos/deep/up.mp4": "../clip.mp4",
        "videos/deep/up_and_down.mp4": "../../videos/./deep/../clip.mp4",
        "dir_rel": "videos",
        "dir_abs": f"{root}/videos",
        "videos/deep/dir_up": "..",
        "videos/chain_0.mp4": "clip.mp4",
        # out of the root: refused
        "videos/escape_abs.mp4": f"{outside}/secret.mp4",
        "videos/escape_rel.mp4": "../../outside/secret.mp4",
        "videos/escape_dir": "../..",
        "videos/escape_abs_dotdot.mp4": f"{root}/../outside/secret.mp4",
        "videos/escape_root_dotdot": f"{root}/..",
        "videos/escape_slash": "/",
        # loops
        "videos/loop_a.mp4": "loop_b.mp4",
        "videos/loop_b.mp4": "loop_a.mp4",
        "videos/self.mp4": "self.mp4",
    }
    for n in range(1, MAX_SYMLINKS + 1):  # chain_N: N+1 links to reach clip.mp4
        links[f"videos/chain_{n}.mp4"] = f"chain_{n - 1}.mp4"
    for name, target in links.items():
        (root / name).symlink_to(target)
    deep = root.joinpath(*["d"] * MAX_DEPTH)  # as deep as a lookup may go
    deep.mkdir(parents=True)
    (deep / "clip.mp4").write_bytes(INSIDE)
    (deep / "d").mkdir()
    (deep / "d" / "clip.mp4").write_bytes(INSIDE)
    return root, alias


@pytest.fixture(scope="module")
def storage(tmp_path_factory, tree) -> ExportStorage:
    return storage_of(tmp_path_factory.mktemp("confine-config"), tree[1])


@pytest.fixture(scope="module")
def agent(tmp_path_factory, tree) -> Iterator[AgentProcess]:
    with AgentProcess(write_config(tmp_path_factory.mktemp("confine-agent"), tree[1])) as agent:
        yield agent


def read_all(storage: ExportStorage, relpath: str) -> bytes:
    version = storage.stat("train", relpath, TOKEN)
    return storage.read_chunk("train", relpath, 0, version.size, version, TOKEN)


DEEP = "d/" * MAX_DEPTH


@pytest.mark.parametrize("relpath", [
    "videos/clip.mp4", "videos/rel.mp4", "videos/abs_real.mp4", "videos/abs_configured.mp4",
    "videos/deep/up.mp4", "videos/deep/up_and_down.mp4", "dir_rel/clip.mp4",
    "dir_abs/clip.mp4", "dir_rel/deep/up.mp4", "videos/deep/dir_up/clip.mp4",
    "videos/deep/dir_up/deep/dir_up/rel.mp4", f"videos/chain_{MAX_SYMLINKS - 1}.mp4",
    DEEP + "clip.mp4"])
def test_symlinks_inside_the_root_are_served(storage, agent, relpath):
    assert read_all(storage, relpath) == INSIDE
    status, _ = http_get(f"{agent.url}/v1/stat?" + urlencode({"export": "train",
                                                              "path": relpath}))
    assert status == 200


@pytest.mark.parametrize("relpath", [
    "videos/escape_abs.mp4", "videos/escape_rel.mp4", "videos/escape_dir/outside/secret.mp4",
    "videos/escape_abs_dotdot.mp4", "videos/escape_root_dotdot/outside/secret.mp4",
    "videos/escape_slash/etc/passwd", "dir_rel/escape_dir/outside/secret.mp4",
    "videos/deep/dir_up/escape_dir/outside/videos/clip.mp4",
    "videos/deep/dir_up/deep/dir_up/escape_rel.mp4"])
def test_symlinks_leading_out_are_refused(storage, agent, tree, relpath):
    for call in (lambda: storage.stat("train", relpath, TOKEN),
                 lambda: storage.stat_head("train", relpath, 8, TOKEN),
                 lambda: storage.read_chunk("train", relpath, 0, 8, FileStat(4096, 0), TOKEN)):
        with pytest.raises(errors.FluxonFsPermissionError,
                           match="resolves outside the export root") as info:
            call()
        assert str(tree[0].parent) not in str(info.value)
    status, body = http_get(f"{agent.url}/v1/stat?" + urlencode({"export": "train",
                                                                "path": relpath}))
    assert status == 403 and str(tree[0].parent).encode() not in body, body


@pytest.mark.parametrize("relpath", ["videos/loop_a.mp4", "videos/self.mp4",
                                     f"videos/chain_{MAX_SYMLINKS}.mp4"])
def test_symlink_loops_and_over_long_chains_are_not_found(storage, agent, relpath):
    """More than MAX_SYMLINKS links in one lookup is what a loop is: ELOOP, a 404."""
    with pytest.raises(errors.FluxonFsNotFoundError,
                       match=r"cannot be read \(Too many levels of symbolic links\)"):
        storage.stat("train", relpath, TOKEN)
    with pytest.raises(errors.FluxonFsNotFoundError, match="Too many levels"):
        storage.read_chunk("train", relpath, 0, 8, FileStat(4096, 0), TOKEN)
    status, _ = http_get(f"{agent.url}/v1/stat?" + urlencode({"export": "train",
                                                              "path": relpath}))
    assert status == 404


def test_a_path_deeper_than_a_lookup_may_go_is_refused(storage):
    """MAX_DEPTH directories are served; one more is a name too long (400)."""
    assert read_all(storage, DEEP + "clip.mp4") == INSIDE
    with pytest.raises(errors.FluxonFsBadRequestError, match="File name too long"):
        storage.stat("train", DEEP + "d/clip.mp4", TOKEN)


def test_missing_and_non_regular_files_keep_their_answers(storage, tree):
    with pytest.raises(errors.FluxonFsNotFoundError, match="no such file"):
        storage.stat("train", "videos/nope.mp4", TOKEN)
    with pytest.raises(errors.FluxonFsNotFoundError, match="no such file"):
        storage.stat("train", "videos/clip.mp4/below", TOKEN)  # a file used as a directory
    with pytest.raises(errors.FluxonFsNotFoundError, match="no such file"):
        storage.stat_head("train", "videos/nope.mp4", 8, TOKEN)
    with pytest.raises(errors.FluxonFsFileChangedError, match="the file is gone"):
        storage.read_chunk("train", "videos/nope.mp4", 0, 8, FileStat(8, 0), TOKEN)
    for relpath in ("videos/deep", "dir_rel", "videos/deep/dir_up"):  # directories, linked or not
        with pytest.raises(errors.FluxonFsNotFoundError, match="not a regular file"):
            storage.stat("train", relpath, TOKEN)
        with pytest.raises(errors.FluxonFsNotFoundError, match="not a regular file"):
            storage.stat_head("train", relpath, 8, TOKEN)


def test_no_descriptor_outlives_a_call(storage, tree):
    for relpath in ("videos/deep/dir_up/deep/dir_up/rel.mp4", "videos/escape_dir/x",
                    "videos/loop_a.mp4", DEEP + "d/clip.mp4", "videos/nope.mp4"):
        for _ in range(3):
            try:
                read_all(storage, relpath)
            except errors.FluxonFsError:
                pass
    storage.list("train", "", True, None, None, 3, TOKEN)  # a page that stops mid-walk
    assert fds_under(tree[0].parent) == []


def test_a_root_replaced_is_served_at_once(tmp_path):
    """The root is opened for each lookup: a new tree moved over it is served next."""
    root = tmp_path / "root"
    (root / "videos").mkdir(parents=True)
    (root / "videos" / "clip.mp4").write_bytes(INSIDE)
    storage = storage_of(tmp_path, root)
    assert read_all(storage, "videos/clip.mp4") == INSIDE
    new = tmp_path / "new"
    (new / "videos").mkdir(parents=True)
    (new / "videos" / "clip.mp4").write_bytes(OUTSIDE)
    root.rename(tmp_path / "old")
    new.rename(root)
    assert read_all(storage, "videos/clip.mp4") == OUTSIDE


# ---- listing ----

def test_listing_follows_symlinks_only_to_files_beneath_the_root(storage):
    entries, _ = storage.list("train", "", True, None, None, 10_000, TOKEN)
    names = {entry.relpath for entry in entries}
    assert {"videos/clip.mp4", "videos/rel.mp4", "videos/abs_real.mp4",
            "videos/abs_configured.mp4", "videos/deep/up.mp4", "videos/chain_0.mp4",
            DEEP + "clip.mp4"} <= names
    assert not {name for name in names if "escape" in name or "loop" in name or "self" in name}
    assert f"videos/chain_{MAX_SYMLINKS}.mp4" not in names  # one link too many
    # Symlinked directories are not followed, and nothing deeper than a stat serves.
    assert not {name for name in names if name.startswith(("dir_", "videos/deep/dir_up/"))}
    assert DEEP + "d/clip.mp4" not in names
    sizes = {entry.relpath: entry.size for entry in entries}
    assert sizes["videos/abs_configured.mp4"] == len(INSIDE)  # the target's size


def test_a_prefix_through_a_symlinked_directory_is_not_followed(storage):
    for prefix in ("dir_rel/clip", "videos/escape_dir/outside", "videos/deep/dir_up/clip"):
        with pytest.raises(errors.FluxonFsNotFoundError, match="no such directory"):
            storage.list("train", prefix, True, None, None, 100, TOKEN)
    # Naming the link itself is a name prefix: the link, which is not listed.
    assert storage.list("train", "dir_rel/", True, None, None, 100, TOKEN) == ([], None)
    # A prefix naming a symlinked file lists it; a missing directory lists nothing.
    assert [e.relpath for e in storage.list("train", "videos/rel", True, None, None, 100,
                                            TOKEN)[0]] == ["videos/rel.mp4"]
    assert storage.list("train", "nope/x", True, None, None, 100, TOKEN) == ([], None)


def test_a_pattern_or_prefix_too_long_is_refused(storage, agent):
    longest = "*" * (listing.MAX_PATTERN_CHARS - len("clip.mp4")) + "clip.mp4"
    assert storage.list("train", "videos/", False, longest, None, 100, TOKEN)[0]
    with pytest.raises(errors.FluxonFsBadRequestError, match="pattern is 1025 characters"):
        storage.list("train", "", True, "*" * 1025, None, 100, TOKEN)
    with pytest.raises(errors.FluxonFsBadRequestError, match="prefix is"):
        storage.list("train", "a/" * listing.MAX_PREFIX_CHARS, True, None, None, 100, TOKEN)
    status, body = http_get(f"{agent.url}/v1/list?" + urlencode(
        {"export": "train", "pattern": "[a-z]" * 300}))
    assert status == 400 and b"at most 1024" in body, body


def test_patterns_are_compiled_in_a_bounded_cache_of_our_own(storage):
    before = fnmatch._compile_pattern.cache_info().currsize  # fnmatch's own 32768-entry cache
    for n in range(listing.PATTERN_CACHE_SIZE + 50):
        storage.list("train", "videos/", False, f"*clip{n}*", None, 10, TOKEN)
    assert len(listing._patterns) == listing.PATTERN_CACHE_SIZE
    assert fnmatch._compile_pattern.cache_info().currsize == before
    # The same matching as fnmatchcase: '*' crosses '/', case counts.
    match = listing.pattern_matcher("videos/*.MP4", "train:")
    assert match("videos/a/b.MP4") and not match("videos/a/b.mp4")
    assert listing.pattern_matcher("videos/*.MP4", "train:") is match  # from the cache
