"""Which vLLM model runner and attention backend a rollout engine runs, chosen explicitly and logged.

vLLM picks both by itself when left alone: Model Runner V2 wherever Triton imports (the CPU build falls back to
V1), and the first attention backend that accepts the head size and dtype. Left alone, a GPU engine would run code
that no test here has run, and an fp32 engine would fail on FlashAttention, which has no float32 kernels. So:

- model runner (`rollout.model_runner`): `v1` by default, the runner whose `get_model()` and layerwise reload the
  weight sync is tested against (actors/weight_sync/worker_extension.py); `v2` opts in. Passed as
  VLLM_USE_V2_MODEL_RUNNER, which the engine's processes read when they start.
- attention backend (`rollout.attention_backend`, a name of vLLM 0.32's `AttentionBackendEnum`): '' chooses
  FLASH_ATTN for bf16/fp16 and TRITON_ATTN for fp32 on a GPU (both accept the dtype there), and vLLM's only CPU
  backend (CPU_ATTN) on CPU. A name that cannot run the dtype is refused by the config's rules (core/config_rules.py)
  before any actor starts, and again by the engine (actors/rollout/rollout_worker.py), which logs what it runs.

Pure (stdlib): the config rules use it.
"""
from __future__ import annotations

MODEL_RUNNERS = ("v1", "v2")
# vLLM 0.32 attention backends for dense decoder models, with the dtypes their kernels accept
ATTENTION_DTYPES = {
    "FLASH_ATTN": ("float16", "bfloat16"),
    "FLASHINFER": ("float16", "bfloat16"),
    "TRITON_ATTN": ("float16", "bfloat16", "float32"),
    "FLEX_ATTENTION": ("float16", "bfloat16", "float32"),
    "CPU_ATTN": ("float16", "bfloat16", "float32"),
}


def choose(attention_backend: str, model_runner: str, dtype: str, on_gpu: bool) -> dict:
    """{"attention_backend": name, "model_runner": "v1" | "v2", "env": {VLLM_USE_V2_MODEL_RUNNER: "0" | "1"}}
    for an engine of `dtype` ("float32", "bfloat16", "float16"); ValueError naming the key on a bad choice."""
    if model_runner not in MODEL_RUNNERS:
        raise ValueError(f"rollout.model_runner={model_runner!r} is not one of {list(MODEL_RUNNERS)}")
    backend = attention_backend or ("CPU_ATTN" if not on_gpu else "TRITON_ATTN" if dtype == "float32"
                                    else "FLASH_ATTN")
    if backend not in ATTENTION_DTYPES:
        raise ValueError(f"rollout.attention_backend={backend!r} is not one of {sorted(ATTENTION_DTYPES)} ('' chooses)")
    if dtype not in ATTENTION_DTYPES[backend]:
        raise ValueError(f"rollout.attention_backend={backend!r} has no {dtype} kernels (it runs "
                         f"{', '.join(ATTENTION_DTYPES[backend])}); use TRITON_ATTN or FLEX_ATTENTION for {dtype}")
    if on_gpu == (backend == "CPU_ATTN"):
        raise ValueError(f"rollout.attention_backend={backend!r} does not run on {'a GPU' if on_gpu else 'CPU'}")
    return {"attention_backend": backend, "model_runner": model_runner,
            "env": {"VLLM_USE_V2_MODEL_RUNNER": "1" if model_runner == "v2" else "0"}}
