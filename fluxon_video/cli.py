"""The `fluxon-video` command line (also `python -m fluxon_video`).

    fluxon-video ls EXPORT[:PREFIX]            list files
    fluxon-video stat EXPORT:RELPATH           file version and video metadata
    fluxon-video index EXPORT [--glob G]       frame indexes into the KV
    fluxon-video warm EXPORT [--glob G]        every piece (and index) into the KV
    fluxon-video read EXPORT:RELPATH --frames 0,8,-1 --size 224x224 --out DIR
                                     [--audio clip.wav]
    fluxon-video agent --config F --listen H:P serve exports (storage host)
    fluxon-video token new [NAME]              a bearer token and its sha256: form
    fluxon-video image-cache list | prune      LeRobot image cameras' local copies
    fluxon-video doctor | demo | versions | --version

Where a command takes EXPORT:RELPATH (or EXPORT[:PREFIX]) it also takes a
URI, s3://bucket/prefix/key or an absolute path under a directory root,
mapped to the export whose root holds it (fluxon_video/fs/uris.py).
Client commands read the config from --config or $FLUXON_VIDEO_CONFIG and
act as --identity (or $FLUXON_VIDEO_IDENTITY, or the config's only
identity). Output is text for people; --json prints JSON for machines.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fluxon_video.defaults import TIME_TOLERANCE_S
from fluxon_video.resize import INTERPOLATIONS, RESIZE_MODES

CONFIG_ENV = "FLUXON_VIDEO_CONFIG"
IDENTITY_ENV = "FLUXON_VIDEO_IDENTITY"
# What a command's target may be, for --help.
URI_HELP = ("or a URI under an export's root: s3://bucket/prefix/key, /abs/path, file:///abs/path "
            "(EXPORT:URI: under that export's root)")


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=os.environ.get(CONFIG_ENV),
                        help=f"TOML config (default: ${CONFIG_ENV})")
    parser.add_argument("--identity", default=os.environ.get(IDENTITY_ENV),
                        help=f"identity to act as (default: ${IDENTITY_ENV}, or the config's "
                             "only identity)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def build_parser() -> argparse.ArgumentParser:
    from fluxon_video import __version__

    parser = argparse.ArgumentParser(
        prog="fluxon-video",
        description="Decode video frames from FluxonFS exports into NHWC uint8 arrays; "
                    "list, inspect, index and warm exports; run the storage agent.",
        epilog=f"Client commands read --config (default ${CONFIG_ENV}).")
    parser.add_argument("--version", action="version", version=f"fluxon-video {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log fluxon_video's messages (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_ls(sub)
    _add_stat(sub)
    _add_bulk(sub)
    _add_read(sub)
    _add_demo(sub)
    _add_agent(sub)
    _add_token(sub)
    _add_image_cache(sub)
    _add_doctor(sub)
    info = sub.add_parser("versions", help="print the FFmpeg library versions in use")
    info.set_defaults(run=_run_versions)
    for command in sub.choices.values():  # -v after the command works as before it
        command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                             help="log fluxon_video's messages (-v info, -vv debug)")
    return parser


def _add_ls(sub: Any) -> None:
    """ls: list an export."""
    ls = sub.add_parser("ls", help="list the files of an export",
                        description="List the files under EXPORT[:PREFIX] (one level; -r for "
                                    "everything below), as the agent serves them.")
    ls.add_argument("target", metavar="EXPORT[:PREFIX]", help=f"an export and a prefix, {URI_HELP}")
    ls.add_argument("-r", "--recursive", action="store_true", help="list every level")
    ls.add_argument("--glob", help="only relpaths matching this pattern (* crosses /)")
    _client_options(ls)
    ls.set_defaults(run=_run_ls)


def _add_stat(sub: Any) -> None:
    """stat: a file's version and metadata."""
    stat = sub.add_parser("stat", help="a file's version and video metadata",
                          description="Print a file's version (a file's size, mtime, ctime and "
                                      "inode; an object's size, last-modified time, ETag and "
                                      "version id) and its video metadata (from the KV when "
                                      "indexed).")
    stat.add_argument("target", metavar="EXPORT:RELPATH", help=f"a file of an export, {URI_HELP}")
    _stream_option(stat)
    _client_options(stat)
    stat.set_defaults(run=_run_stat)


