# The README's two commands. Each sets up what is missing (scripts/setup.sh is idempotent), then runs.
ARGS ?=
.PHONY: setup setup-gpu train test image
setup:
	@bash scripts/setup.sh
# NVIDIA GPUs: requirements/gpu.txt into .venv, after checking that the NVIDIA driver is new enough for its CUDA build.
setup-gpu:
	@bash scripts/setup.sh --gpu
train: setup
	.venv/bin/python -m driver.train default $(ARGS)
test: setup
	.venv/bin/python -m pytest --durations=20 $(ARGS)
# The CPU image, genselect-rl:<version>-cpu, on a locally bootstrapped Debian (docs/cluster.md, "Containers");
# `sh cluster/image/build.sh gpu` builds the GPU one, BASE=official uses the official Ray base image.
image: setup
	sh cluster/image/build.sh cpu
