"""The vLLM engine's process environment and backends: what a rollout engine (actors/rollout/rollout_worker.py) sets
before it starts, since vLLM's processes read it when they start."""
from __future__ import annotations

import logging
import os

from actors.rollout.vllm_plugin import OWNER_ENV

log = logging.getLogger("actors.rollout.rollout_worker")

# vLLM executor on CPU. Its CPU default ("mp") runs the model in a worker process beside the engine core
# process; "uni" runs it inside the engine core (one process fewer): an engine starts in 15-19 s instead of
# 26-32 s here (BENCHMARKS.md, "vLLM engine start on CPU"). The model then inherits the actor's thread settings
# (Ray's OMP_NUM_THREADS = the actor's CPUs) instead of vLLM's core binding. vLLM accepts "uni" on CPU only
# with VLLM_ENABLE_V1_MULTIPROCESSING=0, which for AsyncLLM changes nothing else: its engine core is
# always a process of its own.
CPU_EXECUTOR = "uni"


def configure_cpu_env(cfg) -> None:
    """Environment for vLLM (read when the engine's processes start): the project defaults
    (core/env.py: offline hubs, caches under .cache/) where unset, and the KV cache size from
    `cfg.kv_cache_gib` (whole GiB, vLLM parses an int; the config wins over the environment).
    On CPU the model runs inside the engine core process (`CPU_EXECUTOR`), with as many threads as the
    actor's OMP_NUM_THREADS; elsewhere OpenMP binding stays vLLM's `auto` unless set.
    """
    from core.env import apply_defaults

    apply_defaults()
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, int(round(cfg.kv_cache_gib))))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "auto")
    if on_cpu() and CPU_EXECUTOR == "uni":
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    # the worker rarely leaves its busy loop on its own when the core stops; vLLM then SIGTERMs (and
    # SIGKILLs) it after this grace period: 1 s instead of 5. The core, given SHUTDOWN_TIMEOUT_S,
    # still tears down and unlinks its shared memory afterwards (checked by test_rollout).
    os.environ.setdefault("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", "1")
    # the engine's processes die with this one, even when it is SIGKILLed (actors/rollout/vllm_plugin.py)
    os.environ[OWNER_ENV] = str(os.getpid())
    if on_cpu() and cfg.enforce_eager:
        # vLLM still torch.compiles two sampler helpers (token ranks of the returned log-probs, random sampling):
        # on a fresh machine inductor spends ~12 s building their C++ kernels at the first request; eager, their
        # cost at these vocabulary sizes is nothing (torch's `_optimize` reads this variable when vLLM's modules
        # decorate them, i.e. when the engine is created below)
        os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")


def engine_backends(cfg, dtype: str, worker_index: int) -> dict:
    """The model runner and attention backend of this engine (core/engine_backends.py), logged; the runner's env var
    is set for the engine's processes, which read it when they start."""
    from core.engine_backends import choose

    choice = choose(cfg.attention_backend, cfg.model_runner, dtype, on_gpu=not on_cpu())
    os.environ.update(choice["env"])
    log.warning("rollout[%d]: vLLM model runner %s, attention backend %s (dtype %s)",
                worker_index, choice["model_runner"], choice["attention_backend"], dtype)
    return choice


def on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()