def _add_bulk(sub: Any) -> None:
    """index and warm: whole-export runs."""
    for name, what in (("index", "build and store the frame index of every video"),
                       ("warm", "prefetch every piece (and index) of every file into the KV")):
        bulk = sub.add_parser(name, help=what, description=(
            f"{what[0].upper()}{what[1:]} of EXPORT (under PREFIX), in parallel with a progress "
            "bar, skipping what the KV already holds at the file's current version (so a run "
            "can be interrupted with Ctrl-C and resumed). A file that fails is reported and "
            "skipped; the run then exits 1. Each file is counted once: done, already in the "
            "KV, not video, or an error."))
        bulk.add_argument("target", metavar="EXPORT[:PREFIX]",
                          help=f"an export and a prefix, {URI_HELP}")
        bulk.add_argument("--glob", help="only relpaths matching this pattern (* crosses /)")
        bulk.add_argument("--workers", type=int, default=4,
                          help="files handled at once (default: %(default)s)")
        bulk.add_argument("--no-progress", action="store_true",
                          help="no progress (else a bar on a terminal, a plain line every "
                               "10 s when stderr is a file or a pipe)")
        if name == "warm":
            bulk.add_argument("--index-only", action="store_true",
                              help="store the frame indexes only (as `index`)")
        _client_options(bulk)
        bulk.set_defaults(run=_run_bulk, bulk=name)


def _add_read(sub: Any) -> None:
    """read: frames to files."""
    read = sub.add_parser("read", help="decode frames to PNG or .npy files, audio to WAV",
                          description="Decode frames of EXPORT:RELPATH (by index, negative from "
                                      "the end, and/or by time) into --out, and with --audio "
                                      "the audio of the span they cover (or --audio-span) "
                                      "into a WAV file.")
    read.add_argument("target", metavar="EXPORT:RELPATH", help=f"a file of an export, {URI_HELP}")
    read.add_argument("--frames", help="frame indices, e.g. 0,8,-1")
    read.add_argument("--times", help="times in seconds, e.g. 1.5,3.0 (the frame shown then)")
    read.add_argument("--tolerance-s", type=float, default=TIME_TOLERANCE_S, metavar="S",
                      help="with --times: a time within S seconds of a frame's time takes that "
                           "frame, the nearest (default: %(default)g; 0: the frame shown then)")
    read.add_argument("--size", default="native",
                      help="WxH, or 224x / x224 to keep the aspect ratio (default: native)")
    read.add_argument("--resize", choices=RESIZE_MODES, default="stretch",
                      help="with WxH: scale to it (stretch, the default); keep the aspect "
                           "ratio, cover it and crop the centre (shorter_side_crop); or fit "
                           "inside it on black (letterbox)")
    read.add_argument("--interpolation", choices=INTERPOLATIONS, default="bilinear",
                      help="the scaler, as the ffmpeg CLI's scale=...:flags= (nearest is its "
                           "neighbor; default: bilinear)")
    read.add_argument("--format", choices=["png", "npy"], default="png")
    read.add_argument("--autorotate", action="store_true", help="turn frames as displayed")
    read.add_argument("--on-damage", choices=["error", "conceal"], default="error",
                      help="frames that depend on damaged data: fail (error, the default) or "
                           "number and return what a one-threaded decode shows (conceal)")
    _stream_option(read)
    read.add_argument("--out", type=Path, help="directory for the frames' files (needed with "
                                               "--frames or --times)")
    read.add_argument("--audio", type=Path, metavar="OUT.wav",
                      help="write the audio of the span the frames cover (from the earliest "
                           "one's time to the end of the latest one's display) as a 16-bit "
                           "PCM WAV file (at the stream's rate and channels: the ffmpeg CLI's "
                           "-f s16le samples of that span)")
    read.add_argument("--audio-span", metavar="START,END",
                      help="with --audio: exactly this span, in seconds on the frames' clock "
                           "(then --frames and --times are optional: an audio-only file works)")
    read.add_argument("--sample-rate", type=int, metavar="HZ",
                      help="with --audio: resample to HZ (default: the stream's rate)")
    read.add_argument("--channels", type=int, metavar="N",
                      help="with --audio: mix to N channels (default: the stream's)")
    _client_options(read)
    read.set_defaults(run=_run_read)


