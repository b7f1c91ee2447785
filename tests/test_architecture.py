"""The layering rules of the tree (see docs/design.md), checked on the source."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _arch_report():
    spec = importlib.util.spec_from_file_location("arch_report", ROOT / "dev" / "arch_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_has_no_import_cycles():
    report = _arch_report()
    graph = report.import_graph()
    assert "fluxon_video.patcher" in graph and "fluxon_video.pool" in graph["fluxon_video.patcher"]
    assert report.cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    report = _arch_report()
    assert report.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


def test_the_fs_layer_knows_nothing_of_video():
    graph = _arch_report().import_graph()
    for module, imports in graph.items():
        if module.startswith("fluxon_video.fs"):
            assert all(i.startswith(("fluxon_video.fs", "fluxon_video.errors",
                                     "fluxon_video.defaults", "fluxon_video.logs"))
                       for i in imports), (module, imports)
    for path in (ROOT / "fluxon_video" / "fs").glob("*.py"):
        assert "frameindex" not in path.read_text().lower(), path


# The two sides of fs/: what serves an export (storage) and what reads it
# (the client's services), which meet only over a route.
STORAGE_SIDE = {"agent", "agent_limits", "agent_metrics", "listing", "object_origin", "origin",
                "paths", "posix_origin", "storage"}
CLIENT_SERVICES = {"blobs", "file_metadata", "pieces", "warming"}
# Reached only from inside fs/ (the CLI's agent command serves the storage side).
BACKENDS = {f"fluxon_video.fs.{name}" for name in
            ("posix_origin", "object_origin", "storage", "client_state", "routes")}


def _fs(module: str) -> str | None:
    return module.removeprefix("fluxon_video.fs.") if module.startswith("fluxon_video.fs.") else None


def test_nothing_above_fs_reaches_a_storage_backend():
    graph = _arch_report().import_graph()
    for module, imports in graph.items():
        if not module.startswith("fluxon_video.fs"):
            assert not imports & BACKENDS, (module, imports & BACKENDS)


def test_the_storage_side_knows_nothing_of_the_client():
    graph = _arch_report().import_graph()
    for module, imports in graph.items():
        if _fs(module) in STORAGE_SIDE:
            # config and tokens (how [identities] reads and checks) serve both sides.
            assert all(_fs(i) in STORAGE_SIDE | {"config", "tokens"} for i in imports
                       if i.startswith("fluxon_video.fs")), (module, imports)


def test_each_client_service_keeps_to_its_job():
    """Services share the process state, not each other; opening a file
    reads its blob with the stat, the one exception."""
    graph = _arch_report().import_graph()
    for module, imports in graph.items():
        if _fs(module) in CLIENT_SERVICES:
            others = {_fs(i) for i in imports} & CLIENT_SERVICES
            assert others <= ({"blobs"} if _fs(module) == "file_metadata" else set()), (
                module, others)


def test_the_drop_ins_sit_on_top():
    """compat/ (torchcodec and decord drop-ins) is above the reader and the patcher,
    beside torch.py: nothing else in the package imports it, and it reaches no
    native unit and of fs/ only the config file's loader."""
    graph = _arch_report().import_graph()
    for module, imports in graph.items():
        compat = {i for i in imports if i.startswith("fluxon_video.compat")}
        if not module.startswith("fluxon_video.compat"):
            assert not compat, (module, compat)
            continue
        below = imports - compat
        assert not {i for i in below if i.startswith("fluxon_video._")}, (module, below)
        assert {i for i in below if i.startswith("fluxon_video.fs")} <= {
            "fluxon_video.fs.config"}, (module, below)


def test_the_bench_does_not_import_the_tests():
    for path in (ROOT / "bench").glob("*.py"):
        text = path.read_text()
        assert "from tests" not in text and "import tests" not in text, path


def test_setup_builds_every_native_unit_by_its_file_name():
    # A unit renamed without setup.py would still import from a stale build
    # in place, and fail only on a clean one.
    text = (ROOT / "setup.py").read_text()
    listed = re.search(r"NATIVE_MODULES = \[([^\]]*)\]", text).group(1)
    assert set(re.findall(r'"(\w+)"', listed)) == {
        p.stem for p in (ROOT / "fluxon_video").glob("*.pyx")}


def test_the_lerobot_client_sits_on_top():
    """fluxon_video.lerobot uses the readers and the patcher; nothing below it
    knows LeRobot (the command line, above everything, tends its image cache),
    and it never reaches into fs/ beyond config and URIs."""
    graph = _arch_report().import_graph()
    assert "fluxon_video.lerobot.dataset" in graph
    for module, imports in graph.items():
        inside = module.startswith("fluxon_video.lerobot")
        if module == "fluxon_video.cli":
            assert {i for i in imports if i.startswith("fluxon_video.lerobot")} == {
                "fluxon_video.lerobot.image_store"}
        elif not inside:
            assert not any(i.startswith("fluxon_video.lerobot") for i in imports), module
        else:
            assert all(i in {"fluxon_video.fs.uris", "fluxon_video.fs.config"}
                       for i in imports if i.startswith("fluxon_video.fs")), (module, imports)


def test_one_planner_and_one_meter_serve_the_reader_and_the_pool():
    """How a read splits over decoders is one rule (fluxon_video/planning.py,
    numpy only) that the reader and the pool both use; a read's stats come from
    the meter, which knows only the counters and the stats record."""
    graph = _arch_report().import_graph()
    assert not {i for i in graph["fluxon_video.planning"] if i.startswith("fluxon_video")}
    assert graph["fluxon_video.meter"] == {"fluxon_video.fs.counters", "fluxon_video.stats"}
    for user in ("fluxon_video.reader", "fluxon_video.pool"):
        assert "fluxon_video.planning" in graph[user], user


def test_the_audio_decoder_borrows_the_demuxer_through_a_loan():
    """_audio.pyx takes turns on the frames' demuxer through _pipeline's
    DemuxerLoan, which sets and restores the pipeline's state: the audio
    decoder names no Pipeline field."""
    audio = (ROOT / "fluxon_video" / "_audio.pyx").read_text()
    assert "DemuxerLoan.lend(" in audio
    assert not re.search(r"\bpipe\.\w+", audio)
    assert "cdef Pipeline" not in audio
