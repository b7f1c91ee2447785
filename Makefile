# fluxon_video: `make demo` and `make test` work on a fresh Debian machine;
# each installs what it needs first (system packages via apt, then .venv).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev \
                ffmpeg pkg-config redis-server gcc
NATIVE_SOURCES := $(wildcard fluxon_video/*.pyx fluxon_video/*.pxd fluxon_video/*.c \
                  fluxon_video/*.h fluxon_video/libav/*.pxd) setup.py pyproject.toml
STAMP  := $(VENV)/.fluxon-installed
# The PyTorch CPU build these machines keep on disk (a plain `pip install torch`
# would pull gigabytes of CUDA wheels). The tests run fluxon_video.torch with it.
TORCH_SPEC ?= torch==2.13.0
# torchcodec's CPU wheel for that torch (later ones are CUDA builds): the peer
# tests/test_compat.py holds fluxon_video.compat.torchcodec to.
TORCHCODEC_SPEC ?= torchcodec==0.13.*
PYTEST_ARGS ?=

.PHONY: build system-deps test demo bench bench-local bench-remote bench-remote-s3 bench-loader bench-multinode bench-av bench-lerobot bench-lerobot-train bench-lerobot-parity bench-lerobot-images bench-threads bench-stages bench-remote-long clean

build: $(STAMP)

system-deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	$(PYTHON) -c "import venv, ensurepip" 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
	fi

$(STAMP): $(NATIVE_SOURCES) pyproject.toml
	@$(MAKE) --no-print-directory system-deps
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=77" wheel "Cython>=3.0" "pkgconfig>=1.5"
	$(PY) -m pip install -q "$(TORCH_SPEC)" "$(TORCHCODEC_SPEC)"
	$(PY) -m pip install -q --no-build-isolation -e ".[test,torch]"
	$(PY) setup.py -q build_ext --inplace
	@touch $(STAMP)

# The suite in the tree, spread over the cores (pytest-xdist; tests/media.py shares
# the generated videos between the workers), and the package as users install it: a
# wheel built from a clean copy, installed into fresh virtualenvs outside the tree
# (Python 3.11, and 3.12 where the machine has it). The wheel builds at the lowest
# CPU priority while the suite runs: it takes the cycles the suite leaves idle
# (waiting on agents, restarts, timeouts) and the suite's own timing is unchanged.
# Its report prints after the suite's. It prints how long it all took.
PYTEST_WORKERS ?= auto
test: build
	@start=$$(date +%s); report=$$(mktemp); \
	nice -n 19 $(PY) -m tests.install_check >$$report 2>&1 & wheel=$$!; \
	$(PY) -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS); suite=$$?; \
	wait $$wheel; installed=$$?; cat $$report; rm -f $$report; \
	[ $$suite = 0 ] || { echo "make test: the suite failed"; exit 1; }; \
	[ $$installed = 0 ] || { echo "make test: the installed wheel failed its checks"; exit 1; }; \
	echo "make test: passed in $$(( $$(date +%s) - start )) s"

demo: build
	$(PY) -m fluxon_video demo

BENCH_STAMP := $(VENV)/.fluxon-bench-installed
BENCH_ARGS ?=

$(BENCH_STAMP): $(STAMP) pyproject.toml bench/install_peers.py
	$(PY) bench/install_peers.py
	@touch $@

# The benchmark, one runner over declarative cases (bench/matrix.py, bench/cases.py): local
# files (suite local), the remote store on short clips and on long videos (suites remote,
# remote-long), LeRobot's own datasets (suite lerobot). `make bench BENCH_ARGS=--quick`
# is the smoke run of all four.
bench: bench-local bench-remote bench-remote-long bench-lerobot

# Local files (~10 min; --quick ~3 min): fluxon vs decord/torchcodec/PyAV, decode floor,
# read_many; writes bench/results/latest.{md,json} and charts.
bench-local: build $(BENCH_STAMP)
	$(PY) bench/matrix.py --suite local $(BENCH_ARGS)

# Remote-store benchmark (~10 min; --quick ~2 min): fluxon through the agent vs
# PyAV/torchcodec/decord over fsspec HTTP at 0, 2 and 10 ms per request and 50 MB/s per
# connection; writes bench/results/remote.{md,json} and charts.
bench-remote: build $(BENCH_STAMP)
	$(PY) bench/matrix.py --suite remote $(BENCH_ARGS)

# The same with an object-store origin (~16 min, +3 min the first time for the long videos; --quick ~3 min): moto's S3 server behind a
# proxy that adds 10 ms per request and the 50 MB/s-per-connection relay; fluxon through an
# agent with an s3:// export vs PyAV/torchcodec over s3fs and obstore, short and 2-minute
# videos; writes bench/results/remote-s3.{md,json} and charts.
bench-remote-s3: build $(BENCH_STAMP)
	$(PY) bench/matrix.py --suite remote-s3 $(BENCH_ARGS)

# The remote store on long videos (~12 min): random clips, a new open each, of four
# 2-minute videos (720p H.264 GOP 250 and 120, 1080p HEVC GOP 60, 1080p H.264 GOP 250)
# at 10 ms and 50 MB/s per connection, with a small clips workload beside them;
# writes bench/results/remote-long/remote.{md,json} and charts.
bench-remote-long: build $(BENCH_STAMP)
	$(PY) bench/matrix.py --suite remote-long $(BENCH_ARGS)

# The DataLoader (~3 min): 2 workers, 24 videos, fluxon through the agent cold, cold with
# the sampler's lookahead and warm vs decord and torchcodec, clips in shuffled order and
# SameVideoBatchSampler's batches; writes bench/results/dataloader.{md,json} and charts.
# Four workers over an S3 export at 10 ms: --suite loader-s3.
bench-loader: build $(BENCH_STAMP)
	$(PY) bench/matrix.py --suite loader $(BENCH_ARGS)

# Multi-node benchmark (~1 min): 3 node processes share a 3-master Redis Cluster and one
# agent (node 1 cold, nodes 2-3 warm, then an epoch on all three together); writes
# bench/results/multinode.{md,json}. Needs only the build (redis-server and redis-cli).
bench-multinode: build
	$(PY) bench/multinode.py $(BENCH_ARGS)

# A-V clips (~4 min; --quick ~1 min): a 2 s clip's 16 frames at 224x224 and its audio at
# 16 kHz mono, fluxon vs torchcodec (VideoDecoder + AudioDecoder), PyAV and decord's
# AVReader on local files and through the remote-store model (10 ms, 50 MB/s), frames and
# samples checked against the ffmpeg CLI; writes bench/results/av.{md,json} and charts.
bench-av: build $(BENCH_STAMP)
	$(PY) bench/matrix.py --suite av $(BENCH_ARGS)

# LeRobot's own datasets (~20 min; --quick ~3 min, local only): LeRobot 0.6.1 (its own
# virtualenv under bench/.data, made on first use) writes a v3 dataset (AV1, 2 cameras);
# its LeRobotDataset (torchcodec, pyav) vs fluxon_video.lerobot's: DataLoader clips and
# 16-row batches at 0 and 2 workers and plain ds[i], locally, then fluxon through an S3
# export (10 ms, 50 MB/s) cold and warm; writes bench/results/lerobot.{md,json}.
bench-lerobot: build $(BENCH_STAMP)
	$(PY) bench/matrix.py --suite lerobot $(BENCH_ARGS)

# LeRobot's own training script, lerobot-train (~11 min): ACT for 12 steps with LeRobot's
# dataset, then with fluxon_video.lerobot's swapped in (local folder; agent + Redis);
# every batch and loss must agree; writes bench/results/lerobot-train.{md,json}.
bench-lerobot-train: build $(BENCH_STAMP)
	$(PY) bench/lerobot_train.py $(BENCH_ARGS)

# Image and depth cameras and language annotations (~1 min): LeRobot writes a dataset with
# them and reads every row; fluxon_video.lerobot's items must equal its, value for value;
# writes bench/results/lerobot-parity.json.
bench-lerobot-parity: build $(BENCH_STAMP)
	$(PY) bench/lerobot_parity.py $(BENCH_ARGS)

# An image-camera dataset (~6 min): LeRobot writes 1,200 rows of 480x640 PNGs; LeRobot and
# fluxon_video.lerobot read the same batches with 0 and 2 workers, peak RSS and items/s;
# writes bench/results/lerobot-images.json.
bench-lerobot-images: build $(BENCH_STAMP)
	$(PY) bench/lerobot_images.py $(BENCH_ARGS)

# Decoder threads (~10 min; --quick ~1 min): random clips of 1080p H.264 and HEVC at
# 224x224 with 1, 2 and auto threads, fluxon vs PyAV, torchcodec, decord and SPDL at the
# same setting; writes bench/results/threads.{md,json} and a chart.
bench-threads: build $(BENCH_STAMP)
	$(PY) bench/matrix.py --suite threads $(BENCH_ARGS)

# Where a clip's time goes (~2 min; installs linux-perf when missing): each missed speed target's contenders on
# a local file under `perf record`, CPU ms per clip split into decode, convert, demux,
# Python, kernel...; writes bench/results/stages.{md,json}.
bench-stages: build $(BENCH_STAMP)
	@$(MAKE) --no-print-directory system-deps APT_PACKAGES=linux-perf
	$(PY) bench/stages.py $(BENCH_ARGS)

clean:
	rm -rf build dist *.egg-info fluxon_video/*.so .pytest_cache \
	       $(patsubst %.pyx,%.c,$(wildcard fluxon_video/*.pyx))