def _add_demo(sub: Any) -> None:
    """demo: generated clips, read cold then warm."""
    demo = sub.add_parser(
        "demo", help="generate a few clips and read them, cold then warm",
        description="Generate test clips with the ffmpeg CLI into --data-dir and read "
                    "random 16-frame clips from them, printing per-read stats.")
    demo.add_argument("--data-dir", default=".demo-data",
                      help="where the generated clips go (default: %(default)s)")
    demo.add_argument("--clips", type=int, default=4,
                      help="clips read per video and pass (default: %(default)s)")
    demo.set_defaults(run=_run_demo)


def _add_doctor(sub: Any) -> None:
    """doctor: each link to the bytes, checked."""
    doctor = sub.add_parser(
        "doctor", help="check the install, the config, Redis, the agents and a read, with a "
                       "verdict each",
        description="Check, in order: the install (the compiled extension loads, the FFmpeg "
                    "libraries it runs against, a video and an audio file decoded in this "
                    "process without the ffmpeg CLI); then, given a config, the config, the "
                    "identity, the KV (a write to Redis), and for each export (or --export): "
                    "its agents' /healthz, a listing and a stat with the identity's token, "
                    "and one byte range read. A failure gives its cause. Exits 1 if any "
                    "check fails.")
    doctor.add_argument("--export", action="append", metavar="NAME",
                        help="check only this export (repeat for more)")
    _client_options(doctor)
    doctor.set_defaults(run=_run_doctor)


def _add_agent(sub: Any) -> None:
    """agent: the storage side's server."""
    agent = sub.add_parser(
        "agent", help="serve export roots to FluxonFS clients (stat, list, read_chunk)",
        description="Run the FluxonFS agent on the storage host: it answers stat, list and "
                    "read_chunk over HTTP/1.1 (HTTPS with --tls-cert/--tls-key) for the exports "
                    "in --config, checking each request's bearer token against the export's "
                    "access list. SIGTERM stops it gracefully; SIGHUP reloads --config "
                    "(identities and exports) without dropping a connection.")
    agent.add_argument("--config", default=os.environ.get(CONFIG_ENV),
                       help=f"TOML file with [identities] and [[exports]] (default: ${CONFIG_ENV})")
    agent.add_argument("--listen", default="127.0.0.1:8765",
                       help="HOST:PORT to listen on (default: %(default)s)")
    agent.add_argument("--io-threads", type=int, default=32,
                       help="threads reading files: concurrent reads (default: %(default)s)")
    agent.add_argument("--tls-cert", help="PEM certificate chain: serve HTTPS")
    agent.add_argument("--tls-key", help="PEM private key of --tls-cert")
    agent.add_argument("--access-log", action="store_true", help="log every request")
    agent.add_argument("--inject-latency-ms", type=float, default=0.0, metavar="MS",
                       help="wait MS milliseconds before answering each stat and read, to "
                            "model a remote store in benchmarks (default: %(default)s)")
    agent.add_argument("--max-connections", type=int, metavar="N",
                       help="connections open at once; when full, the longest-idle one is "
                            "closed, and a request finding every one busy gets 503 (default: "
                            "what the descriptor limit, ulimit -n, leaves room for)")
    agent.add_argument("--header-timeout-s", type=float, default=10.0, metavar="S",
                       help="a new connection must send its first request (TLS handshake "
                            "included) within S seconds (default: %(default)s)")
    agent.add_argument("--keepalive-timeout-s", type=float, default=75.0, metavar="S",
                       help="idle keep-alive connections close after S seconds "
                            "(default: %(default)s)")
    agent.add_argument("--metrics-token-file", metavar="FILE",
                       help="a file holding the bearer token /metrics asks for (default: "
                            "$FLUXON_METRICS_TOKEN; neither: /metrics is open)")
    agent.set_defaults(run=_run_agent)


