"""One trainer node of the cross-node test: ``python -m tests.s3_node '<json>'``.

Builds its client, says it is ready (a file in ``spec["barrier"]``), waits
for the parent's go (``go`` in that folder: every node starts its reads at
once however long each took to start), reads the frames, and prints what it
fetched from the store as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tests.helpers import make_patcher


def main(spec: dict) -> None:
    with make_patcher(None, spec["root"], spec["redis_url"], store=spec["store"],
                      piece_size=spec["piece_size"],
                      single_flight_across_nodes=spec["claims"]) as patcher:
        barrier = Path(spec["barrier"])
        (barrier / f"ready-{os.getpid()}").touch()
        while not (barrier / "go").exists():
            time.sleep(0.002)
        with patcher.open_video_reader("train", spec["relpath"], 36, 64) as reader:
            reader.read_frames_numpy(spec["frames"])
            stats = reader.last_stats
    print(json.dumps({"remote_reads": stats.remote_reads, "remote_bytes": stats.remote_bytes}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