def _add_token(sub: Any) -> None:
    """token new / token hash: bearer tokens for [identities]."""
    token = sub.add_parser(
        "token", help="make a bearer token for [identities] (token new)",
        description="Bearer tokens for [identities]. `token new` makes one; `token hash` "
                    "turns an existing token into the sha256: form an agent's config can hold.")
    actions = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    new = actions.add_parser(
        "new", help="print a fresh token and its sha256: form",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print a fresh bearer token (32 random bytes from the OS, 43 urlsafe "
                    "characters: 256 bits; the agent refuses tokens under 128) as two "
                    "[identities] lines:\n\n"
                    "  NAME = \"<token>\"          for the trainers' config: the token they "
                    "send\n"
                    "  NAME = \"sha256:<hex>\"     for the agent's config: what it checks "
                    "(the agent then\n"
                    "                             holds no token anyone could send)\n\n"
                    "To rotate, list the new token next to the old one in the agent's config "
                    "(NAME = [\"sha256:<new>\", \"sha256:<old>\"]), move the trainers to the "
                    "new token, then remove the old entry. Keep configs holding plain tokens "
                    "at mode 0600.")
    new.add_argument("name", nargs="?", default="trainer",
                     help="the identity name written in the lines (default: %(default)s)")
    new.add_argument("--json", action="store_true",
                     help='print {"name", "token", "sha256"} as JSON')
    new.set_defaults(run=_run_token_new)
    hashed = actions.add_parser(
        "hash", help="print the sha256: form of a token read from stdin",
        description="Read a token from stdin (not the command line, which other users can "
                    "see in the process list) and print its sha256: form for an agent's "
                    "[identities].")
    hashed.set_defaults(run=_run_token_hash)


def _add_image_cache(sub: Any) -> None:
    """image-cache list / prune: the LeRobot image cameras' copies on this node."""
    cache = sub.add_parser(
        "image-cache", help="list or prune the local copies of LeRobot image cameras",
        description="fluxon_video.lerobot copies each data file's image columns once into a "
                    "node-local folder and memory-maps them (docs/lerobot.md). Each use of a "
                    "copy marks it; `prune` removes the copies no job has used for a while. A "
                    "running job loses nothing: a removed copy stays readable where it is "
                    "mapped, and a process that needs it again writes it again.")
    actions = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="each copy: its size and when it was last used")
    prune = actions.add_parser(
        "prune", help="remove the copies unused for --unused-days",
        description="Remove the copies no dataset has used for --unused-days days (and "
                    "temporary files of writes that never finished); a copy being written is "
                    "left. Prints what it removed and what is left.")
    prune.add_argument("--unused-days", type=float, default=30.0, metavar="DAYS",
                       help="remove copies unused for this long (default: %(default)g; 0 "
                            "removes every copy not being written)")
    prune.add_argument("--dry-run", action="store_true",
                       help="say what would be removed, remove nothing")
    for action in (listing, prune):
        action.add_argument("--dir", default=None, metavar="FOLDER",
                            help="the cache folder (default: $FLUXON_VIDEO_CACHE/lerobot-images, "
                                 "else ~/.cache/fluxon_video/lerobot-images)")
        action.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.set_defaults(run=_run_image_cache_list)
    prune.set_defaults(run=_run_image_cache_prune)


# ---- client commands ----

def _patcher(args: argparse.Namespace) -> Any:
    from fluxon_video.errors import FluxonFsConfigError
    from fluxon_video.fs.config import load_config
    from fluxon_video.patcher import FluxonFsPatcher

    if not args.config:
        raise FluxonFsConfigError(f"no config: pass --config or set ${CONFIG_ENV}")
    config = load_config(args.config)
    identity = args.identity
    if identity is None:
        if len(config.identities) != 1:
            raise FluxonFsConfigError(
                f"{args.config}: pass --identity (or set ${IDENTITY_ENV}); the config defines "
                f"{', '.join(sorted(config.identities)) or 'no identities'}")
        identity = next(iter(config.identities))
    return FluxonFsPatcher(config, identity=identity)


def _run_ls(args: argparse.Namespace) -> int:
    from fluxon_video.ops.report import emit, human_bytes
    from fluxon_video.ops.targets import resolve_target

    with _patcher(args) as patcher:
        export, prefix = resolve_target(patcher, args.target)
        entries = patcher.list_files(export, prefix, args.recursive, args.glob)
        rows = ({**e.as_dict(), "size_h": "-" if e.is_dir else human_bytes(e.size),
                 "name": e.relpath + ("/" if e.is_dir else "")} for e in entries)
        if args.json:
            rows = ({k: v for k, v in row.items() if k not in ("size_h", "name")} for row in rows)
        count = emit(rows, [("size_h", "size"), ("name", "relpath")], args.json)
    if count == 0 and (prefix or args.glob):
        # As ls does for a path that is not there: say so, and fail.
        what = (f"{export}:{prefix}" if prefix else export) + (
            f" matching {args.glob!r}" if args.glob else "")
        print(f"fluxon-video: error: nothing under {what}", file=sys.stderr)
        return 1
    if not args.json:
        print(f"{count} entr{'y' if count == 1 else 'ies'}", file=sys.stderr)
    return 0


def _version_fields(version: Any, is_object: bool) -> dict[str, Any]:
    """The fields of a file version that exist for its origin: a file's size,
    mtime, ctime and inode; an object's size, last-modified time (mtime_ns),
    ETag and version id (on a versioned bucket)."""
    if not is_object:
        return {name: value for name, value in version.as_fields().items() if name != "etag"}
    etag, _, version_id = version.etag.partition("#")
    fields: dict[str, Any] = {"size": version.size, "mtime_ns": version.mtime_ns, "etag": etag}
    if version_id:
        fields["version_id"] = version_id
    return fields


def _audio_line(audio: dict[str, Any] | None) -> str:
    """metadata.audio in one line, for people."""
    if not audio:
        return "none"
    line = (f"{audio['codec']}, {audio['sample_rate']} Hz, {audio['num_channels']} channel"
            f"{'' if audio['num_channels'] == 1 else 's'} ({audio['layout']}), stream "
            f"{audio['stream_index']}")
    if audio.get("begin_stream_seconds") is not None:
        line += f", starts at {audio['begin_stream_seconds']} s"
    if audio.get("duration_seconds") is not None:
        line += f", {audio['duration_seconds']} s"
    return line


def _run_stat(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from fluxon_video.errors import FluxonFsDecodeError
    from fluxon_video.ops.report import emit_record, human_bytes
    from fluxon_video.ops.targets import resolve_target

    with _patcher(args) as patcher:
        export, relpath = resolve_target(patcher, args.target)
        version = patcher.file_version(export, relpath)
        is_object = patcher.config.export(export).is_object_store or bool(version.etag)
        record: dict[str, Any] = {"file": f"{export}:{relpath}",
                                  **_version_fields(version, is_object)}
        try:
            metadata, stats = patcher.video_metadata_with_stats(export, relpath,
                                                                stream_index=args.stream)
        except FluxonFsDecodeError as exc:
            record["video"] = f"none ({exc})"
        else:
            record.update({k: v for k, v in asdict(metadata).items()
                           if k not in ("size_bytes", "mtime_ns")})
            record["index_from"] = stats.index_source
            if not args.json:
                record["keyframe_indices"] = _abbreviate(metadata.keyframe_indices)
                record["size"] = f"{version.size} ({human_bytes(version.size)})"
                record["audio"] = _audio_line(record.get("audio"))
    emit_record(record, args.json)
    return 0


def _abbreviate(values: Sequence[int], keep: int = 8) -> str:
    shown = ", ".join(map(str, values[:keep]))
    return f"[{shown}{', ...' if len(values) > keep else ''}] ({len(values)})"


def _run_bulk(args: argparse.Namespace) -> int:
    from fluxon_video.ops.bulk import BulkRun
    from fluxon_video.ops.report import emit_record, human_bytes
    from fluxon_video.ops.targets import resolve_target

    with _patcher(args) as patcher:
        export, prefix = resolve_target(patcher, args.target)
        if not patcher.config.client.redis_url:
            print("fluxon-video: warning: no redis_url in the config: the in-process KV "
                  "lasts only as long as this command", file=sys.stderr)
        # A bar on a terminal; plain lines every 10 s in a log; nothing if asked.
        mode = "off" if args.no_progress else "bar" if sys.stderr.isatty() else "lines"
        run = BulkRun(patcher, export, args.glob, args.workers, progress=mode, prefix=prefix)
        report = run.warm(args.index_only) if args.bulk == "warm" else run.index()
    if args.json:
        emit_record(report.as_dict(), True)
    else:
        indexing = args.bulk == "index" or getattr(args, "index_only", False)
        verb = "indexed" if indexing else "warmed"
        # Each file once: a non-video's bytes are warmed all the same, said here.
        not_video = f"{len(report.not_video)} not video" + (
            " (bytes warmed, no index)" if report.not_video and not indexing else "")
        print(f"{report.files} files: {report.done} {verb}, {report.skipped} already in the KV, "
              f"{not_video}, {len(report.errors)} errors; "
              f"{human_bytes(report.bytes)} from the agent"
              + (f" ({report.pieces} pieces stored)" if args.bulk == "warm" else "")
              + f" in {report.seconds:.1f} s" + (" (interrupted)" if report.interrupted else ""))
        for relpath, message in report.not_video:
            print(f"  not video: {relpath}: {message}", file=sys.stderr)
        for relpath, message in report.errors:
            print(f"  error: {relpath}: {message}", file=sys.stderr)
    if report.interrupted:
        return 130
    return 1 if report.errors else 0


def _stream_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stream", type=int, default=None, metavar="N",
                        help="the container's stream N (as in `ffmpeg -map 0:N`; default: the "
                             "video stream FFmpeg's av_find_best_stream picks, not cover art)")


def _run_read(args: argparse.Namespace) -> int:
    from fluxon_video.errors import FluxonFsConfigError
    from fluxon_video.ops.frames_out import AudioOut, read_frames
    from fluxon_video.ops.report import emit
    from fluxon_video.options import ReadOptions
    from fluxon_video.ops.targets import parse_numbers, parse_size, resolve_target

    frames = parse_numbers(args.frames, int, "--frames")
    times = parse_numbers(args.times, float, "--times")
    span = parse_numbers(args.audio_span, float, "--audio-span")
    if span and len(span) != 2:
        raise FluxonFsConfigError(f"--audio-span must be START,END in seconds, got "
                                  f"{args.audio_span!r}")
    if args.audio is None and (span or args.sample_rate or args.channels):
        raise FluxonFsConfigError("--audio-span, --sample-rate and --channels go with "
                                  "--audio OUT.wav")
    if not frames and not times and not (args.audio is not None and span):
        raise FluxonFsConfigError("read needs --frames and/or --times (or --audio with "
                                  "--audio-span)")
    if (frames or times) and args.out is None:
        raise FluxonFsConfigError("read --frames/--times needs --out DIR for the frames")
    audio = None if args.audio is None else AudioOut(
        args.audio, (span[0], span[1]) if span else None, args.sample_rate, args.channels)
    height, width = parse_size(args.size)
    options = ReadOptions(height, width, autorotate=args.autorotate, on_damage=args.on_damage,
                          stream_index=args.stream, resize=args.resize,
                          interpolation=args.interpolation)
    with _patcher(args) as patcher:
        export, relpath = resolve_target(patcher, args.target)
        rows = read_frames(patcher, export, relpath, frames, times, options, args.out,
                           args.format, audio=audio, tolerance_s=args.tolerance_s)
    frame_rows = [row for row in rows if "frame" in row]
    emit(frame_rows, [("frame", "frame"), ("time_s", "time"), ("file", "file")], args.json)
    for row in rows:
        if "audio_file" in row:
            if args.json:
                print(json.dumps(row))
            else:
                print(f"audio  {row['start_s']}-{row['end_s']}  {row['audio_file']}  "
                      f"({row['num_samples']} samples, {row['sample_rate']} Hz, "
                      f"{row['channels']} channel{'' if row['channels'] == 1 else 's'}, "
                      "16-bit PCM)")
    return 0


# ---- other commands ----

def _run_demo(args: argparse.Namespace) -> int:
    from fluxon_video.demo import run_demo

    return run_demo(args.data_dir, clips=args.clips)


def _run_agent(args: argparse.Namespace) -> int:
    from fluxon_video.errors import FluxonFsConfigError
    from fluxon_video.fs.agent import run_agent
    from fluxon_video.fs.config import load_config

    if not args.config:
        raise FluxonFsConfigError(f"the agent needs --config (or ${CONFIG_ENV})")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    tls = {"tls_cert": args.tls_cert, "tls_key": args.tls_key} if (args.tls_cert or args.tls_key) else {}
    metrics_token = None
    if args.metrics_token_file:
        try:
            metrics_token = Path(args.metrics_token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise FluxonFsConfigError(f"--metrics-token-file {args.metrics_token_file!r}: "
                                      f"cannot read it ({exc})") from None
    run_agent(load_config(args.config), args.listen, args.io_threads, args.access_log,
              args.inject_latency_ms, **tls, config_path=args.config,
              max_connections=args.max_connections, header_timeout_s=args.header_timeout_s,
              keepalive_timeout_s=args.keepalive_timeout_s, metrics_token=metrics_token)
    return 0


def _run_token_new(args: argparse.Namespace) -> int:
    from fluxon_video.fs.tokens import hash_token, new_token

    token = new_token()
    if args.json:
        print(json.dumps({"name": args.name, "token": token, "sha256": hash_token(token)}))
        return 0
    print("# the trainers' config, [identities]: the token they send (keep the file 0600)")
    print(f"{args.name} = {json.dumps(token)}")
    print("# the agent's config, [identities]: its SHA-256, which the agent checks")
    print(f"{args.name} = {json.dumps(hash_token(token))}")
    return 0


def _run_token_hash(args: argparse.Namespace) -> int:
    from fluxon_video.errors import FluxonFsConfigError
    from fluxon_video.fs.tokens import check_entries, check_strength, hash_token, is_hashed

    token = sys.stdin.readline().strip()
    if not token or is_hashed(token):
        raise FluxonFsConfigError("token hash reads one plain token from stdin")
    check_entries("stdin", token)
    # The agent cannot judge a hash: judge the token now, as it would the plain form.
    check_strength(token, "stdin")
    print(hash_token(token))
    return 0


def _copy_json(copy: Any) -> dict[str, Any]:
    """An image-cache copy as --json prints it."""
    from datetime import datetime, timezone

    used = datetime.fromtimestamp(copy.last_used, timezone.utc)
    return {"path": str(copy.path), "bytes": copy.size,
            "last_used": used.isoformat(timespec="seconds")}


def _copy_row(copy: Any) -> dict[str, Any]:
    """An image-cache copy as text shows it: its JSON fields, the size and the
    last use for people."""
    from datetime import datetime, timezone

    from fluxon_video.ops.report import human_bytes

    used = datetime.fromtimestamp(copy.last_used, timezone.utc)
    return {**_copy_json(copy), "size": human_bytes(copy.size),
            "used": used.strftime("%Y-%m-%d %H:%M")}


def _copies(count: int) -> str:
    return f"{count} cop{'y' if count == 1 else 'ies'}"


def _run_image_cache_list(args: argparse.Namespace) -> int:
    from fluxon_video.lerobot.image_store import cache_folder, cached_copies
    from fluxon_video.ops.report import emit, human_bytes

    folder = cache_folder(args.dir or None)
    copies = cached_copies(folder)
    rows = map(_copy_json if args.json else _copy_row, copies)
    emit(rows, [("size", "size"), ("used", "last used (UTC)"), ("path", "path")], args.json)
    if not args.json:
        print(f"{_copies(len(copies))}, {human_bytes(sum(c.size for c in copies))}, "
              f"in {folder}", file=sys.stderr)
    return 0


def _run_image_cache_prune(args: argparse.Namespace) -> int:
    from fluxon_video.errors import FluxonFsConfigError
    from fluxon_video.lerobot.image_store import cache_folder, prune
    from fluxon_video.ops.report import human_bytes

    if args.unused_days < 0:
        raise FluxonFsConfigError(f"--unused-days must be 0 or more, not {args.unused_days:g}")
    folder = cache_folder(args.dir or None)
    report = prune(folder, args.unused_days * 86400, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    if args.json:
        print(json.dumps({"folder": str(folder), "dry_run": args.dry_run, **{
            name: list(map(_copy_json, copies))
            for name, copies in (("removed", report.removed), ("kept", report.kept),
                                 ("busy", report.busy))}}))
        return 0
    for copy in report.removed:
        row = _copy_row(copy)
        print(f"{verb} {row['path']} ({row['size']}, last used {row['used']} UTC)")
    for copy in report.busy:
        print(f"left {copy.path}: being written")
    print(f"{verb} {_copies(len(report.removed))} "
          f"({human_bytes(sum(c.size for c in report.removed))}); {len(report.kept)} used in "
          f"the last {args.unused_days:g} days kept "
          f"({human_bytes(sum(c.size for c in report.kept))}), in {folder}", file=sys.stderr)
    return 0


def _run_doctor(args: argparse.Namespace) -> int:
    import warnings

    from fluxon_video.errors import FluxonFsError
    from fluxon_video.ops.doctor import Check, check_install, describe, run_doctor

    checks = check_install()
    if not args.config:
        checks.append(Check("config", True, f"none given: pass --config or set ${CONFIG_ENV} "
                                            "to check the exports too", skipped=True))
    else:
        with warnings.catch_warnings():  # the kv line says what the KV's warning would
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                patcher = _patcher(args)
            except FluxonFsError as exc:  # a config that does not load: its verdict
                checks.append(Check("config", False, describe(exc)))
            else:
                with patcher:
                    checks += run_doctor(patcher, args.export)
    if args.json:
        for check in checks:
            print(json.dumps({"check": check.name, "ok": check.ok, "detail": check.detail,
                              **({"skipped": True} if check.skipped else {})}))
    else:
        width = max(len(check.name) for check in checks)
        for check in checks:
            verdict = "skip" if check.skipped else "ok  " if check.ok else "FAIL"
            print(f"{verdict} {check.name:<{width}}  {check.detail}")
    return 0 if all(check.ok for check in checks) else 1


def _run_versions(args: argparse.Namespace) -> int:
    from fluxon_video.ops.doctor import library_versions

    for lib, version in library_versions().items():
        print(f"{lib} {version}")
    return 0


def _show_warnings() -> None:
    """The library's warnings on stderr (it is silent by default): a command
    waiting out an agent restart or reading around a dead Redis says so."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("fluxon-video: %(levelname)s: %(message)s"))
    handler.setLevel(logging.WARNING)
    library = logging.getLogger("fluxon_video")
    library.addHandler(handler)
    if library.level == logging.NOTSET or library.level > logging.WARNING:
        library.setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else logging.INFO,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")
    elif args.command != "agent":  # the agent configures its own log
        _show_warnings()
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one clear line instead of a traceback
        from fluxon_video.errors import FluxonFsError

        if not isinstance(exc, FluxonFsError):
            raise
        print(f"fluxon-video: error: {exc}", file=sys.stderr)
        return 1
